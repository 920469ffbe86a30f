"""Tools the agent can call: the base, the registry, and the built-in tools."""

from agent.tools.base import Tool, ToolContext, ToolRegistry, tool

__all__ = ["Tool", "ToolContext", "ToolRegistry", "tool"]

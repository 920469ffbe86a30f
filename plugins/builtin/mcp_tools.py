"""Built-in plugin: ``/tools`` (DESIGN §1.4, §13): the tools this chat's model may use, built-in, plugins' and
each MCP server's with its state."""

from __future__ import annotations

from dispatcher.commands import CommandRequest
from plugins.hookspecs import hookimpl


@hookimpl
def register_commands(register) -> None:
    """Register /tools."""
    register("tools", tools_command, "the tools this chat's model may use, and each MCP server's state")


async def tools_command(request: CommandRequest) -> str:
    """The registered tools, then one line per MCP server this chat may use."""
    services = request.services
    names = [t.name for t in services.tools.tools()]
    lines = ["Tools for this chat:", "built-in and plugins: " + (", ".join(names) or "none")]
    mcp = services.mcp
    servers = mcp.lines(request.session, request.message) if mcp is not None else []
    if servers:
        lines.append("MCP servers:")
        lines.extend(servers)
    elif mcp is not None and mcp.servers:
        lines.append("MCP servers: none for this chat (an admin sets which chats may use them: mcp_servers' chats).")
    return "\n".join(lines)

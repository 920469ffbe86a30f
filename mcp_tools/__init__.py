"""MCP tools (DESIGN §13): the tools of the Model Context Protocol servers named in ``mcp_servers``.

``server.py`` keeps one server's connection through the official ``mcp`` SDK's client (stdio, Streamable
HTTP, SSE), restarts it with the project's retry policy and calls its tools; ``manager.py`` runs them all,
starts and stops them with the app and follows config changes; ``results.py`` turns a tool's result into
the text the model reads; ``selection.py`` offers each turn the tools its chat may use, narrowed to those
relevant to the message when their schemas would take too much of the window, with ``find_tools``;
``status.py`` is the one line per server that ``/tools`` and the console show.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.tools.base import AdminCheck, ToolRegistry
    from config.settings import ConfigHolder
    from mcp_tools.manager import McpManager


def install(config: ConfigHolder, admins: AdminCheck, tools: ToolRegistry) -> McpManager:
    """The manager of the ``mcp_servers`` (started and stopped by the app), its tools offered to each turn through
    ``tools``' selector."""
    from mcp_tools.manager import McpManager
    from mcp_tools.selection import McpToolSelector, embedder_for

    logging.getLogger("mcp").setLevel(logging.WARNING)  # the SDK's INFO lines (session ids) are chatter
    manager = McpManager(config, admins, log_dir=config().data_path() / "mcp")
    tools.selector = McpToolSelector(manager, config, embedder_for(config))
    return manager

"""The line ``/tools`` and the console show for a server (DESIGN §13): ``<name>: <state> (<n> tools): <tool>, …``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp_tools.server import McpServer

#: A line lists at most this many tool names, then says how many more.
SHOWN_TOOLS = 20


def server_line(server: McpServer) -> str:
    """``<name>: <state> (<n> tools): <tool>, …``."""
    names = [t.name for t in server.tools]
    n = len(names)
    head = f"{server.name}: {server.state} ({n} tool{'' if n == 1 else 's'})"
    if not names:
        return head
    shown = ", ".join(names[:SHOWN_TOOLS])
    if n > SHOWN_TOOLS:
        shown += f", … ({n - SHOWN_TOOLS} more)"
    return f"{head}: {shown}"

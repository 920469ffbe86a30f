"""The tools page (DESIGN §11, §13): the built-in and plugins' tools, and one line per MCP server as ``/tools``
shows it, with its calls (failed ones too), its restarts and its last errors."""

from __future__ import annotations

import logging

from aiohttp import web

from console.server import console_of

logger = logging.getLogger(__name__)


def add_routes(router: web.UrlDispatcher) -> None:
    """Register the tools page."""
    router.add_get("/tools", tools_page)


async def tools_page(request: web.Request) -> web.StreamResponse:
    """Every tool and every MCP server, whatever chat may use it."""
    from mcp_tools.status import server_line

    console = console_of(request)
    services = console.services
    builtin = [t.name for t in services.tools.tools()]
    mcp = services.mcp
    zone = services.config().zone()
    servers = []
    for server in (mcp.servers.values() if mcp is not None else ()):
        cfg = server.config
        servers.append({
            "line": server_line(server), "name": server.name, "state": server.state, "kind": cfg.kind,
            "where": cfg.url or " ".join([cfg.command, *cfg.args]),
            "chats": ", ".join(cfg.chats) if cfg.chats is not None else
            ("admins' private chats" if cfg.kind == "stdio" else "every chat"),
            "calls": server.calls, "failed": server.failed_calls, "restarts": server.restarts,
            "errors": [(e.at.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S"), e.text) for e in reversed(server.errors)],
        })
    return console.render(request, "tools.html", title="Tools", builtin=builtin, servers=servers, zone=str(zone))

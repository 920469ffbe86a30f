"""Every configured MCP server: started with the bot, stopped with it, following ``config.json`` edits, and the
tools each chat may use (DESIGN §13).

A server's tools are named ``<server>__<tool>`` (characters the model API does not take become ``_``), so two
servers' tools never clash with each other or with the built-in ones. ``chats`` limits a server to some
sessions (a session id, a whole group as ``<channel>:group:<chat id>``, or ``"*"``); without it a server that
runs a program on this machine (stdio) serves the admins' private chats only, and a URL server every chat.
Each process runs its own stdio servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.tools.base import Tool, ToolContext
from config.mcp_servers import McpServerConfig
from core.messages import IncomingMessage
from core.records import SessionInfo
from core.retry import RetryPolicy
from mcp_tools.states import PING_INTERVAL, RESTART

if TYPE_CHECKING:
    from agent.tools.base import AdminCheck
    from config.settings import Config, ConfigHolder
    from mcp_tools.server import McpServer

logger = logging.getLogger(__name__)

#: The model API's tool names: ``^[a-zA-Z0-9_-]{1,64}$``.
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]")
#: A tool description longer than this is cut (some servers document a tool in pages).
DESCRIPTION_CHARS = 1024


def tool_name(server: str, tool: str) -> str:
    """``<server>__<tool>`` as the model API accepts it."""
    return f"{server}__{_NOT_IN_NAME.sub('_', tool)}"[:64]


class McpManager:
    """Runs the servers of ``mcp_servers`` and hands each turn the tools its chat may use."""

    def __init__(self, config: ConfigHolder, admins: AdminCheck | None = None, *, log_dir: Path | None = None,
                 policy: RetryPolicy = RESTART, ping_interval: float = PING_INTERVAL) -> None:
        self.config = config
        self.admins = admins
        self.log_dir = log_dir
        self.policy = policy
        self.ping_interval = ping_interval
        self.servers: dict[str, McpServer] = {}
        #: bumped whenever a server's tools change (the selection's caches follow it)
        self.version = 0
        self._tools: dict[str, list[Tool]] = {}
        self._running = False
        self._apply_lock = asyncio.Lock()
        self._pending: set[asyncio.Task[None]] = set()
        #: called (on the event loop) after a server's tools changed
        self.listeners: list[Callable[[], None]] = []
        config.on_change(self._config_changed)

    # --- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start every enabled server at once, and wait for each at most its ``timeout_seconds`` (one that is
        not up by then goes on starting, or restarting, in the background)."""
        self._running = True
        await self._apply(self.config().mcp_servers)

    async def stop(self) -> None:
        """Stop every server (in parallel) and stop following config changes."""
        self._running = False
        for task in list(self._pending):
            task.cancel()
        servers, self.servers = list(self.servers.values()), {}
        await asyncio.gather(*(s.stop() for s in servers), return_exceptions=True)
        self._changed()

    def _config_changed(self, old: Config, new: Config) -> None:
        if not self._running or old.mcp_servers == new.mcp_servers:
            return
        task = asyncio.get_running_loop().create_task(self._apply(new.mcp_servers), name="mcp servers changed")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _apply(self, wanted: dict[str, McpServerConfig]) -> None:
        """Stop the servers no longer configured (or configured differently), start the new ones."""
        async with self._apply_lock:
            gone = [s for name, s in self.servers.items() if wanted.get(name) != s.config]
            for server in gone:
                del self.servers[server.name]
            await asyncio.gather(*(s.stop() for s in gone), return_exceptions=True)
            for server in gone:
                logger.info("mcp server %s: stopped (its configuration changed)", server.name)
            new = []
            starting = {name: entry for name, entry in wanted.items() if name not in self.servers}
            if starting:
                # the SDK takes seconds and ~40 MB to import: off the event loop, and only when a server is configured
                try:
                    await asyncio.to_thread(importlib.import_module, "mcp_tools.server")
                except ImportError as exc:
                    logger.error("mcp_servers cannot start: the mcp package cannot be imported (%s); install the "
                                 "requirements again: python -m pip install -r requirements.txt", exc)
                    return
                from mcp_tools.server import McpServer

                for name, entry in starting.items():
                    server = self.servers[name] = McpServer(name, entry, log_dir=self.log_dir, policy=self.policy,
                                                            ping_interval=self.ping_interval,
                                                            on_tools=self._changed)
                    server.start()
                    new.append(server)
            self._changed()
            await asyncio.gather(*(self._started(s) for s in new))

    @staticmethod
    async def _started(server: McpServer) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(server.config.timeout_seconds + 1):
                await server.started()

    def _changed(self) -> None:
        self.version += 1
        self._tools.clear()
        for listener in self.listeners:
            try:
                listener()
            except Exception:  # noqa: BLE001 - a listener must not stop a server's task
                logger.exception("a listener of the MCP tools failed")

    def all_tools(self) -> list[Tool]:
        """Every running server's tools, whoever may use them."""
        return [t for server in self.servers.values() if server.tools for t in self._server_tools(server)]

    # --- what a chat may use ----------------------------------------------------------------------
    def may_use(self, server: McpServer, info: SessionInfo | None, message: IncomingMessage | None = None) -> bool:
        """Whether the session may use the server's tools (``chats``, or its default)."""
        chats = server.config.chats
        if info is None:
            return False
        if chats is None:
            if server.config.kind != "stdio":
                return True
            return not info.is_group and self._is_admin(info, message)
        for entry in chats:
            if entry == "*" or entry == info.session_id:
                return True
            if info.is_group and entry == f"{info.channel}:group:{info.chat_id}":
                return True
        return False

    def _is_admin(self, info: SessionInfo, message: IncomingMessage | None) -> bool:
        if self.admins is None:
            return False
        if message is None or message.channel != info.channel:
            message = IncomingMessage(channel=info.channel, chat_id=info.chat_id, user_id=info.user_id or info.chat_id,
                                      text="")
        return self.admins.is_admin(message)

    def tools_for(self, info: SessionInfo | None, message: IncomingMessage | None = None) -> list[Tool]:
        """The running servers' tools this session may use (``message``: the one being answered, whose sender
        an admins-only server checks; None outside a chat turn)."""
        out: list[Tool] = []
        for server in self.servers.values():
            if server.tools and self.may_use(server, info, message):
                out.extend(self._server_tools(server))
        return out

    def _server_tools(self, server: McpServer) -> list[Tool]:
        tools = self._tools.get(server.name)
        if tools is None:
            tools = self._tools[server.name] = [_as_tool(server, t) for t in server.tools]
        return tools

    def lines(self, info: SessionInfo | None = None, message: IncomingMessage | None = None) -> list[str]:
        """One line per server for ``/tools`` and the console (DESIGN §13): ``<name>: <state> (<n> tools): …``;
        with ``info``, only the servers that session may use."""
        from mcp_tools.status import server_line

        return [server_line(s) for s in self.servers.values() if info is None or self.may_use(s, info, message)]


def _as_tool(server: McpServer, tool: Any) -> Tool:
    """One of the server's tools as the agent's :class:`Tool`."""
    remote = tool.name

    async def call(ctx: ToolContext, **arguments: Any) -> str:
        return await server.call(remote, arguments)

    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    description = (tool.description or tool.title or remote).strip()
    if len(description) > DESCRIPTION_CHARS:
        description = description[:DESCRIPTION_CHARS - 1] + "…"
    return Tool(name=tool_name(server.name, remote), description=description, parameters=schema, function=call)



"""One MCP server's connection, kept alive by its own task (DESIGN §13).

The task connects through the official SDK (``stdio_client`` for a command; ``streamable_http_client`` or
``sse_client`` for a URL), initialises a :class:`mcp.ClientSession`, lists the tools, and then watches the
connection: a ``tools/list_changed`` notification lists them again; a failed ping, or a call that finds the
connection closed, ends it. A server that fails to start or dies is one log line (the traceback goes to the
log file only), its tools leave the requests at once, and it is started again after the project's retry
policy's backoff (``core/retry.py``), for as long as the bot runs. Calls come from the turns' tasks; each has
the server's ``timeout_seconds`` and is cancelled with its turn.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from config.mcp_servers import McpServerConfig
from core.retry import RetryPolicy
from mcp_tools.results import result_text
from mcp_tools.states import (
    DISABLED,
    FAILED,
    KEPT_ERRORS,
    PING_INTERVAL,
    RESTART,
    RESTARTING,
    RUNNING,
    STARTING,
    ServerError,
)

logger = logging.getLogger(__name__)

class ServerDown(Exception):
    """The connection ended (the server exited, the network failed, a ping went unanswered)."""


class McpServer:
    """One configured server: its state, its tools, its counters, and the task that keeps it connected."""

    def __init__(self, name: str, config: McpServerConfig, *, log_dir: Path | None = None,
                 policy: RetryPolicy = RESTART, ping_interval: float = PING_INTERVAL,
                 on_tools: Callable[[], None] | None = None) -> None:
        self.name = name
        self.config = config
        self.policy = policy
        self.ping_interval = ping_interval
        self.log_dir = log_dir
        #: called when the tools change (listed, list_changed, the server went down)
        self.on_tools = on_tools
        self.state = DISABLED if not config.enabled else STARTING
        #: the server's tools that ``tools`` permits, as it listed them
        self.tools: list[types.Tool] = []
        self.errors: collections.deque[ServerError] = collections.deque(maxlen=KEPT_ERRORS)
        self.calls = 0
        self.failed_calls = 0
        self.restarts = 0
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._settled = asyncio.Event()  # the first start ended: running, or failed
        self._down = asyncio.Event()
        self._changed = asyncio.Event()

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the task that connects (and reconnects) the server."""
        if self.state == DISABLED or self._task is not None:
            self._settled.set()
            return
        self._task = asyncio.create_task(self._keep(), name=f"mcp server {self.name}")

    async def started(self) -> None:
        """Wait until the first start ended (running or failed); bounded by the caller."""
        await self._settled.wait()

    async def stop(self) -> None:
        """Close the connection (a stdio server's process ends with it) and stop restarting."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._session = None
        self._set_tools([])

    # --- the connection ---------------------------------------------------------------------------
    async def _keep(self) -> None:
        failures = 0
        while True:
            began = time.monotonic()
            failure: Exception | None = None
            try:
                await self._connect_and_watch()
                reason = "the connection closed"
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - anyio groups, OSError, MCPError, …: one log line each
                reason, failure = describe(exc), exc
            was_running = self.state == RUNNING
            self._session = None
            self._set_tools([])
            self._remember(reason)
            # a server that ran a while starts its backoff again from the first wait
            failures = 1 if was_running and time.monotonic() - began > self.policy.cap else failures + 1
            delay = self.policy.delay(failures)
            self.state = RESTARTING if was_running else FAILED
            what = "stopped" if was_running else "failed to start"
            # the traceback of the first failure in a row goes to bot.log (the console shows the line only)
            details = failure if failure is not None and failures == 1 and not isinstance(failure, ServerDown) \
                else None
            logger.warning("mcp server %s %s: %s; its tools are withdrawn; restarting in %.0f s", self.name, what,
                           reason, delay, exc_info=details)
            self._settled.set()
            await asyncio.sleep(delay)
            self.restarts += 1

    async def _connect_and_watch(self) -> None:
        self._down.clear()
        self._changed.clear()
        async with contextlib.AsyncExitStack() as stack:
            # the transports connect lazily (stdio spawns, HTTP sends nothing yet, SSE has its own timeout):
            # the server's timeout bounds its answers, not entering these contexts (a cancel scope around them
            # would outlive its block)
            read, write = await stack.enter_async_context(self._transport(stack))
            session = await stack.enter_async_context(ClientSession(read, write, message_handler=self._notice))
            with anyio.fail_after(self.config.timeout_seconds):
                await session.initialize()
                listed = await self._list(session)
            self._session = session
            self._set_tools(listed)
            self.state = RUNNING
            logger.info("mcp server %s: running (%d tools)", self.name, len(self.tools))
            self._settled.set()
            await self._watch(session)

    def _transport(self, stack: contextlib.AsyncExitStack):
        cfg = self.config
        kind = cfg.kind
        if kind == "stdio":
            params = StdioServerParameters(command=cfg.command, args=cfg.args, env=cfg.env or None,
                                           cwd=cfg.cwd or None)
            return stdio_client(params, errlog=self._errlog(stack))
        if kind == "sse":
            return sse_client(cfg.url, headers=cfg.headers or None, timeout=cfg.timeout_seconds)
        client = create_mcp_http_client(headers=cfg.headers or None)
        return _owning(client, streamable_http_client(cfg.url, http_client=client))

    def _errlog(self, stack: contextlib.AsyncExitStack) -> TextIO:
        """Where a stdio server's stderr goes: ``<data_dir>/mcp/<name>.log`` (never the bot's console)."""
        if self.log_dir is None:
            return stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 - closed by the stack
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.log_dir / f"{self.name}.log"
        fd = os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600)
        return stack.enter_context(os.fdopen(fd, "a", encoding="utf-8"))

    async def _list(self, session: ClientSession) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return [t for t in tools if self.config.tools.permits(t.name)]

    async def _watch(self, session: ClientSession) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.ping_interval):
                    await _first(self._down.wait(), self._changed.wait())
            if self._down.is_set():
                raise ServerDown("the connection closed")
            # a short timeout_seconds is for calls: a busy machine must not make an idle server look dead
            with anyio.fail_after(max(self.config.timeout_seconds, self.ping_interval)):
                if self._changed.is_set():
                    self._changed.clear()
                    self._set_tools(await self._list(session))
                    logger.info("mcp server %s: tools changed (%d tools)", self.name, len(self.tools))
                else:
                    await session.send_ping()

    async def _notice(self, message: Any) -> None:
        """The session's notifications: a changed tool list is listed again by the watching task."""
        if isinstance(message, types.ToolListChangedNotification):
            self._changed.set()
        elif isinstance(message, Exception):
            logger.debug("mcp server %s: transport error: %s", self.name, message)

    def _set_tools(self, tools: list[types.Tool]) -> None:
        self.tools = tools
        if self.on_tools is not None:
            self.on_tools()

    def _remember(self, text: str) -> None:
        self.errors.append(ServerError(datetime.now(UTC), text))

    # --- calls ------------------------------------------------------------------------------------
    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Call one of the server's tools; errors come back as ``Error: …`` text for the model, never raised."""
        session = self._session
        self.calls += 1
        if session is None or self.state != RUNNING:
            self.failed_calls += 1
            return f"Error: the MCP server {self.name!r} is {self.state} now; try again later."
        timeout = self.config.timeout_seconds
        try:
            with anyio.fail_after(timeout):
                result = await session.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except TimeoutError:
            text = f"the MCP server {self.name!r} did not answer {tool} within {timeout:g} s"
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                self._down.set()
                text = f"the MCP server {self.name!r} closed the connection during {tool}"
            elif exc.code == types.REQUEST_TIMEOUT:
                text = f"the MCP server {self.name!r} did not answer {tool} within {timeout:g} s"
            else:
                text = f"the MCP server {self.name!r} refused {tool}: {exc.error.message}"
        except Exception as exc:  # noqa: BLE001 - a transport failure: the model gets the error, the turn goes on
            text = f"the call of {tool} on the MCP server {self.name!r} failed: {describe(exc)}"
        else:
            if not isinstance(result, types.CallToolResult):
                self.failed_calls += 1
                return f"Error: the MCP server {self.name!r} answered {tool} with an unexpected result"
            if result.is_error:
                self.failed_calls += 1
            return result_text(result)
        self.failed_calls += 1
        self._remember(text)
        logger.warning("mcp server %s: %s", self.name, text)
        return f"Error: {text}."


@contextlib.asynccontextmanager
async def _owning(client: Any, transport: Any):
    """The Streamable HTTP transport with its own HTTP client (headers set), closed after it."""
    async with client, transport as streams:
        yield streams


async def _first(*waits: Any) -> None:
    """Return when the first of ``waits`` is done; cancel the others."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def describe(exc: BaseException) -> str:
    """One line for a failure (the first leaf of an exception group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, ServerDown):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "no answer within its timeout_seconds"
    if isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED:
        return "the server closed the connection (did it exit? see its log)"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__




"""What the fakes of Feishu and DingTalk share: an aiohttp server on a free loopback port, run on its own event
loop in a background thread, that pushes users' messages to the bot over one WebSocket and redelivers each until
it is acked with 200, as both platforms do (tests/fakes/feishu_server.py, tests/fakes/dingtalk_server.py).

A subclass adds its routes (:meth:`PushServer._routes`), puts each pushed message in the queue with
:meth:`PushServer._queue`, and in its WebSocket handler runs :meth:`PushServer._push` (which encodes frames as
that platform does) and calls :meth:`PushServer._acked` for each ack.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tests.fakes.loopback_server import LoopbackServer


class PushServer(LoopbackServer):
    """The queue of pushed messages (redelivered until acked) and the waits of a push fake."""

    #: the thread's name, and what a failed start names
    name = "push server"

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        #: frames not acked yet, in order: (frame id, payload)
        self.pending: list[tuple[str, Any]] = []
        #: frame id -> how many times it was sent to a client; and acked
        self.deliveries: dict[str, int] = {}
        self.acked: dict[str, int] = {}
        #: the platform's message id of each pushed message -> its frame id
        self.frames_of: dict[str, str] = {}
        #: every request: (method, path)
        self.requests: list[tuple[str, str]] = []
        self.connections = 0
        self._payloads: dict[str, Any] = {}
        #: frame ids sent on the current connection and not answered yet
        self._in_flight: set[str] = set()
        self._ws: web.WebSocketResponse | None = None
        self._wake: asyncio.Event | None = None

    # --- lifecycle ------------------------------------------------------------------------------
    async def _serving(self) -> None:
        self._wake = asyncio.Event()

    async def _closing(self) -> None:
        """The WebSocket is closed."""
        await self._close_ws()

    async def _close_ws(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()

    def drop_connection(self) -> None:
        """Close the bot's WebSocket from the server's side (a network blip): the SDK connects again."""
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._close_ws(), self._loop).result(5)


    # --- the queue (tests push from any thread) ---------------------------------------------------
    def _queue(self, message_id: str, frame_id: str, payload: Any) -> None:
        """Push a user's message (``payload``, as the platform frames it) to the bot."""
        with self._lock:
            self.pending.append((frame_id, payload))
            self._payloads[frame_id] = payload
            self.frames_of[message_id] = frame_id
        self._kick()

    def redeliver(self, message_id: str) -> None:
        """Send an acked message again (both platforms redeliver at times): same frame, same ids."""
        frame_id = self.frames_of[message_id]
        with self._lock:
            self.pending.append((frame_id, self._payloads[frame_id]))
        self._kick()

    def _kick(self) -> None:
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    def wait_acked(self, message_id: str, times: int = 1, timeout: float = 20.0) -> None:
        """Wait until the message ``message_id`` was acked ``times`` times."""
        frame = self.frames_of[message_id]
        self.wait(lambda: self.acked.get(frame, 0) >= times, timeout, f"{times} acks of {message_id}")

    @staticmethod
    def wait(check: Callable[[], Any], timeout: float, what: str) -> None:
        """Wait until ``check()`` holds; TimeoutError naming ``what`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:.0f} s for {what}")
            time.sleep(0.02)

    # --- the WebSocket ----------------------------------------------------------------------------
    async def _connected(self, ws: web.WebSocketResponse) -> None:
        """A new connection replaces the one before (the platforms keep one per app and client)."""
        old, self._ws = self._ws, ws
        if old is not None:
            await old.close()
        self.connections += 1

    def _disconnected(self, ws: web.WebSocketResponse) -> None:
        if self._ws is ws:
            self._ws = None
        self._in_flight.clear()

    def _acked(self, frame_id: str, code: Any) -> None:
        """The bot answered frame ``frame_id`` with ``code``: 200 takes it out of the queue; any answer ends its
        flight on this connection."""
        if code == 200:
            with self._lock:
                self.acked[frame_id] = self.acked.get(frame_id, 0) + 1
                self.pending = [(f, p) for f, p in self.pending if f != frame_id]
        self._in_flight.discard(frame_id)

    async def _push(self, ws: web.WebSocketResponse, send: Callable[[str, Any], Awaitable[None]]) -> None:
        """Send every pending frame not in flight on this connection (``send(frame_id, payload)``), as they
        come, until the connection closes."""
        assert self._wake is not None
        while not ws.closed:
            with self._lock:
                due = [(f, p) for f, p in self.pending if f not in self._in_flight]
            for frame_id, payload in due:
                self._in_flight.add(frame_id)
                with self._lock:
                    self.deliveries[frame_id] = self.deliveries.get(frame_id, 0) + 1
                await send(frame_id, payload)
            self._wake.clear()
            with self._lock:
                more = any(f not in self._in_flight for f, _ in self.pending)
            if not more:
                await self._wake.wait()

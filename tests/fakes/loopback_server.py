"""An aiohttp fake served on a free loopback port from its own thread and event loop, as the tests' side of a
platform: :meth:`LoopbackServer.start` and :meth:`LoopbackServer.stop` (or ``with``), the subclass's routes
(:meth:`LoopbackServer._routes`), and hooks run in the server's loop once it serves and before it stops."""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web


class LoopbackServer:
    """The lifecycle every fake built on aiohttp shares (tests/fakes/push_server.py, tests/fakes/ilink_server.py)."""

    #: the thread's name, and what a failed start names
    name = "fake server"

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """Where the client under test is pointed."""
        return f"http://127.0.0.1:{self.port}"

    def _routes(self, app: web.Application) -> None:
        """Add the platform's routes."""
        raise NotImplementedError

    async def _serving(self) -> None:
        """In the server's loop, once the first site serves and before :meth:`start` returns."""

    async def _closing(self) -> None:
        """In the server's loop, before it stops."""

    async def add_site(self) -> int:
        """Serve the same routes on one more free loopback port (in the server's loop); its port."""
        assert self._runner is not None
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return self._runner.addresses[-1][1]

    def start(self) -> Self:
        """Serve on a free loopback port from a background thread."""
        ready = threading.Event()

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            loop.run_until_complete(self._start_site())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())  # type: ignore[union-attr]
            loop.close()

        self._thread = threading.Thread(target=serve, name=self.name, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"the {self.name} did not start")
        return self

    async def _start_site(self) -> None:
        app = web.Application()
        self._routes(app)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        self.port = await self.add_site()
        await self._serving()

    def stop(self) -> None:
        """Stop serving (after :meth:`_closing`)."""
        loop = self._loop
        if loop is not None and self._thread is not None:
            asyncio.run_coroutine_threadsafe(self._closing(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(10)
        self._loop = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

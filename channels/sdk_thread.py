"""A blocking platform SDK run in a thread of its own, on an asyncio loop of its own.

Feishu's lark-oapi and DingTalk's dingtalk-stream each run their own loop and block, so their channels run them
in a thread: :meth:`SdkThread.start` starts it, :meth:`SdkThread.stop` (on the bot's loop) asks the SDK to end
(``interrupt``, called on the bot's loop with the SDK's loop), waits for the thread at most ``join_timeout_s``
and warns when it did not end (a daemon thread: it ends with the process). While stopping, the SDK's loop drops
the errors its tasks end with (the connection was closed on purpose).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable


class SdkThread:
    """``run(loop)`` in a daemon thread named ``name`` with a fresh event loop, closed when ``run`` returns."""

    def __init__(self, name: str, run: Callable[[asyncio.AbstractEventLoop], None],
                 interrupt: Callable[[asyncio.AbstractEventLoop], object], *, logger: logging.Logger,
                 what: str, join_timeout_s: float = 5.0) -> None:
        self.name = name
        self._run = run
        self._interrupt = interrupt
        self._logger = logger
        #: how the warning names the thread, e.g. "feishu: the connection thread"
        self.what = what
        self.join_timeout_s = join_timeout_s
        #: set from :meth:`stop` until the next :meth:`start`; the SDK's thread reads it
        self.stopping = threading.Event()
        #: the SDK's loop while the thread runs
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> bool:
        """Start the thread; False when it already runs."""
        if self._thread is not None:
            return False
        self.stopping.clear()
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()
        return True

    async def stop(self) -> None:
        """Ask the SDK to end and wait for its thread (at most ``join_timeout_s``); nothing when not started."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self.stopping.set()
        loop = self.loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._interrupt(loop)
        await asyncio.to_thread(thread.join, self.join_timeout_s)
        if thread.is_alive():
            self._logger.warning("%s did not end within %.0f s", self.what, self.join_timeout_s)

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.set_exception_handler(
            lambda lp, context: None if self.stopping.is_set() else lp.default_exception_handler(context))
        self.loop = loop
        try:
            self._run(loop)
        finally:
            loop.close()
            self.loop = None

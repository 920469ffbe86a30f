"""A blocking platform SDK run in a thread of its own, on an asyncio loop of its own.

Feishu's lark-oapi and DingTalk's dingtalk-stream each run their own loop and block, so their channels run them
in a thread: :meth:`SdkThread.start` starts it, :meth:`SdkThread.stop` (on the bot's loop) asks the SDK to end
(``interrupt``, called on the bot's loop with the SDK's loop), waits for the thread at most ``join_timeout_s``
and warns when it did not end (a daemon thread: it ends with the process). While stopping, the SDK's loop drops
the errors its tasks end with (the connection was closed on purpose).

:class:`SdkThreadChannel` is the channel around such a thread (feishu, dingtalk): the end of ``start`` (a problem
is one error line and the channel fails; else it is active and, with ``intake``, receives) and the intake on/off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from abc import abstractmethod
from collections.abc import Callable

from channels.base import BaseChannel


class SdkThread:
    """``run(loop)`` in a daemon thread named ``name`` with a fresh event loop, closed when ``run`` returns."""

    def __init__(self, name: str, run: Callable[[asyncio.AbstractEventLoop], None],
                 interrupt: Callable[[asyncio.AbstractEventLoop], object], *, logger: logging.Logger,
                 what: str, join_timeout_s: float = 5.0) -> None:
        self.name = name
        self._run = run
        self._interrupt = interrupt
        #: the channel's logger: its lines name the channel's module
        self.logger = logger
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
            self.logger.warning("%s did not end within %.0f s", self.what, self.join_timeout_s)

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


class SdkThreadChannel(BaseChannel):
    """A channel that receives through an :class:`SdkThread` and sends without it.

    The subclass gives :meth:`check` (the credentials' one call) and :meth:`intake_place` (where it receives
    from, for the log line); ``start``, ``start_intake``, ``stop_intake`` and ``stop`` are shared. Every line is
    logged with the SDK thread's logger, i.e. under the channel module's name.
    """

    def __init__(self, sdk: SdkThread) -> None:
        super().__init__()
        #: the credentials were accepted (or could not be checked yet): the channel can receive and send
        self.active = False
        self._sdk = sdk

    @abstractmethod
    async def check(self) -> str | None:
        """Before receiving: the problem that keeps the channel off (one line), or None."""

    @abstractmethod
    def intake_place(self) -> str:
        """How the "receiving messages" line names the connection, e.g. "long connection to https://…"."""

    async def start(self, intake: bool = True) -> None:
        """:meth:`check`, then (``intake``) start the SDK's thread. A problem is one error line and the channel
        fails; the other channels keep running."""
        problem = await self.check()
        if problem is not None:
            self._sdk.logger.error("%s: %s; the %s channel is off, the other channels keep running",
                                   self.name, problem, self.name)
            self.fail(problem)
            return
        self.active = True
        if intake:
            await self.start_intake()

    async def start_intake(self) -> bool:
        """Start the SDK's thread (nothing when it runs); False while the channel is off."""
        if not self.active:
            return False
        if self._sdk.start():
            self._sdk.logger.info("%s: receiving messages (%s)", self.name, self.intake_place())
        return True

    async def stop_intake(self) -> None:
        """End the SDK's thread; what was received is journalled first."""
        await self._sdk.stop()
        await self.settle_intake()

    async def stop(self) -> None:
        """Stop receiving; sending needs no connection."""
        try:
            await self.stop_intake()
        finally:
            self.active = False

"""The pump a streamed reply runs (Telegram's and Feishu's): a background task that shows the latest pushed text
at the platform's pace, woken by each push, stopped between two of its platform calls.

Every platform call of a stream happens under its lock, so the pump and ``finish`` never race for the message.
:meth:`PumpedReplyStream._stop_pump` cancels the pump while it holds the lock (so it is not inside a call), and
awaits it after the lock is released: a pump whose cancellation was swallowed all the same (the pump's waits use
``asyncio.timeout``, since ``asyncio.wait_for`` in Python 3.11 swallows one that meets the end of its wait) would
then take the lock, see ``_closed`` and return, instead of waiting for a lock its awaiter holds.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import abstractmethod

from core.messages import ReplyStream


class PumpedReplyStream(ReplyStream):
    """A reply stream whose :meth:`_run` pump shows ``text`` (see the module docstring)."""

    #: the whole text pushed so far
    text: str

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._pump: asyncio.Task | None = None
        self._closed = False

    @abstractmethod
    async def _run(self) -> None:
        """The pump: until ``_closed``, show the latest text (under the lock)."""

    def _wake_pump(self, name: str) -> None:
        """After a push: start the pump (a task named ``name``) if it is not running, and wake it."""
        if self._pump is None:
            self._pump = asyncio.create_task(self._run(), name=name)
        self._wake.set()

    async def _stop_pump(self) -> None:
        """Stop the pump between two of its calls, never in the middle of one (see the module docstring)."""
        self._closed = True
        pump, self._pump = self._pump, None
        if pump is None:
            return
        async with self._lock:
            pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)

    async def _hold_first(self, since: float, chars: int, hold: float) -> None:
        """Before the first message: wait until the text has ``chars`` characters or ``hold`` seconds have passed
        since ``since`` (the loop's time), whichever comes first, so a short answer goes out whole."""
        loop = asyncio.get_running_loop()
        while len(self.text) < chars:
            left = since + hold - loop.time()
            if left <= 0:
                break
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._wake.wait()

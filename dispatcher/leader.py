"""One leader among the processes: it polls Telegram (polling mode) and runs the jobs that must run once.

The leader is whichever process holds the advisory lock ``leader`` (:mod:`store.locks`). Every process
tries to take it every :data:`ELECTION_INTERVAL` seconds; the leader uses the same tick to check that its
connection (and so its lock) is alive. When the leader dies, the server frees the lock at once and the
next tick of another process takes it: a takeover within about ``ELECTION_INTERVAL`` seconds plus the time
its duties take to start. A leader that loses its connection stops its duties before anyone else can
start them again (the lock is gone only once the server noticed, which is when others can take it).

On SQLite the only process is the leader from the start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from store.locks import Locks

logger = logging.getLogger(__name__)

LEADER_LOCK = "leader"
#: Seconds between two election tries (and the leader's liveness checks).
ELECTION_INTERVAL = 3.0

Duty = Callable[[], Awaitable[None]]


class Leadership:
    """Runs ``on_elected`` duties while this process leads, ``on_deposed`` when it stops leading."""

    def __init__(self, locks: Locks, *, interval: float = ELECTION_INTERVAL) -> None:
        self.locks = locks
        self.interval = interval
        self.on_elected: list[Duty] = []
        self.on_deposed: list[Duty] = []
        self.leading = False
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        """Try once now (so a single process leads at once), then keep trying in the background."""
        await self._tick()
        if self._task is None:
            self._task = asyncio.create_task(self._forever(), name="leader-election")

    async def stop(self) -> None:
        """Stop trying; a leader runs its ``on_deposed`` duties and gives the lock back."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.leading:
            await self._depose(None)
            await self.locks.release(LEADER_LOCK)

    async def _forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self._tick()

    async def _tick(self) -> None:
        try:
            if self.leading:
                if not await self.locks.ping() or not self.locks.held(LEADER_LOCK):
                    await self._depose("the coordination connection was lost")
                return
            if await self.locks.try_acquire(LEADER_LOCK):
                self.leading = True
                if self.locks.shared:
                    logger.info("this process is the leader (polling, cleanup)")
                await self._run(self.on_elected, "elected")
        except Exception as exc:  # noqa: BLE001 - the database is away: try at the next tick
            logger.warning("leader election failed (%s: %s); trying again in %.0f s", type(exc).__name__, exc,
                           self.interval)

    async def _depose(self, why: str | None) -> None:
        """Stop leading; ``why`` is logged (None: this process stops)."""
        self.leading = False
        if why is not None:
            logger.warning("this process is no longer the leader: %s", why)
        await self._run(self.on_deposed, "deposed")

    async def _run(self, duties: list[Duty], what: str) -> None:
        for duty in duties:
            try:
                await duty()
            except Exception:  # noqa: BLE001 - one failing duty must not keep the others from running
                logger.exception("a duty on being %s failed", what)

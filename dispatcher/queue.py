"""The per-session queue: one worker per session runs its items in arrival order, sessions in parallel up to
``max_concurrent_turns``; and per session, how many of its items may still append to it (queued or running).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable

from core.workers import KeyedWorkers
from dispatcher.intake import Stage, WorkItem


class Poke:
    """A work item that only asks its session's worker to run a claimed run (several processes)."""

    __slots__ = ()


class SessionQueue:
    """Work items by session: queued in arrival order, each session's run one at a time."""

    def __init__(self, run: Callable[[str, WorkItem | Poke], Awaitable[None]], concurrency: int) -> None:
        # The slot bounds the turns' work (model calls, tools), not the delivery of their replies: a send
        # waits on the channel's own connection pool and rate limits. So a turn takes it itself (slot()).
        self._workers: KeyedWorkers[WorkItem | Poke] = KeyedWorkers(run, concurrency=concurrency, hold_slot=False,
                                                                   name="session")
        #: per session: items queued or running whose turn may still append messages
        self._turns: dict[str, int] = {}
        #: the items counted in ``_turns``, by identity, until their turn is finished
        self._counted: dict[int, WorkItem] = {}

    def enqueue(self, item: WorkItem) -> None:
        """Queue ``item`` on its session's worker; it counts as appending until :meth:`turn_finished`."""
        sid = item.info.session_id
        if id(item) not in self._counted:
            self._counted[id(item)] = item
            self._turns[sid] = self._turns.get(sid, 0) + 1
        self._workers.submit(sid, item)

    def poke(self, session_id: str) -> None:
        """Queue a claimed run of the session (several processes): its unanswered messages get answered."""
        self._workers.submit(session_id, Poke())

    def turn_finished(self, item: WorkItem) -> None:
        """The item will append nothing more to its session: it is :attr:`Stage.ANSWERED`, and no longer counts as
        appending if it was queued here (a claimed run's item read back from the journal never was). Idempotent."""
        item.advance(Stage.ANSWERED)
        if self._counted.pop(id(item), None) is None:
            return
        sid = item.info.session_id
        left = self._turns.get(sid, 0) - 1
        if left > 0:
            self._turns[sid] = left
        else:
            self._turns.pop(sid, None)

    def appending(self, session_id: str) -> bool:
        """True while an item of the session is queued or running and may still append to it."""
        return bool(self._turns.get(session_id))

    def sessions(self) -> list[str]:
        """The sessions with queued or running work."""
        return list(self._workers.keys())

    def queued(self, session_id: str) -> list[WorkItem | Poke]:
        """The session's queued and running items, in order."""
        return list(self._workers.items(session_id))

    def busy(self, session_id: str | None = None) -> bool:
        """True while the session (or any session) has queued or running work."""
        return self._workers.busy(session_id)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One of the ``max_concurrent_turns`` slots, for a turn's work."""
        async with self._workers.slot():
            yield

    async def drain(self, grace: float) -> dict[Hashable, list[WorkItem | Poke]]:
        """Wait up to ``grace`` s for queued work; cancel the rest and return it by session."""
        return await self._workers.drain(grace)

    async def wait_idle(self) -> None:
        """Wait until no session has queued or running work."""
        await self._workers.wait_idle()

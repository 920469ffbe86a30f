"""The per-session queue: one worker per session runs its items in arrival order, sessions in parallel up to
``max_concurrent_turns``; and per session, how many of its items may still append to it (queued or running).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from enum import IntEnum

from core.workers import KeyedWorkers
from dispatcher.intake import Accepted
from dispatcher.journal import Recorded


class Stage(IntEnum):
    """Where a queued message is in this process, in order; it only moves forward."""

    #: accepted (or read back from the journal), waiting for a run of its session
    QUEUED = 0
    #: a run of its session (its worker, or a claimed run with several processes) is answering it
    ANSWERING = 1
    #: its turn appends nothing more to the session; its reply is delivered by the outbox
    ANSWERED = 2


class Ticket:
    """A queued message: its :class:`Accepted` value, its journal write, and where it is (:class:`Stage`).

    This is the one mutable thing of a message's path, and this module its only writer. Everything the
    message becomes is a frozen stage value (dispatcher/intake.py, journal.py, steps.py), but two runs may
    reach the same message: its session's worker, and with several processes a claimed run that reads it
    back (dispatcher/claims.py). Which of them answers is decided here, once, by :meth:`take`; and the
    session stops counting it as appending when it is :attr:`Stage.ANSWERED` (:meth:`SessionQueue.turn_finished`).
    """

    __slots__ = ("accepted", "recorded", "_stage")

    def __init__(self, accepted: Accepted, recorded: asyncio.Future[Recorded]) -> None:
        self.accepted = accepted
        #: the journal write: resolves to the :class:`~dispatcher.journal.Journalled` value, None for a duplicate
        self.recorded = recorded
        self._stage = Stage.QUEUED

    @property
    def stage(self) -> Stage:
        return self._stage

    def journalled_again(self, value: Recorded) -> None:
        """The journal write failed with the database away and was tried again (dispatcher/db_retry.py
        ``journal_write``): ``value`` is what every run that awaits :attr:`recorded` must see, not the failure."""
        recorded: asyncio.Future[Recorded] = asyncio.get_running_loop().create_future()
        recorded.set_result(value)
        self.recorded = recorded

    def take(self) -> bool:
        """Claim the message for the run that calls this; False when another run has it, or had it."""
        return self._advance(Stage.ANSWERING)

    def _advance(self, stage: Stage) -> bool:
        if self._stage >= stage:
            return False
        self._stage = stage
        return True


def journal_ticket(accepted: Accepted, value: Recorded) -> Ticket:
    """A ticket whose journal value is known already (crash resume, a claimed run's read-back)."""
    recorded: asyncio.Future[Recorded] = asyncio.get_running_loop().create_future()
    recorded.set_result(value)
    return Ticket(accepted, recorded)


class Poke:
    """A queue entry that only asks its session's worker to run a claimed run (several processes)."""

    __slots__ = ()


class SessionQueue:
    """Work items by session: queued in arrival order, each session's run one at a time."""

    def __init__(self, run: Callable[[str, Ticket | Poke], Awaitable[None]], concurrency: int) -> None:
        # The slot bounds the turns' work (model calls, tools), not the delivery of their replies: a send
        # waits on the channel's own connection pool and rate limits. So a turn takes it itself (slot()).
        self._run = run
        self._workers: KeyedWorkers[Ticket | Poke] = KeyedWorkers(self._handle, concurrency=concurrency,
                                                                 hold_slot=False, name="session")
        #: per session: items queued or running whose turn may still append messages
        self._turns: dict[str, int] = {}
        #: the items counted in ``_turns``, by identity, until their turn is finished
        self._counted: dict[int, Ticket] = {}

    async def _handle(self, session_id: str, work: Ticket | Poke) -> None:
        try:
            await self._run(session_id, work)
        finally:
            if isinstance(work, Ticket):
                self.turn_finished(work)  # whatever became of it (a duplicate, a claimed run's), its session goes on

    def enqueue(self, item: Ticket) -> None:
        """Queue ``item`` on its session's worker; it counts as appending until :meth:`turn_finished`."""
        sid = item.accepted.info.session_id
        if id(item) not in self._counted:
            self._counted[id(item)] = item
            self._turns[sid] = self._turns.get(sid, 0) + 1
        self._workers.submit(sid, item)

    def poke(self, session_id: str) -> None:
        """Queue a claimed run of the session (several processes): its unanswered messages get answered."""
        self._workers.submit(session_id, Poke())

    def turn_finished(self, item: Ticket) -> None:
        """The item will append nothing more to its session: it is :attr:`Stage.ANSWERED`, and no longer counts as
        appending if it was queued here (a claimed run's item read back from the journal never was). Idempotent."""
        item._advance(Stage.ANSWERED)  # noqa: SLF001 - the ticket's owner
        if self._counted.pop(id(item), None) is None:
            return
        sid = item.accepted.info.session_id
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

    def queued(self, session_id: str) -> list[Ticket | Poke]:
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

    async def drain(self, grace: float) -> dict[Hashable, list[Ticket | Poke]]:
        """Wait up to ``grace`` s for queued work; cancel the rest and return it by session."""
        return await self._workers.drain(grace)

    async def wait_idle(self) -> None:
        """Wait until no session has queued or running work."""
        await self._workers.wait_idle()

"""Sessions claimed across processes: the journal is the queue, PostgreSQL the coordinator (DESIGN §10).

With several processes on one PostgreSQL database, any process may journal a message, and whichever
process holds the session's advisory lock (:mod:`store.locks`) answers the session's unanswered messages,
one at a time, in journal order. A claimed run:

1. takes the lock ``session:<id>`` with ``pg_try_advisory_lock``; when another process holds it, that
   process answers this message too, so the run ends here;
2. drops the session's in-memory context when the stored session moved on (another process answered it
   meanwhile), so the turn sees what was said there;
3. answers the session's pending messages oldest first, the ones this process received through their
   live tickets (streaming, the stored user message) and the others from the journal, like crash resume;
4. releases the lock and looks once more: a message journalled by another process while the lock was held
   found it taken, so its process left it to this one.

A process that dies mid-turn loses its connection, and the server frees its locks at once. Its unanswered
messages are found by the other processes' sweep (every :data:`SWEEP_INTERVAL` s) and answered once: a
reply the dead process had kept in the outbox is sent as it was instead of running the turn again.

On SQLite (one process, :class:`store.locks.LocalLocks`) none of this runs: the dispatcher queues live
tickets directly. :class:`SessionClaims` is given what it uses, not the dispatcher: the session queue (to
poke a session), a view of the journal (:class:`JournalView`) and the callable that answers one message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from agent.sessions import SessionManager
from core.records import PendingIncoming
from dispatcher.journal import Journalled
from dispatcher.queue import SessionQueue, Ticket
from store.engine import database_unavailable
from store.locks import Locks

logger = logging.getLogger(__name__)

#: Seconds between two looks for unanswered messages nobody holds (a dead process's, or a message whose
#: poke was missed); it bounds how long a takeover waits after a process died.
SWEEP_INTERVAL = 2.0


def session_lock(session_id: str) -> str:
    """The lock name that makes one process the answerer of a session."""
    return f"session:{session_id}"


class JournalView(Protocol):
    """The journal as claimed runs read it (dispatcher/resume.py :class:`~dispatcher.resume.JournalReader`)."""

    def channels(self) -> list[str]:
        """The channels whose messages are answered through claims (any process can reply through them)."""

    async def claim_view(self, session_id: str) -> tuple[list[PendingIncoming], tuple[int, int] | None]:
        """The session's unanswered rows, oldest first, and its stored ``(last_seq, context_start_seq)``."""

    async def pending_sessions(self) -> list[str]:
        """The sessions with unanswered rows."""

    async def ticket(self, row: PendingIncoming) -> Ticket | None:
        """A row this process did not receive live, read back as a ticket (None: it cannot be answered here)."""


class SessionClaims:
    """Claimed runs of sessions, for a dispatcher whose locks are shared with other processes."""

    def __init__(self, *, locks: Locks, sessions: SessionManager, queue: SessionQueue, journal: JournalView,
                 answer: Callable[[Ticket], Awaitable[None]], stopping: Callable[[], bool]) -> None:
        self.locks = locks
        self.sessions = sessions
        self.queue = queue
        self.journal = journal
        #: answers one message this process has claimed (dispatcher/answering.py)
        self.answer = answer
        self.stopping = stopping
        #: live tickets of this process by journal id, from their journal write until their worker ends
        self.local: dict[int, Ticket] = {}
        #: per session in memory here: (last_seq, context_start_seq) as stored when this process last let
        #: it go; anything else at the next claim means another process changed it meanwhile
        self._seen: dict[str, tuple[int, int]] = {}
        self._sweeper: asyncio.Task | None = None

    def received(self, ticket: Ticket, j: Journalled) -> None:
        """A live message of a claimed channel is journalled: this process's claimed run answers it from its
        ticket (streaming, the stored user message) unless another process takes the session over."""
        self.local[j.inbox_id] = ticket

    def done(self, ticket: Ticket) -> None:
        """Its worker is done with the ticket (a few in flight at most: the scan is short, and empty on SQLite)."""
        if self.local:
            for inbox_id in [i for i, t in self.local.items() if t is ticket]:
                del self.local[inbox_id]

    # --- one claimed run --------------------------------------------------------------------
    async def run(self, session_id: str) -> int:
        """Answer the session's unanswered messages if no other process holds it; return how many."""
        name = session_lock(session_id)
        try:
            if not await self.locks.try_acquire(name):
                return 0
        except Exception as exc:
            if not database_unavailable(exc):
                raise
            logger.warning("session %s: the database is unavailable (%s); the sweep tries again",
                           session_id, type(exc).__name__)
            return 0
        answered = 0
        try:
            tried: set[int] = set()
            first = True
            while not self.stopping():
                pending, version = await self.journal.claim_view(session_id)
                if first:
                    self._sync_context(session_id, version)
                    first = False
                rows = [r for r in pending if r.id not in tried]
                if not rows:
                    self._remember(session_id, version)
                    break
                for row in rows:
                    if self.stopping() or not self.locks.held(name):
                        break
                    tried.add(row.id)
                    ticket = self.local.get(row.id) or await self.journal.ticket(row)
                    if ticket is None or not ticket.take():  # none, or answered already
                        continue
                    await self.answer(ticket)
                    answered += 1
        finally:
            await self.locks.release(name)
        # A message journalled meanwhile by another process found the lock taken and was left to us.
        if not self.stopping() and await self._still_pending(session_id):
            self.queue.poke(session_id)
        return answered

    async def _still_pending(self, session_id: str) -> bool:
        try:
            pending, _ = await self.journal.claim_view(session_id)
            return bool(pending)
        except Exception as exc:  # noqa: BLE001 - the sweep looks again
            logger.debug("session %s: pending check failed (%s)", session_id, type(exc).__name__)
            return False

    def _sync_context(self, session_id: str, version: tuple[int, int] | None) -> None:
        """Drop the in-memory context when the stored session moved on without this process.

        ``version`` is the stored ``(last_seq, context_start_seq)``; it must be what this process saw when it
        last let the session go.
        """
        seen = self._seen.pop(session_id, None)
        if self.sessions.peek(session_id) is not None and (version is None or seen != version):
            logger.info("session %s: changed by another process; context reloaded from the database", session_id)
            self.sessions.forget(session_id)

    def _remember(self, session_id: str, version: tuple[int, int] | None) -> None:
        """Note how the session is stored as this process lets it go (its context stays in memory)."""
        if version is not None and self.sessions.peek(session_id) is not None:
            self._seen[session_id] = version

    # --- the sweep --------------------------------------------------------------------------
    def start(self) -> None:
        """Start sweeping for unanswered messages that no process is answering."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="session-sweep")

    async def stop(self) -> None:
        """Stop sweeping."""
        task, self._sweeper = self._sweeper, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def sweep(self) -> int:
        """Poke every session with unanswered messages that has no work here; return how many."""
        if not self.journal.channels() or not await self.locks.ping():
            return 0
        for session_id in [sid for sid in self._seen if self.sessions.peek(sid) is None]:
            del self._seen[session_id]  # dropped from memory here: nothing to compare at the next claim
        poked = 0
        for session_id in await self.journal.pending_sessions():
            if not self.queue.busy(session_id):
                self.queue.poke(session_id)
                poked += 1
        return poked

    async def _sweep_forever(self, interval: Callable[[], float] = lambda: SWEEP_INTERVAL) -> None:
        while True:
            await asyncio.sleep(interval())
            if self.stopping():
                return
            try:
                await self.sweep()
            except Exception as exc:  # noqa: BLE001 - the next sweep tries again
                logger.warning("sweep for unanswered messages failed (%s: %s)", type(exc).__name__, exc)

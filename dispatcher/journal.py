"""The journal writer: every message the bot acts on is written to the ``inbox`` table before it is answered.

Each session's writes run in arrival order (journal ids follow it, so crash resume answers in that order),
and different sessions' writes run at once. A channel awaits :meth:`JournalWriter.settled` before it
confirms messages to its platform: confirmed but not yet journalled, a message would be lost by a crash.
A message taken while the bot stops is journalled all the same and answered after the restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.sessions import SessionManager
from dispatcher.hooks import MessageHooks, user_message
from dispatcher.intake import Accepted, journal_payload
from store.store import Store

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StoredUser:
    """The user message stored with the journal entry, in one transaction (the session was idle on arrival)."""

    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Skipped:
    """A ``before_agent`` hook asked, at intake, to skip the agent: the message gets no reply."""


@dataclass(frozen=True, slots=True)
class Journalled:
    """A message with its journal row: the stage value a session's turn starts from. Made by :func:`journalled`
    and nowhere else (a live message's write, crash resume, a claimed run's read-back, a turn run again after a
    database outage: each is one call of it)."""

    accepted: Accepted
    inbox_id: int
    #: the seq of its stored user message (None: not stored yet, the turn stores it)
    user_seq: int | None
    #: what intake did with the user message: stored it with the entry, or was told to skip the agent
    intake: StoredUser | Skipped | None = None
    #: the reply kept in the outbox before a crash (or a reminder's text): sent, not made again
    reply: str | None = None
    #: read back from the journal (crash resume, a turn run again): the log line says so
    resumed: bool = False


def journalled(accepted: Accepted, inbox_id: int, user_seq: int | None, *, intake: StoredUser | Skipped | None = None,
               reply: str | None = None, resumed: bool = False) -> Journalled:
    """The one maker of :class:`Journalled` values."""
    return Journalled(accepted, inbox_id, user_seq, intake, reply, resumed)


#: a message's journal value, or None for a duplicate
Recorded = Journalled | None


class JournalWriter:
    """Writes accepted messages to the journal, one session's in arrival order, and tracks the writes in flight."""

    def __init__(self, store: Store, sessions: SessionManager, hooks: MessageHooks) -> None:
        self.store = store
        self.sessions = sessions
        #: the dispatcher's message hooks (``before_agent`` runs here for a message stored with its entry)
        self.hooks = hooks
        self._recording: set[asyncio.Future] = set()
        self._last: dict[str, asyncio.Future] = {}
        self._late: set[asyncio.Future] = set()

    def write(self, accepted: Accepted, *, late: bool = False,
              then: Callable[[Journalled], None] | None = None) -> asyncio.Future[Recorded]:
        """Start journalling ``accepted`` after its session's previous write; return the write.

        ``late``: taken while stopping, with no worker to await it: a failure is logged here. ``then`` is told
        of the journal value as soon as it is written (not of a duplicate).
        """
        sid = accepted.info.session_id
        recorded = asyncio.ensure_future(self.record(accepted, self._last.get(sid), then))
        self._last[sid] = recorded
        self._recording.add(recorded)
        recorded.add_done_callback(lambda f: self._written(sid, f))
        if late:
            self._late.add(recorded)
            recorded.add_done_callback(self._late_written)
        return recorded

    async def record(self, accepted: Accepted, after: asyncio.Future | None = None,
                     then: Callable[[Journalled], None] | None = None) -> Recorded:
        """Journal ``accepted`` now (after ``after``, its session's previous write); None for a duplicate."""
        if after is not None:
            # Journal ids follow a session's arrival order, so that crash resume answers in that order: on
            # PostgreSQL, concurrent writes would take ids in the order they reach the INSERT.
            await asyncio.wait([after])
        # A session not in memory may not exist yet: the journal entry creates it in the same transaction.
        msg, info = accepted.message, accepted.info
        new = info if self.sessions.peek(info.session_id) is None else None
        stored = await user_message(self.hooks, msg, accepted.text) if accepted.store_user else None
        recorded = await self.store.journal.record_incoming(msg.channel, msg.message_id, info.session_id,
                                                    journal_payload(msg, accepted.command), stored, new)
        if recorded is None:
            return None
        intake = (StoredUser(stored) if stored is not None else Skipped()) if accepted.store_user else None
        value = journalled(accepted, *recorded, intake=intake)
        if then is not None:
            then(value)
        return value

    async def settled(self) -> None:
        """Wait until every message taken so far is journalled (or refused by the database)."""
        while self._recording:
            # asyncio.wait, not gather: a caller cancelled while it waits must not cancel the journal writes.
            await asyncio.wait(set(self._recording))

    async def flush_late(self) -> None:
        """Wait until the messages taken while stopping are journalled."""
        if self._late:
            await asyncio.gather(*set(self._late), return_exceptions=True)

    def _written(self, session_id: str, future: asyncio.Future) -> None:
        self._recording.discard(future)
        if self._last.get(session_id) is future:
            del self._last[session_id]

    def _late_written(self, future: asyncio.Future) -> None:
        self._late.discard(future)
        if not future.cancelled() and future.exception() is not None:
            logger.error("could not journal a message received during shutdown", exc_info=future.exception())

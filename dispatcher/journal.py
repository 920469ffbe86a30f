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

from agent.session import SessionManager
from dispatcher.hooks import MessageHooks, user_message
from dispatcher.intake import WorkItem, journal_payload
from store.store import Store

logger = logging.getLogger(__name__)

#: ``(inbox id, user message seq)`` of a journalled message, or None for a duplicate
Recorded = tuple[int, int | None] | None


class JournalWriter:
    """Writes work items to the journal, one session's in arrival order, and tracks the writes in flight."""

    def __init__(self, store: Store, sessions: SessionManager, hooks: MessageHooks,
                 on_recorded: Callable[[WorkItem], None]) -> None:
        self.store = store
        self.sessions = sessions
        #: the dispatcher's message hooks (``before_agent`` runs here for a message stored with its entry)
        self.hooks = hooks
        #: told of each item journalled (not of duplicates)
        self.on_recorded = on_recorded
        self._recording: set[asyncio.Future] = set()
        self._last: dict[str, asyncio.Future] = {}
        self._late: set[asyncio.Future] = set()

    def write(self, item: WorkItem, *, late: bool = False) -> asyncio.Future:
        """Start journalling ``item`` after its session's previous write; ``item.recorded`` is the write.

        ``late``: taken while stopping, with no worker to await it: a failure is logged here.
        """
        sid = item.info.session_id
        item.recorded = recorded = asyncio.ensure_future(self.record(item, self._last.get(sid)))
        self._last[sid] = recorded
        self._recording.add(recorded)
        recorded.add_done_callback(lambda f: self._written(sid, f))
        if late:
            self._late.add(recorded)
            recorded.add_done_callback(self._late_written)
        return recorded

    async def record(self, item: WorkItem, after: asyncio.Future | None = None) -> Recorded:
        """Journal ``item`` now (after ``after``, its session's previous write); None for a duplicate."""
        if after is not None:
            # Journal ids follow a session's arrival order, so that crash resume answers in that order: on
            # PostgreSQL, concurrent writes would take ids in the order they reach the INSERT.
            await asyncio.wait([after])
        # A session not in memory may not exist yet: the journal entry creates it in the same transaction.
        new = item.info if self.sessions.peek(item.info.session_id) is None else None
        stored = await user_message(self.hooks, item) if item.store_with_intake else None
        recorded = await self.store.journal.record_incoming(item.message.channel, item.message.message_id,
                                                    item.info.session_id, journal_payload(item.message, item.command),
                                                    stored, new)
        if recorded is not None:
            item.inbox_id, item.user_seq = recorded
            self.on_recorded(item)
        return recorded

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

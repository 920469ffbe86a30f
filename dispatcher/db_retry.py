"""When the database goes away (a PostgreSQL restart), a message's journal write and its turn are tried
again once it is back, so the message is answered within seconds instead of at the next start.

Both follow one policy, :data:`core.retry.DATABASE`: this layer owns the "database away" failure."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from core.retry import DATABASE, no_hint
from dispatcher.journal import Journalled, Recorded, journalled
from dispatcher.queue import Ticket
from store.engine import database_unavailable

if TYPE_CHECKING:
    from tenacity import RetryCallState

    from agent.sessions import SessionManager
    from store.store import Store

logger = logging.getLogger(__name__)

#: How often a turn or journal write is tried again while the database is unavailable, and how long apart
#: (seconds): a PostgreSQL restart takes a few seconds.
DB_RETRIES = DATABASE.attempts - 1
DB_RETRY_DELAY = DATABASE.first
#: What :func:`wait_for_database` returns when the session's claim was lost (several processes).
CLAIM_LOST = -1


async def journal_write(ticket: Ticket, record: Callable[[], Awaitable[Recorded]], delay: float) -> Recorded:
    """The ticket's journal write (``ticket.recorded``); one that failed because the database was away is tried
    again with ``record()``, up to :data:`DB_RETRIES` times, ``delay`` seconds apart."""

    def log(state: RetryCallState) -> None:
        logger.warning("session %s: the database is unavailable (%s); journalling again in %.0f s (%d/%d)",
                       ticket.accepted.info.session_id, type(state.outcome.exception()).__name__, state.upcoming_sleep,
                       state.attempt_number, DB_RETRIES)

    first = True

    async def write() -> Recorded:
        nonlocal first
        if first:  # the write that went with the message's intake
            first = False
            return await ticket.recorded
        value = await record()
        ticket.journalled_again(value)  # so the answering run (or a claimed run) reads this value, not the failure
        return value

    return await DATABASE.but(first=delay, cap=delay).call(write, retry_on=database_unavailable, hint=no_hint,
                                                          before_sleep=log)


async def wait_for_database(j: Journalled, failure: Exception, retries: int, *, delay: float,
                            store: Store, sessions: SessionManager,
                            claim_alive: Callable[[], Awaitable[bool]] | None) -> tuple[int, Journalled]:
    """After a failed turn: when the database went away, wait until the turn can run again from what is
    stored, and return the retries used so far with the message's journal value read again (its user message
    stored or not).

    More than :data:`DB_RETRIES` retries means give up (or not a database failure), and :data:`CLAIM_LOST`
    that the session's claim went with the database connection (several processes, ``claim_alive``): the
    message stays unanswered for whichever process claims it next.
    """
    session_id = j.accepted.info.session_id
    policy = DATABASE.but(first=delay, cap=delay)
    while database_unavailable(failure) and retries < DB_RETRIES:
        retries += 1
        wait = policy.delay(retries)
        logger.warning("session %s: the database is unavailable (%s); trying the turn again in %.0f s (%d/%d)",
                       session_id, type(failure).__name__, wait, retries, DB_RETRIES)
        await asyncio.sleep(wait)
        # What the turn kept in memory may not match what was stored: rebuild it from the database.
        sessions.forget(session_id)
        if claim_alive is not None and not await claim_alive():
            return CLAIM_LOST, j
        try:
            user_seq = await store.journal.user_seq(j.inbox_id)
        except Exception as exc:  # noqa: BLE001 - still away: wait once more
            failure = exc
            continue
        return retries, journalled(j.accepted, j.inbox_id, user_seq, reply=j.reply, resumed=True)
    return DB_RETRIES + 1, j

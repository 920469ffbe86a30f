"""When the database goes away (a PostgreSQL restart), a message's journal write and its turn are tried
again once it is back, so the message is answered within seconds instead of at the next start.

Both follow one policy, :data:`core.retry.DATABASE`: this layer owns the "database away" failure."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from core.retry import DATABASE, no_hint
from dispatcher.intake import WorkItem
from store.engine import database_unavailable

if TYPE_CHECKING:
    from tenacity import RetryCallState

    from agent.session import SessionManager
    from store.store import Store

logger = logging.getLogger(__name__)

#: How often a turn or journal write is tried again while the database is unavailable, and how long apart
#: (seconds): a PostgreSQL restart takes a few seconds.
DB_RETRIES = DATABASE.attempts - 1
DB_RETRY_DELAY = DATABASE.first
#: What :func:`wait_for_database` returns when the session's claim was lost (several processes).
CLAIM_LOST = -1


async def journalled(item: WorkItem, record: Callable[[WorkItem], Awaitable[Any]], delay: float) -> Any:
    """The item's journal write (``item.recorded``); one that failed because the database was away is tried
    again with ``record(item)``, up to :data:`DB_RETRIES` times, ``delay`` seconds apart."""

    def log(state: RetryCallState) -> None:
        logger.warning("session %s: the database is unavailable (%s); journalling again in %.0f s (%d/%d)",
                       item.info.session_id, type(state.outcome.exception()).__name__, state.upcoming_sleep,
                       state.attempt_number, DB_RETRIES)

    first = True

    async def write() -> Any:
        nonlocal first
        if first:  # the write that went with the item's intake
            first = False
            return await item.recorded
        return await record(item)

    return await DATABASE.but(first=delay, cap=delay).call(write, retry_on=database_unavailable, hint=no_hint,
                                                          before_sleep=log)


async def wait_for_database(item: WorkItem, failure: Exception, retries: int, *, delay: float, store: Store,
                            sessions: SessionManager, claim_alive: Callable[[], Awaitable[bool]] | None) -> int:
    """After a failed turn: when the database went away, wait until the turn can run again from what is
    stored.

    Returns the retries used so far; more than :data:`DB_RETRIES` means give up (or not a database
    failure), and :data:`CLAIM_LOST` that the session's claim went with the database connection (several
    processes, ``claim_alive``): the message stays unanswered for whichever process claims it next.
    """
    policy = DATABASE.but(first=delay, cap=delay)
    while database_unavailable(failure) and retries < DB_RETRIES:
        retries += 1
        wait = policy.delay(retries)
        logger.warning("session %s: the database is unavailable (%s); trying the turn again in %.0f s (%d/%d)",
                       item.info.session_id, type(failure).__name__, wait, retries, DB_RETRIES)
        await asyncio.sleep(wait)
        # What the turn kept in memory may not match what was stored: rebuild it from the database.
        sessions.forget(item.info.session_id)
        if claim_alive is not None and not await claim_alive():
            return CLAIM_LOST
        item.user_message = None
        item.resumed = True
        if item.inbox_id is None:
            return retries
        try:
            item.user_seq = await store.journal.user_seq(item.inbox_id)
            return retries
        except Exception as exc:  # noqa: BLE001 - still away: wait once more
            failure = exc
    return DB_RETRIES + 1

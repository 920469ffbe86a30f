"""Restore summaries started at start-up, so the first reply after a restart rarely waits for one (DESIGN §4).

Restart recovery is lazy: a session's first message after a start restores its last turns and sends the older
turns after the boundary that were never summarised to the summariser, and that first reply waits (up to about
15 s) for the summary. For the sessions most likely to write soon, that work is started right after "ready",
in the background: those active in the last :data:`RECENT_DAYS` days with more unsummarised messages than the
restore keeps, latest first, at most :data:`MAX_SESSIONS`, loaded one after another exactly as their first
message would load them (agent/sessions.py ``SessionManager.get``). Start-up does not wait for it and its time
does not grow with history: one indexed query and a bounded number of loads. With several processes on one
database (DESIGN §10) it is left to the lazy path, so two processes never queue the same restore twice.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from core.turns import restore_turn_count

if TYPE_CHECKING:
    from agent.sessions import SessionManager
    from config.settings import Config
    from store.store import Store

logger = logging.getLogger(__name__)

#: Sessions active within this many days are restored ahead.
RECENT_DAYS = 3
#: At most this many sessions are restored ahead at one start.
MAX_SESSIONS = 50


async def restore_ahead(store: Store, sessions: SessionManager, config: Config) -> int:
    """Load the recent sessions that need a restore summary, which starts it; return how many were loaded."""
    keep = restore_turn_count(config.agent_max_context_turns)
    since = datetime.now(UTC) - timedelta(days=RECENT_DAYS)
    started = time.monotonic()
    # a turn is at least two messages: fewer than that many beyond the restored turns leave nothing to summarise
    try:
        infos = await store.sessions.to_restore(since, unsummarised=2 * keep, limit=MAX_SESSIONS)
    except Exception:  # noqa: BLE001 - a courtesy: each session's first message restores it anyway
        logger.warning("finding the sessions to restore ahead failed; each restores at its first message",
                       exc_info=True)
        return 0
    loaded = 0
    for info in infos:
        if info.session_id in sessions:  # a message came first and loaded it
            continue
        try:
            await sessions.get(info)
        except Exception:  # noqa: BLE001 - the lazy restore at its first message does it then
            logger.warning("session %s: restoring it ahead failed; its first message restores it", info.session_id,
                           exc_info=True)
            continue
        loaded += 1
    if loaded:
        logger.info("restored %d recent session(s) ahead of their first message in %.1f s; their restore "
                    "summaries run in the background", loaded, time.monotonic() - started)
    return loaded


__all__ = ["MAX_SESSIONS", "RECENT_DAYS", "restore_ahead"]

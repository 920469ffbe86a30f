"""Persistence for photos in a conversation (DESIGN §5.1): a stored user message rewritten once its image is
words, and the session folders the cleanup job may keep.

A message is rewritten by deleting its row and inserting it again with the same id, seq and time, in one
transaction: the history_search triggers (migrations 0002, 0006) index rows on insert and delete only, so the
index then holds the ``[image: …]`` text too.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection

from core.files import session_dir_name
from store.models import MessageRow, SessionRow

_MESSAGES = MessageRow.__table__
_SESSIONS = SessionRow.__table__


def rewrite_message(conn: Connection, session_id: str, seq: int, message: dict[str, Any]) -> bool:
    """Replace the content of the stored message ``seq`` of a session (run by ``store.run``); False when the
    message is gone (the session was forgotten meanwhile)."""
    row = conn.execute(select(_MESSAGES.c.id, _MESSAGES.c.role, _MESSAGES.c.created_at)
                       .where(_MESSAGES.c.session_id == session_id, _MESSAGES.c.seq == seq)).first()
    if row is None:
        return False
    conn.execute(delete(_MESSAGES).where(_MESSAGES.c.id == row.id))
    conn.execute(insert(_MESSAGES).values(id=row.id, session_id=session_id, seq=seq, role=row.role, content=message,
                                          created_at=row.created_at))
    return True


def live_session_dirs(conn: Connection) -> set[str]:
    """The folder names (DESIGN §1.6's rule) of every stored session (run by ``store.run``)."""
    return {session_dir_name(sid) for sid in conn.execute(select(_SESSIONS.c.session_id)).scalars()}


__all__ = ["live_session_dirs", "rewrite_message"]

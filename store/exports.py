"""What ``/export`` reads (DESIGN §1.4): a session's row and its stored messages page by page, oldest first.

Transaction functions run by :meth:`store.store.Store.run`. Pages are an index range scan
of ``(session_id, seq)``, so a long history is read a page at a time and never held whole in memory.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from store.models import MessageRow, SessionRow

_S = SessionRow.__table__.c
_M = MessageRow.__table__.c
#: Messages per page.
PAGE = 500


def session_row(conn: Connection, session_id: str) -> dict[str, Any] | None:
    """The session's row as a dict, or None when the session is not stored."""
    row = conn.execute(select(_S.session_id, _S.channel, _S.chat_id, _S.user_id, _S.is_group, _S.title,
                              _S.created_at, _S.last_active, _S.context_start_seq, _S.summary, _S.summary_turns,
                              _S.summarized_through_seq).where(_S.session_id == session_id)).mappings().first()
    return dict(row) if row is not None else None


def message_page(conn: Connection, session_id: str, after_seq: int, limit: int = PAGE) -> list[tuple[int, str, Any,
                                                                                                   datetime]]:
    """Up to ``limit`` stored messages after ``after_seq``: ``(seq, role, content, created_at)``, by seq."""
    rows = conn.execute(select(_M.seq, _M.role, _M.content, _M.created_at)
                        .where(_M.session_id == session_id, _M.seq > after_seq)
                        .order_by(_M.seq).limit(limit))
    return [(r.seq, r.role, r.content, r.created_at) for r in rows]

"""The group background repository: the ``group_messages`` table (DESIGN §1.3).

A group's rows are its background messages (``kind`` "message") and marks of where the bot was asked
(``kind`` "trigger"), ordered by ``created_at``, the time the bot received them. The background for a
request is what was said after the group's previous trigger mark and before the request itself. Each
insert also prunes the group down to its newest ``cap`` rows, in the same transaction: an index range
scan of ``cap`` entries, so a flood costs one small write per message and nothing more.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, delete, func, insert, select
from sqlalchemy.engine import Connection

from store.engine import Runner
from store.models import GroupMessageRow

logger = logging.getLogger(__name__)

#: Rows kept per group at most (background messages and trigger marks together).
GROUP_MESSAGE_CAP = 500
BACKGROUND = "message"
TRIGGER = "trigger"

_T = GroupMessageRow.__table__
_C = _T.c
_INSERT = insert(_T)
_GROUP = (_C.channel == bindparam("channel")) & (_C.chat_id == bindparam("chat_id"))
#: the ``created_at`` of the group's row just past the cap (None while the group has fewer rows)
_CAP_EDGE = (select(_C.created_at).where(_GROUP).order_by(_C.created_at.desc())
             .offset(bindparam("cap")).limit(1).scalar_subquery())
_PRUNE = delete(_T).where(_GROUP, _C.created_at <= _CAP_EDGE)


@dataclass(frozen=True, slots=True)
class GroupLine:
    """One background message as the model is shown it."""

    user_name: str
    text: str
    sent_at: datetime


def add_group_message(conn: Connection, channel: str, chat_id: str, user_name: str, text: str, kind: str,
                      sent_at: datetime, created_at: datetime, cap: int = GROUP_MESSAGE_CAP) -> None:
    """Store one row and prune the group to its newest ``cap`` rows."""
    conn.execute(_INSERT, {"channel": channel, "chat_id": chat_id, "user_name": user_name, "text": text,
                           "kind": kind, "sent_at": sent_at, "created_at": created_at})
    conn.execute(_PRUNE, {"channel": channel, "chat_id": chat_id, "cap": cap})


def group_background(conn: Connection, channel: str, chat_id: str, before: datetime, limit: int) -> list[GroupLine]:
    """The last ``limit`` background messages after the group's previous trigger mark and before ``before``."""
    group = (_C.channel == channel, _C.chat_id == chat_id, _C.created_at < before)
    since = conn.execute(select(func.max(_C.created_at)).where(*group, _C.kind == TRIGGER)).scalar()
    stmt = select(_C.user_name, _C.text, _C.sent_at).where(*group, _C.kind == BACKGROUND)
    if since is not None:
        stmt = stmt.where(_C.created_at > since)
    rows = conn.execute(stmt.order_by(_C.created_at.desc()).limit(limit)).all()
    return [GroupLine(name, text, sent) for name, text, sent in reversed(rows)]


def delete_group_messages(conn: Connection, channel: str, chat_id: str) -> int:
    """Delete everything stored of a group's background; return how many messages (marks not counted)."""
    group = (_C.channel == channel, _C.chat_id == chat_id)
    said = conn.execute(select(func.count()).select_from(_T).where(*group, _C.kind == BACKGROUND)).scalar() or 0
    conn.execute(delete(_T).where(*group))
    return said


def delete_old_group_messages(conn: Connection, cutoff: datetime, batch: int) -> int:
    """Delete one batch of rows received before ``cutoff``; return how many."""
    ids = select(_C.id).where(_C.created_at < cutoff).order_by(_C.id).limit(batch).scalar_subquery()
    return conn.execute(delete(_T).where(_C.id.in_(ids))).rowcount or 0


class GroupMessages:
    """The groups' background messages and trigger marks."""

    def __init__(self, db: Runner) -> None:
        self.db = db

    async def add(self, channel: str, chat_id: str, user_name: str, text: str, kind: str, sent_at: datetime,
                  created_at: datetime, cap: int = GROUP_MESSAGE_CAP) -> None:
        """Store a group's background message (or trigger mark) and prune the group to its newest ``cap`` rows."""
        await self.db.run(add_group_message, channel, chat_id, user_name, text, kind, sent_at, created_at, cap)

    async def background(self, channel: str, chat_id: str, before: datetime, limit: int) -> list[GroupLine]:
        """The group's last ``limit`` background messages since its previous trigger mark, before ``before``."""
        if limit <= 0:
            return []
        return await self.db.run(group_background, channel, chat_id, before, limit)

    async def delete(self, channel: str, chat_id: str) -> int:
        """Delete a group's whole background; return how many rows went."""
        return await self.db.run(delete_group_messages, channel, chat_id)

    async def delete_old(self, cutoff: datetime, batch: int = 1000) -> int:
        """Delete one batch of group background rows received before ``cutoff``; return how many."""
        return await self.db.run_long(delete_old_group_messages, cutoff, batch)

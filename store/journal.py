"""The journal repository: the ``inbox`` table (DESIGN §1.3, §5, §10).

Every incoming message is journalled here before it is answered (dedup by ``(channel, message_id)``,
crash resume); a turn's final reply is kept on its row before it is sent (the outbox, dispatcher/outbox.py);
with several processes, a session's pending rows are what a claim reads (dispatcher/claims.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from core.records import PendingIncoming, SessionInfo
from store.engine import Runner
from store.models import InboxRow, SessionRow, utcnow
from store.sessions import append_messages, ensure_session

_INBOX = InboxRow.__table__
_I = _INBOX.c
_S = SessionRow.__table__.c
_INSERT_INBOX = insert(_INBOX).returning(_I.id)
_MARK_DONE = update(_INBOX).where(_I.id == bindparam("iid")).values(status="done")
_KEEP_REPLY = update(_INBOX).where(_I.id == bindparam("iid")).values(reply=bindparam("reply"))


def _record_incoming(conn: Connection, channel: str, message_id: str, session_id: str, payload: dict[str, Any],
                     user_message: dict[str, Any] | None, session: SessionInfo | None) -> tuple[int, int | None]:
    if session is not None:
        ensure_session(conn, session)
    seq = append_messages(conn, session_id, [user_message])[0] if user_message is not None else None
    inbox_id = conn.execute(_INSERT_INBOX, {
        "channel": channel, "message_id": message_id, "session_id": session_id, "user_seq": seq,
        "payload": payload, "status": "pending", "created_at": utcnow()}).scalar()
    return inbox_id, seq


def _claim_view(conn: Connection, session_id: str, channels: list[str]) -> tuple[list[PendingIncoming],
                                                                                 tuple[int, int] | None]:
    rows = conn.execute(select(_I.id, _I.session_id, _I.user_seq, _I.payload, _I.reply).where(
        _I.session_id == session_id, _I.status == "pending", _I.channel.in_(channels)).order_by(_I.id)).all()
    version = conn.execute(select(_S.last_seq, _S.context_start_seq).where(_S.session_id == session_id)).first()
    return [PendingIncoming(*row) for row in rows], (tuple(version) if version is not None else None)


def _prune(conn: Connection, pick: Any) -> int:
    ids = list(conn.execute(pick).scalars().all())
    if not ids:
        return 0
    return conn.execute(delete(_INBOX).where(_I.id.in_(ids))).rowcount or 0


def _execute(conn: Connection, stmt: Any, params: Any = None) -> None:
    conn.execute(stmt, params)


def _rows(conn: Connection, stmt: Any) -> list[Any]:
    return list(conn.execute(stmt).all())


def _scalar(conn: Connection, stmt: Any) -> Any:
    return conn.execute(stmt).scalar()


def _scalars(conn: Connection, stmt: Any) -> list[Any]:
    return list(conn.execute(stmt).scalars().all())


class Journal:
    """The inbox: incoming messages journalled, their kept replies, and what is still pending."""

    def __init__(self, db: Runner) -> None:
        self.db = db

    async def record_incoming(self, channel: str, message_id: str, session_id: str,
                              payload: dict[str, Any], user_message: dict[str, Any] | None,
                              session: SessionInfo | None = None) -> tuple[int, int | None] | None:
        """Store an incoming message and, if given, its user message, in one transaction; with ``session``,
        the session is created first when it does not exist yet (as :meth:`store.sessions.Sessions.ensure`).

        Returns ``(inbox_id, user_seq)``, or None when ``(channel, message_id)`` was seen before.
        """
        try:
            return await self.db.run(_record_incoming, channel, message_id, session_id, payload, user_message,
                                     session)
        except IntegrityError:
            if session is None:
                return None
        # The session may have been created concurrently (PostgreSQL): once more, with it in place.
        try:
            await self.db.run(ensure_session, session)
        except IntegrityError:  # created concurrently meanwhile: it is there now
            pass
        return await self.record_incoming(channel, message_id, session_id, payload, user_message)

    async def mark_done(self, inbox_ids: int | list[int]) -> None:
        """The message(s) have been answered."""
        ids = [inbox_ids] if isinstance(inbox_ids, int) else list(inbox_ids)
        if ids:
            await self.db.run(_execute, _MARK_DONE, [{"iid": i} for i in ids] if len(ids) > 1 else {"iid": ids[0]})

    async def keep_reply(self, inbox_id: int, reply: str) -> None:
        """The outbox: store a message's final reply before it is sent (it stays pending until sent)."""
        await self.db.run(_execute, _KEEP_REPLY, {"iid": inbox_id, "reply": reply})

    async def pending_replies(self) -> dict[int, str]:
        """Replies stored but not yet accepted by their platform, by inbox id."""
        rows = await self.db.run(_rows, select(_I.id, _I.reply).where(_I.status == "pending", _I.reply.is_not(None)))
        return {row[0]: row[1] for row in rows}

    async def user_seq(self, inbox_id: int) -> int | None:
        """The seq of the user message stored for an inbox row, if one was."""
        return await self.db.run(_scalar, select(_I.user_seq).where(_I.id == inbox_id))

    async def pending(self) -> list[PendingIncoming]:
        """Messages stored but never answered, oldest first."""
        rows = await self.db.run(_rows, select(_I.id, _I.session_id, _I.user_seq, _I.payload)
                                 .where(_I.status == "pending").order_by(_I.id))
        return [PendingIncoming(*row) for row in rows]

    async def pending_sessions(self, channels: list[str]) -> list[str]:
        """Sessions with unanswered messages of the given channels."""
        return await self.db.run(_scalars, select(_I.session_id).where(
            _I.status == "pending", _I.channel.in_(channels)).distinct())

    async def claim_view(self, session_id: str, channels: list[str]) -> tuple[list[PendingIncoming],
                                                                              tuple[int, int] | None]:
        """In one transaction: a session's unanswered messages of the given channels, oldest first, with their
        kept replies; and its ``(last_seq, context_start_seq)`` (None when it does not exist yet), which tell
        whether another process changed it."""
        return await self.db.run(_claim_view, session_id, channels)

    async def prune(self, cutoff: datetime, batch: int = 1000) -> int:
        """Delete one batch of answered inbox rows created before ``cutoff``; return how many."""
        pick = (select(_I.id).where(_I.status == "done", _I.created_at < cutoff).order_by(_I.id).limit(batch))
        return await self.db.run_long(_prune, pick)

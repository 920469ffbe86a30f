"""The sessions repository: ``sessions`` and their ``messages`` (DESIGN §1.3, §2-4).

Everything a user said is written here before the model sees it. Trimming only moves
``sessions.context_start_seq``; message rows are deleted only by the retention job and by /forget.

Each operation is a transaction function ``_fn(conn, ...)`` on a SQLAlchemy ``Connection``, run in one
transaction by the store (store/store.py, store/engine.py): the same statements on both databases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import bindparam, case, delete, func, insert, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, NoResultFound

from core.records import SessionInfo, SessionRecord, StoredMessage
from store.engine import Runner
from store.group_messages import delete_group_messages
from store.history_search import HistoryHit, search_history
from store.models import (
    Base,
    GroupMessageRow,
    InboxRow,
    MemoryChunkRow,
    MessageRow,
    ReminderRow,
    SessionRow,
    SummaryJobRow,
    UTCDateTime,
    utcnow,
)

# Statements on the tables, not the ORM classes: an ORM-enabled insert or update goes through the
# ORM's bulk-persistence plugin even on a Core connection, which is more work than the write itself.
_SESSIONS = SessionRow.__table__
_MESSAGES = MessageRow.__table__
_INBOX = InboxRow.__table__
_S = _SESSIONS.c
_M = _MESSAGES.c
_I = _INBOX.c

_SESSION_COLUMNS = (_S.session_id, _S.context_start_seq, _S.summary, _S.summary_turns, _S.summarized_through_seq,
                    _S.last_seq, _S.last_active)

# --- the per-turn statements, built once -------------------------------------------------------
_SET_CONTEXT_START = (update(_SESSIONS).where(_S.session_id == bindparam("sid"))
                      .values(context_start_seq=bindparam("seq")))
_GET_SESSION = select(*_SESSION_COLUMNS, _S.title).where(_S.session_id == bindparam("sid"))
_SET_TITLE = update(_SESSIONS).where(_S.session_id == bindparam("sid")).values(title=bindparam("new_title"))
_NEW_SESSION = insert(_SESSIONS)
#: Seqs are allocated by bumping ``last_seq``: no MAX() scan, and the row lock orders concurrent appends.
_BUMP_SEQ = (update(_SESSIONS).where(_S.session_id == bindparam("sid"))
             .values(last_seq=_S.last_seq + bindparam("n"), last_active=bindparam("now", type_=UTCDateTime()))
             .returning(_S.last_seq))
_INSERT_MESSAGES = insert(_MESSAGES)  # (triggers index the text for history search: memory/search.py)
_LOAD_FROM = (select(_M.seq, _M.content).where(_M.session_id == bindparam("sid"), _M.seq >= bindparam("lo"))
              .order_by(_M.seq))
_LOAD_RANGE = (select(_M.seq, _M.content)
               .where(_M.session_id == bindparam("sid"), _M.seq >= bindparam("lo"), _M.seq <= bindparam("hi"))
               .order_by(_M.seq))
_LOAD_TAIL = (select(_M.seq, _M.content).where(_M.session_id == bindparam("sid"), _M.seq >= bindparam("lo"))
              .order_by(_M.seq.desc()).limit(bindparam("n")))
_LINK_INBOX = update(_INBOX).where(_I.id == bindparam("iid")).values(user_seq=bindparam("seq"))
_KEEP_REPLY = update(_INBOX).where(_I.id == bindparam("iid")).values(reply=bindparam("reply"))
_FIRST_WAITING = select(func.min(_I.user_seq)).where(_I.session_id == bindparam("sid"), _I.status == "pending",
                                                     _I.user_seq.is_not(None))

#: Tables with a ``session_id`` that outlive the session: the bill's record (DESIGN §12), token counts only; a
#: /forget that took them would also undo the day's spending and so the caps.
KEPT_TABLES = frozenset({"usage", "usage_daily"})


class OpenedSession(NamedTuple):
    """What :meth:`Sessions.open` reads in one transaction."""

    record: SessionRecord
    #: the last messages from the context start on, in order
    tail: list[StoredMessage]
    #: the seq of the oldest stored user message whose answer is still pending (a crash left it)
    waiting: int | None


@dataclass
class SessionListRow:
    """One line of the console's conversations list."""

    session_id: str
    channel: str
    title: str
    is_group: bool
    last_active: datetime
    turns: int
    context_start_seq: int
    tokens: int = 0


def _record(row: Any) -> SessionRecord:
    return SessionRecord(row[0], row[1], row[2], row[3], row[4], row[5], row[6])


# --- transaction functions (each runs in one transaction; see store/engine.py) ----------------
def _get_session(conn: Connection, session_id: str) -> SessionRecord | None:
    row = conn.execute(_GET_SESSION, {"sid": session_id}).first()
    return _record(row) if row is not None else None


def ensure_session(conn: Connection, info: SessionInfo) -> SessionRecord:
    """The session's record, created on first use (a transaction function, also run by the journal's writes)."""
    row = conn.execute(_GET_SESSION, {"sid": info.session_id}).first()
    if row is not None:
        if info.title and info.title != row[7]:  # a renamed group or user
            conn.execute(_SET_TITLE, {"sid": info.session_id, "new_title": info.title})
        return _record(row)
    now = utcnow()
    conn.execute(_NEW_SESSION, {
        "session_id": info.session_id, "channel": info.channel, "chat_id": info.chat_id, "user_id": info.user_id,
        "is_group": info.is_group, "title": info.title, "created_at": now, "last_active": now,
        "context_start_seq": 1, "summary": None, "summary_turns": 0, "summarized_through_seq": 0, "last_seq": 0})
    return SessionRecord(info.session_id, 1, None, 0, 0, 0, now)


def append_messages(conn: Connection, session_id: str, messages: list[dict[str, Any]]) -> list[int]:
    """Store messages at the end of a session; their seqs (a transaction function, also run by the journal's
    writes and the reminders')."""
    n = len(messages)
    now = utcnow()
    last = conn.execute(_BUMP_SEQ, {"sid": session_id, "n": n, "now": now}).scalar()
    if last is None:
        raise NoResultFound(f"no session {session_id!r}")  # as Core's scalar_one()
    seqs = list(range(last - n + 1, last + 1))
    rows = [{"session_id": session_id, "seq": seq, "role": m.get("role", ""), "content": m, "created_at": now}
            for seq, m in zip(seqs, messages, strict=True)]
    conn.execute(_INSERT_MESSAGES, rows if n > 1 else rows[0])
    return seqs


def _open_session(conn: Connection, info: SessionInfo, limit: int) -> tuple[SessionRecord, list[Any], int | None]:
    record = ensure_session(conn, info)
    rows = conn.execute(_LOAD_TAIL, {"sid": info.session_id, "lo": record.context_start_seq, "n": limit}).all()
    return record, list(rows), conn.execute(_FIRST_WAITING, {"sid": info.session_id}).scalar()


def _append_answer(conn: Connection, session_id: str, message: dict[str, Any], inbox_id: int, reply: str) -> int:
    (seq,) = append_messages(conn, session_id, [message])
    conn.execute(_KEEP_REPLY, {"iid": inbox_id, "reply": reply})
    return seq


def _append_user(conn: Connection, session_id: str, message: dict[str, Any], inbox_id: int | None) -> int:
    (seq,) = append_messages(conn, session_id, [message])
    if inbox_id is not None:
        conn.execute(_LINK_INBOX, {"iid": inbox_id, "seq": seq})
    return seq


def _rows(conn: Connection, stmt: Any, params: Any = None) -> list[Any]:
    return list(conn.execute(stmt, params).all())


def _update(conn: Connection, stmt: Any, params: Any = None) -> None:
    conn.execute(stmt, params)


def _delete_expired(conn: Connection, pick: Any, cutoff: datetime, max_messages: int) -> tuple[int, int]:
    ids = list(conn.execute(pick).scalars().all())
    if not ids:
        return 0, 0
    expired = select(_S.session_id).where(_S.session_id.in_(ids), _S.last_active < cutoff)
    # At most max_messages rows per transaction: the next batch picks the same sessions again.
    doomed = select(_M.id).where(_M.session_id.in_(expired)).limit(max_messages)
    messages = conn.execute(delete(_MESSAGES).where(_M.id.in_(doomed.scalar_subquery()))).rowcount or 0
    if messages >= max_messages:
        return 0, messages
    jobs = SummaryJobRow.__table__
    conn.execute(delete(jobs).where(jobs.c.session_id.in_(expired)))
    chunks = MemoryChunkRow.__table__
    conn.execute(delete(chunks).where(chunks.c.session_id.in_(expired)))  # the session's search index
    reminders = ReminderRow.__table__
    conn.execute(delete(reminders).where(reminders.c.session_id.in_(expired)))  # deleted with their session
    sessions = conn.execute(delete(_SESSIONS).where(_S.session_id.in_(ids), _S.last_active < cutoff)).rowcount
    return sessions or 0, messages


def session_tables() -> list[Any]:
    """Every table with a ``session_id`` column (but :data:`KEPT_TABLES`), children first and ``sessions`` last."""
    tables = [t for t in reversed(Base.metadata.sorted_tables) if "session_id" in t.c and t.name not in KEPT_TABLES]
    return sorted(tables, key=lambda t: t.name == "sessions")  # stable: children keep their order


def delete_session_history(conn: Connection, session_id: str) -> dict[str, int]:
    """Delete the session's rows from every table that has them (so tables added later are covered), children
    before ``sessions``; rows per table.

    A group session also takes its group's background (``group_messages`` is keyed by the group, not by a
    session): /forget in a group forgets what was said there.
    """
    group = conn.execute(select(_S.channel, _S.chat_id)
                         .where(_S.session_id == session_id, _S.is_group.is_(True))).first()
    rows = {}
    if group is not None:
        rows[GroupMessageRow.__tablename__] = delete_group_messages(conn, group[0], group[1])
    rows.update({t.name: conn.execute(delete(t).where(t.c.session_id == session_id)).rowcount or 0
                 for t in session_tables()})
    return rows


# --- the console's reads (console/conversations.py, console/memory_page.py, console/chat_page.py) ----------
def _listing(conn: Connection, query: str, limit: int) -> list[SessionListRow]:
    turns = (select(func.count()).where(_M.session_id == _S.session_id, _M.role == "user")
             .scalar_subquery())
    pick = select(_S.session_id, _S.channel, _S.title, _S.is_group, _S.last_active, turns, _S.context_start_seq)
    if query.strip():
        like = f"%{query.strip().lower()}%"
        pick = pick.where(or_(func.lower(_S.session_id).like(like), func.lower(_S.title).like(like),
                              func.lower(_S.channel).like(like)))
    rows = conn.execute(pick.order_by(_S.last_active.desc()).limit(limit)).all()
    return [SessionListRow(*row) for row in rows]


def _context_messages(conn: Connection, session_ids: list[str]) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    out: dict[str, list[tuple[int, dict[str, Any]]]] = {sid: [] for sid in session_ids}
    if not out:
        return out
    found = conn.execute(select(_M.session_id, _M.seq, _M.content)
                         .join(_SESSIONS, _S.session_id == _M.session_id)
                         .where(_M.session_id.in_(list(out)), _M.seq >= _S.context_start_seq)
                         .order_by(_M.session_id, _M.seq)).all()
    for sid, seq, content in found:
        if isinstance(content, dict):
            out[sid].append((seq, content))
    return out


def _row(conn: Connection, session_id: str) -> dict[str, Any] | None:
    row = conn.execute(select(_SESSIONS).where(_S.session_id == session_id)).mappings().first()
    return dict(row) if row is not None else None


def _last_messages(conn: Connection, session_id: str, limit: int) -> list[tuple[int, dict[str, Any], datetime]]:
    rows = conn.execute(select(_M.seq, _M.content, _M.created_at).where(_M.session_id == session_id)
                        .order_by(_M.seq.desc()).limit(limit)).all()
    return [(seq, content if isinstance(content, dict) else {}, at) for seq, content, at in reversed(rows)]


class Sessions:
    """Sessions and their messages."""

    def __init__(self, db: Runner) -> None:
        self.db = db

    async def ensure(self, info: SessionInfo) -> SessionRecord:
        """Return the session, creating it on first use."""
        try:
            return await self.db.run(ensure_session, info)
        except IntegrityError:  # created concurrently (PostgreSQL)
            record = await self.get(info.session_id)
            assert record is not None
            return record

    async def get(self, session_id: str) -> SessionRecord | None:
        """The session's persisted state, or None."""
        return await self.db.run(_get_session, session_id)

    async def set_context_start(self, session_id: str, seq: int) -> None:
        """Move the context boundary: messages before ``seq`` leave the context (rows are kept)."""
        await self.db.run(_update, _SET_CONTEXT_START, {"sid": session_id, "seq": seq})

    def _at_least(self, seq: int) -> Any:
        """``summarized_through_seq`` raised to ``seq``, never lowered."""
        fn = func.max if self.db.dialect == "sqlite" else func.greatest
        return fn(_S.summarized_through_seq, seq)

    async def set_summary(self, session_id: str, summary: str | None, turns: int = 0,
                          through_seq: int | None = None) -> None:
        """Persist the injected summary (covering ``turns`` turns) and, optionally, how far summaries reach."""
        values: dict[str, Any] = {"summary": summary, "summary_turns": turns if summary else 0}
        if through_seq is not None:
            values["summarized_through_seq"] = self._at_least(through_seq)
        await self.db.run(_update, update(_SESSIONS).where(_S.session_id == session_id).values(**values))

    async def set_summarized_through(self, session_id: str, seq: int) -> None:
        """Record that messages up to ``seq`` were summarised (never moves back), leaving the summary as is."""
        await self.db.run(_update, update(_SESSIONS).where(_S.session_id == session_id)
                          .values(summarized_through_seq=self._at_least(seq)))

    # --- messages ------------------------------------------------------------------------
    async def append(self, session_id: str, messages: list[dict[str, Any]]) -> list[int]:
        """Store messages at the end of a session; return their seqs."""
        if not messages:
            return []
        return await self.db.run(append_messages, session_id, messages)

    async def append_answer(self, session_id: str, message: dict[str, Any], inbox_id: int, reply: str) -> int:
        """Store a turn's final assistant message and keep ``reply`` for its inbox row (the outbox, see
        :meth:`store.journal.Journal.keep_reply`) in one transaction; return the message's seq."""
        return await self.db.run(_append_answer, session_id, message, inbox_id, reply)

    async def append_user(self, session_id: str, message: dict[str, Any], inbox_id: int | None) -> int:
        """Store the user message of a turn and link it to its inbox row, in one transaction."""
        return await self.db.run(_append_user, session_id, message, inbox_id)

    async def load_messages(self, session_id: str, from_seq: int = 1, through_seq: int | None = None,
                            ) -> list[StoredMessage]:
        """Messages with ``from_seq <= seq [<= through_seq]``, in order."""
        if through_seq is None:
            rows = await self.db.run(_rows, _LOAD_FROM, {"sid": session_id, "lo": from_seq})
        else:
            rows = await self.db.run(_rows, _LOAD_RANGE, {"sid": session_id, "lo": from_seq, "hi": through_seq})
        return [StoredMessage(seq, content) for seq, content in rows]

    async def load_tail(self, session_id: str, from_seq: int, limit: int) -> list[StoredMessage]:
        """The last ``limit`` messages with ``seq >= from_seq``, in order (an index range scan)."""
        rows = await self.db.run(_rows, _LOAD_TAIL, {"sid": session_id, "lo": from_seq, "n": limit})
        return [StoredMessage(seq, content) for seq, content in reversed(rows)]

    async def open(self, info: SessionInfo, limit: int) -> OpenedSession:
        """:meth:`ensure`, the :meth:`load_tail` from its context start and the seq of the oldest
        user message still waiting for its answer (see :class:`OpenedSession`), in one transaction."""
        try:
            record, rows, waiting = await self.db.run(_open_session, info, limit)
        except IntegrityError:  # created concurrently (PostgreSQL): nothing of it can be waiting yet
            record = await self.ensure(info)
            return OpenedSession(record, await self.load_tail(info.session_id, record.context_start_seq, limit), None)
        return OpenedSession(record, [StoredMessage(seq, content) for seq, content in reversed(rows)], waiting)

    async def search_history(self, session_id: str, query: str, limit: int = 10,
                             before_seq: int | None = None) -> list[HistoryHit]:
        """Full-text search of this session's stored history (user and assistant text), most relevant first;
        ``before_seq``: only the messages before it (the turn being answered starts there)."""
        return await self.db.run_long(search_history, session_id, query, limit, before_seq)

    # --- the console's reads ---------------------------------------------------------------
    async def listing(self, query: str = "", limit: int = 100) -> list[SessionListRow]:
        """Conversations, most recently active first; ``query`` matches the id, title or channel (any case)."""
        return await self.db.run(_listing, query, limit)

    async def context_messages(self, rows: Sequence[SessionListRow]) -> dict[str, list[tuple[int, dict[str, Any]]]]:
        """The messages now in each listed conversation's context (from its boundary on), as ``(seq, message)``;
        one query for all of them."""
        return await self.db.run(_context_messages, [r.session_id for r in rows])

    async def row(self, session_id: str) -> dict[str, Any] | None:
        """Every column of one conversation's row, or None."""
        return await self.db.run(_row, session_id)

    async def last_messages(self, session_id: str, limit: int) -> list[tuple[int, dict[str, Any], datetime]]:
        """The conversation's last ``limit`` messages, oldest first: ``(seq, message, created_at)`` (a message
        stored as anything but an object is shown as ``{}``)."""
        return await self.db.run(_last_messages, session_id, limit)

    # --- several processes (DESIGN §10) ----------------------------------------------------
    async def to_restore(self, since: datetime, unsummarised: int, limit: int) -> list[SessionInfo]:
        """Sessions active since ``since`` with more than ``unsummarised`` messages after both the context
        boundary and the summary, latest first, at most ``limit``: those whose first message after a start
        would wait for a restore summary (agent/restore_ahead.py)."""
        covered = case((_S.context_start_seq - 1 > _S.summarized_through_seq, _S.context_start_seq - 1),
                       else_=_S.summarized_through_seq)
        stmt = (select(_S.session_id, _S.channel, _S.chat_id, _S.user_id, _S.is_group, _S.title)
                .where(_S.last_active >= bindparam("since", type_=UTCDateTime()),
                       _S.last_seq - covered > bindparam("n"))
                .order_by(_S.last_active.desc()).limit(bindparam("limit")))
        rows = await self.db.run(_rows, stmt, {"since": since, "n": unsummarised, "limit": limit})
        return [SessionInfo(row[0], row[1], row[2], row[3], bool(row[4]), row[5] or "") for row in rows]

    # --- deletion ------------------------------------------------------------------------
    async def delete_expired(self, cutoff: datetime, batch: int = 200, max_messages: int = 2000,
                             ) -> tuple[int, int]:
        """Delete one batch of sessions idle since before ``cutoff``, with their messages.

        Returns ``(sessions, messages)`` deleted in this batch; at most ``max_messages`` messages go per
        batch, and a batch that reaches it deletes no session yet ``(0, max_messages)``. A session that
        becomes active while the batch runs is kept: the condition is checked again under the write
        lock (SQLite) or row locks (PostgreSQL, which also skips sessions a running turn holds).
        """
        pick = (select(_S.session_id).where(_S.last_active < cutoff)
                .order_by(_S.last_active, _S.session_id).limit(batch))
        if self.db.dialect == "postgresql":
            pick = pick.with_for_update(skip_locked=True)
        return await self.db.run_long(_delete_expired, pick, cutoff, max_messages)

    async def forget(self, session_id: str) -> dict[str, int]:
        """/forget's database part, in one transaction: every table of the schema with a ``session_id`` column
        (but :data:`KEPT_TABLES`) loses the session's rows, and a group session its group's background; rows
        deleted per table."""
        return await self.db.run(delete_session_history, session_id)

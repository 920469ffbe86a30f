"""The conversation store: SQLAlchemy 2 Core on SQLite (WAL) or PostgreSQL, through the async API.

Everything a user said is written here before the model sees it. Trimming only moves
``sessions.context_start_seq``; message rows are deleted only by the retention job.

Each operation is a transaction function ``_fn(conn, ...)`` on a SQLAlchemy ``Connection``, run in one
transaction by :meth:`ConversationStore.run` (store/engine.py): the same statements on both databases.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import bindparam, case, delete, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, NoResultFound, OperationalError

from core.records import PendingIncoming, SessionInfo, SessionRecord, StoredMessage, SummaryJob
from store.engine import POSTGRES_POOL, Database, SQLiteDatabase, T, open_database
from store.group_messages import (
    GROUP_MESSAGE_CAP,
    GroupLine,
    add_group_message,
    delete_group_messages,
    delete_old_group_messages,
    group_background,
)
from store.history_search import HistoryHit, search_history
from store.migrations import upgrade_to_head
from store.models import (
    AdminGrantRow,
    InboxRow,
    MemoryChunkRow,
    MessageRow,
    ReminderRow,
    SessionRow,
    SummaryJobRow,
    UTCDateTime,
    utcnow,
)

logger = logging.getLogger(__name__)

__all__ = ["POSTGRES_POOL", "ConversationStore", "GroupLine", "HistoryHit", "OpenedSession", "PendingIncoming",
           "SessionInfo",
           "database_unavailable",
           "SessionRecord", "StoredMessage", "SummaryJob"]


# Statements on the tables, not the ORM classes: an ORM-enabled insert or update goes through the
# ORM's bulk-persistence plugin even on a Core connection, which is more work than the write itself.
_SESSIONS = SessionRow.__table__
_MESSAGES = MessageRow.__table__
_INBOX = InboxRow.__table__
_S = _SESSIONS.c
_M = _MESSAGES.c
_I = _INBOX.c
_JOBS = SummaryJobRow.__table__
_GRANTS = AdminGrantRow.__table__
_REMINDERS = ReminderRow.__table__
_J = _JOBS.c

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
_INSERT_INBOX = insert(_INBOX).returning(_I.id)
_LINK_INBOX = update(_INBOX).where(_I.id == bindparam("iid")).values(user_seq=bindparam("seq"))
_MARK_DONE = update(_INBOX).where(_I.id == bindparam("iid")).values(status="done")
_KEEP_REPLY = update(_INBOX).where(_I.id == bindparam("iid")).values(reply=bindparam("reply"))
_FIRST_WAITING = select(func.min(_I.user_seq)).where(_I.session_id == bindparam("sid"), _I.status == "pending",
                                                     _I.user_seq.is_not(None))


class OpenedSession(NamedTuple):
    """What :meth:`ConversationStore.open_session` reads in one transaction."""

    record: SessionRecord
    #: the last messages from the context start on, in order
    tail: list[StoredMessage]
    #: the seq of the oldest stored user message whose answer is still pending (a crash left it)
    waiting: int | None


def database_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` says the database could not be reached or dropped the connection (a PostgreSQL
    restart, a network cut), so the same work can succeed a moment later on a new connection."""
    return isinstance(exc, (OperationalError, InterfaceError)) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated)


def _record(row: Any) -> SessionRecord:
    return SessionRecord(row[0], row[1], row[2], row[3], row[4], row[5], row[6])


# --- transaction functions (each runs in one transaction; see store/engine.py) ----------------
def _get_session(conn: Connection, session_id: str) -> SessionRecord | None:
    row = _first(conn, _GET_SESSION, {"sid": session_id})
    return _record(row) if row is not None else None


def _ensure_session(conn: Connection, info: SessionInfo) -> SessionRecord:
    row = _first(conn, _GET_SESSION, {"sid": info.session_id})
    if row is not None:
        if info.title and info.title != row[7]:  # a renamed group or user
            _execute(conn, _SET_TITLE, {"sid": info.session_id, "new_title": info.title})
        return _record(row)
    now = utcnow()
    _execute(conn, _NEW_SESSION, {
        "session_id": info.session_id, "channel": info.channel, "chat_id": info.chat_id, "user_id": info.user_id,
        "is_group": info.is_group, "title": info.title, "created_at": now, "last_active": now,
        "context_start_seq": 1, "summary": None, "summary_turns": 0, "summarized_through_seq": 0, "last_seq": 0})
    return SessionRecord(info.session_id, 1, None, 0, 0, 0, now)


def _append(conn: Connection, session_id: str, messages: list[dict[str, Any]]) -> list[int]:
    n = len(messages)
    now = utcnow()
    last = _scalar(conn, _BUMP_SEQ, {"sid": session_id, "n": n, "now": now})
    if last is None:
        raise NoResultFound(f"no session {session_id!r}")  # as Core's scalar_one()
    seqs = list(range(last - n + 1, last + 1))
    rows = [{"session_id": session_id, "seq": seq, "role": m.get("role", ""), "content": m, "created_at": now}
            for seq, m in zip(seqs, messages, strict=True)]
    conn.execute(_INSERT_MESSAGES, rows if n > 1 else rows[0])
    return seqs


def _record_incoming(conn: Connection, channel: str, message_id: str, session_id: str, payload: dict[str, Any],
                     user_message: dict[str, Any] | None, session: SessionInfo | None) -> tuple[int, int | None]:
    if session is not None:
        _ensure_session(conn, session)
    seq = _append(conn, session_id, [user_message])[0] if user_message is not None else None
    inbox_id = _scalar(conn, _INSERT_INBOX, {
        "channel": channel, "message_id": message_id, "session_id": session_id, "user_seq": seq,
        "payload": payload, "status": "pending", "created_at": utcnow()})
    return inbox_id, seq


def _open_session(conn: Connection, info: SessionInfo, limit: int) -> tuple[SessionRecord, list[Any], int | None]:
    record = _ensure_session(conn, info)
    rows = _all(conn, _LOAD_TAIL, {"sid": info.session_id, "lo": record.context_start_seq, "n": limit})
    return record, rows, _scalar(conn, _FIRST_WAITING, {"sid": info.session_id})


def _append_answer(conn: Connection, session_id: str, message: dict[str, Any], inbox_id: int, reply: str) -> int:
    (seq,) = _append(conn, session_id, [message])
    _execute(conn, _KEEP_REPLY, {"iid": inbox_id, "reply": reply})
    return seq


def _append_user(conn: Connection, session_id: str, message: dict[str, Any], inbox_id: int | None) -> int:
    (seq,) = _append(conn, session_id, [message])
    if inbox_id is not None:
        _execute(conn, _LINK_INBOX, {"iid": inbox_id, "seq": seq})
    return seq


def _execute(conn: Connection, stmt: Any, params: Any = None) -> Any:
    """Run one statement; return its rowcount."""
    return conn.execute(stmt, params).rowcount


def _all(conn: Connection, stmt: Any, params: Any = None) -> list[Any]:
    return list(conn.execute(stmt, params).all())


def _first(conn: Connection, stmt: Any, params: Any = None) -> Any:
    return conn.execute(stmt, params).first()


def _scalar(conn: Connection, stmt: Any, params: Any = None) -> Any:
    return conn.execute(stmt, params).scalar()


def _scalars(conn: Connection, stmt: Any) -> list[Any]:
    return list(conn.execute(stmt).scalars().all())


def _insert_id(conn: Connection, stmt: Any) -> int:
    return conn.execute(stmt).scalar_one()


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
    conn.execute(delete(_JOBS).where(_J.session_id.in_(expired)))
    chunks = MemoryChunkRow.__table__
    conn.execute(delete(chunks).where(chunks.c.session_id.in_(expired)))  # the session's search index
    conn.execute(delete(_REMINDERS).where(_REMINDERS.c.session_id.in_(expired)))  # deleted with their session
    sessions = conn.execute(delete(_SESSIONS).where(_S.session_id.in_(ids), _S.last_active < cutoff)).rowcount
    return sessions or 0, messages


def _prune_inbox(conn: Connection, pick: Any) -> int:
    ids = list(conn.execute(pick).scalars().all())
    if not ids:
        return 0
    return conn.execute(delete(_INBOX).where(_I.id.in_(ids))).rowcount or 0


def _claim_view(conn: Connection, session_id: str, channels: list[str]) -> tuple[list[PendingIncoming],
                                                                                 tuple[int, int] | None]:
    rows = conn.execute(select(_I.id, _I.session_id, _I.user_seq, _I.payload, _I.reply).where(
        _I.session_id == session_id, _I.status == "pending", _I.channel.in_(channels)).order_by(_I.id)).all()
    version = conn.execute(select(_S.last_seq, _S.context_start_seq).where(_S.session_id == session_id)).first()
    return [PendingIncoming(*row) for row in rows], (tuple(version) if version is not None else None)


class ConversationStore:
    """Access to sessions, messages, the inbox, summary jobs and admin grants."""

    def __init__(self, url: str, *, create_tables: bool = True) -> None:
        self.url = url
        self.create_tables = create_tables
        self.database: Database | SQLiteDatabase | None = None

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.url.split(":", 1)[0].split("+", 1)[0]

    @property
    def engine(self) -> Any:
        """The SQLAlchemy engine (sync on SQLite, async on PostgreSQL; see store/engine.py), or None when closed."""
        return self.database.engine if self.database is not None else None

    async def open(self) -> None:
        """Connect and bring the schema up to date."""
        self.database = open_database(self.url)
        if self.create_tables:
            await self.migrate()

    async def migrate(self) -> None:
        """Apply the Alembic migrations up to head (a no-op when the database is already there)."""
        started = time.perf_counter()
        before, head = await self.run(upgrade_to_head)
        logger.info("Database schema at %s (was %s), checked in %.0f ms", head, before or "empty",
                    (time.perf_counter() - started) * 1000)

    async def close(self) -> None:
        """Close the connections."""
        if self.database is not None:
            database, self.database = self.database, None
            await database.close()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` on a SQLAlchemy ``Connection`` in one transaction; return its result."""
        assert self.database is not None, "store is not open"
        return await self.database.run(fn, *args)

    async def run_long(self, fn: Callable[..., T], *args: Any) -> T:
        """:meth:`run` for reads that take a while (an export's pages): off the event loop on SQLite too."""
        return await self.database.run_long(fn, *args)

    # --- sessions ------------------------------------------------------------------------
    async def ensure_session(self, info: SessionInfo) -> SessionRecord:
        """Return the session, creating it on first use."""
        try:
            return await self.run(_ensure_session, info)
        except IntegrityError:  # created concurrently (PostgreSQL)
            record = await self.get_session(info.session_id)
            assert record is not None
            return record

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """The session's persisted state, or None."""
        return await self.run(_get_session, session_id)

    async def set_context_start(self, session_id: str, seq: int) -> None:
        """Move the context boundary: messages before ``seq`` leave the context (rows are kept)."""
        await self.run(_execute, _SET_CONTEXT_START, {"sid": session_id, "seq": seq})

    def _at_least(self, seq: int) -> Any:
        """``summarized_through_seq`` raised to ``seq``, never lowered."""
        fn = func.max if self.dialect == "sqlite" else func.greatest
        return fn(_S.summarized_through_seq, seq)

    async def set_summary(self, session_id: str, summary: str | None, turns: int = 0,
                          through_seq: int | None = None) -> None:
        """Persist the injected summary (covering ``turns`` turns) and, optionally, how far summaries reach."""
        values: dict[str, Any] = {"summary": summary, "summary_turns": turns if summary else 0}
        if through_seq is not None:
            values["summarized_through_seq"] = self._at_least(through_seq)
        await self.run(_execute, update(_SESSIONS).where(_S.session_id == session_id).values(**values))

    async def set_summarized_through(self, session_id: str, seq: int) -> None:
        """Record that messages up to ``seq`` were summarised (never moves back), leaving the summary as is."""
        await self.run(_execute, update(_SESSIONS).where(_S.session_id == session_id)
                       .values(summarized_through_seq=self._at_least(seq)))

    # --- messages ------------------------------------------------------------------------
    async def append(self, session_id: str, messages: list[dict[str, Any]]) -> list[int]:
        """Store messages at the end of a session; return their seqs."""
        if not messages:
            return []
        return await self.run(_append, session_id, messages)

    async def load_messages(self, session_id: str, from_seq: int = 1, through_seq: int | None = None,
                            ) -> list[StoredMessage]:
        """Messages with ``from_seq <= seq [<= through_seq]``, in order."""
        if through_seq is None:
            rows = await self.run(_all, _LOAD_FROM, {"sid": session_id, "lo": from_seq})
        else:
            rows = await self.run(_all, _LOAD_RANGE, {"sid": session_id, "lo": from_seq, "hi": through_seq})
        return [StoredMessage(seq, content) for seq, content in rows]

    async def load_tail(self, session_id: str, from_seq: int, limit: int) -> list[StoredMessage]:
        """The last ``limit`` messages with ``seq >= from_seq``, in order (an index range scan)."""
        rows = await self.run(_all, _LOAD_TAIL, {"sid": session_id, "lo": from_seq, "n": limit})
        return [StoredMessage(seq, content) for seq, content in reversed(rows)]

    async def open_session(self, info: SessionInfo, limit: int) -> OpenedSession:
        """:meth:`ensure_session`, the :meth:`load_tail` from its context start and the seq of the oldest
        user message still waiting for its answer (see :class:`OpenedSession`), in one transaction."""
        try:
            record, rows, waiting = await self.run(_open_session, info, limit)
        except IntegrityError:  # created concurrently (PostgreSQL): nothing of it can be waiting yet
            record = await self.ensure_session(info)
            return OpenedSession(record, await self.load_tail(info.session_id, record.context_start_seq, limit), None)
        return OpenedSession(record, [StoredMessage(seq, content) for seq, content in reversed(rows)], waiting)

    async def search_history(self, session_id: str, query: str, limit: int = 10,
                             before_seq: int | None = None) -> list[HistoryHit]:
        """Full-text search of this session's stored history (user and assistant text), most relevant first;
        ``before_seq``: only the messages before it (the turn being answered starts there)."""
        assert self.database is not None, "store is not open"
        return await self.database.run_long(search_history, session_id, query, limit, before_seq)

    # --- inbox: dedup and crash resume ---------------------------------------------------
    async def record_incoming(self, channel: str, message_id: str, session_id: str,
                              payload: dict[str, Any], user_message: dict[str, Any] | None,
                              session: SessionInfo | None = None) -> tuple[int, int | None] | None:
        """Store an incoming message and, if given, its user message, in one transaction; with ``session``,
        the session is created first when it does not exist yet (as :meth:`ensure_session`).

        Returns ``(inbox_id, user_seq)``, or None when ``(channel, message_id)`` was seen before.
        """
        try:
            return await self.run(_record_incoming, channel, message_id, session_id, payload, user_message,
                                  session)
        except IntegrityError:
            if session is None:
                return None
        # The session may have been created concurrently (PostgreSQL): once more, with it in place.
        await self.ensure_session(session)
        return await self.record_incoming(channel, message_id, session_id, payload, user_message)

    async def append_answer(self, session_id: str, message: dict[str, Any], inbox_id: int, reply: str) -> int:
        """Store a turn's final assistant message and keep ``reply`` for its inbox row (the outbox, see
        :meth:`keep_reply`) in one transaction; return the message's seq."""
        return await self.run(_append_answer, session_id, message, inbox_id, reply)

    async def append_user(self, session_id: str, message: dict[str, Any], inbox_id: int | None) -> int:
        """Store the user message of a turn and link it to its inbox row, in one transaction."""
        return await self.run(_append_user, session_id, message, inbox_id)

    async def mark_done(self, inbox_ids: int | list[int]) -> None:
        """The message(s) have been answered."""
        ids = [inbox_ids] if isinstance(inbox_ids, int) else list(inbox_ids)
        if ids:
            await self.run(_execute, _MARK_DONE, [{"iid": i} for i in ids] if len(ids) > 1 else {"iid": ids[0]})

    async def keep_reply(self, inbox_id: int, reply: str) -> None:
        """The outbox: store a message's final reply before it is sent (it stays pending until sent)."""
        await self.run(_execute, _KEEP_REPLY, {"iid": inbox_id, "reply": reply})

    async def pending_replies(self) -> dict[int, str]:
        """Replies stored but not yet accepted by their platform, by inbox id."""
        rows = await self.run(_all, select(_I.id, _I.reply).where(_I.status == "pending", _I.reply.is_not(None)))
        return {row[0]: row[1] for row in rows}

    async def inbox_user_seq(self, inbox_id: int) -> int | None:
        """The seq of the user message stored for an inbox row, if one was."""
        return await self.run(_scalar, select(_I.user_seq).where(_I.id == inbox_id))

    async def pending_incoming(self) -> list[PendingIncoming]:
        """Messages stored but never answered, oldest first."""
        rows = await self.run(_all, select(_I.id, _I.session_id, _I.user_seq, _I.payload)
                              .where(_I.status == "pending").order_by(_I.id))
        return [PendingIncoming(*row) for row in rows]

    # --- summary jobs --------------------------------------------------------------------
    async def add_summary_job(self, session_id: str, reason: str, from_seq: int, through_seq: int) -> int:
        """Journal a summary job; return its id."""
        return await self.run(_insert_id, insert(_JOBS).values(
            session_id=session_id, reason=reason, from_seq=from_seq, through_seq=through_seq, status="pending",
            attempts=0, created_at=utcnow()).returning(_J.id))

    async def finish_summary_job(self, job_id: int) -> None:
        """Mark a summary job done."""
        await self.run(_execute, update(_JOBS).where(_J.id == job_id).values(status="done"))

    async def count_summary_attempt(self, job_id: int) -> None:
        """Record one more attempt at a job."""
        await self.run(_execute, update(_JOBS).where(_J.id == job_id).values(attempts=_J.attempts + 1))

    async def pending_summary_jobs(self, before: datetime | None = None) -> list[SummaryJob]:
        """Jobs not finished (journalled before ``before``, when given: a dead process may have left them),
        oldest first."""
        pick = select(_J.id, _J.session_id, _J.reason, _J.from_seq, _J.through_seq, _J.attempts).where(
            _J.status == "pending")
        if before is not None:
            pick = pick.where(_J.created_at < before)
        rows = await self.run(_all, pick.order_by(_J.id))
        return [SummaryJob(*row) for row in rows]

    # --- admins --------------------------------------------------------------------------
    async def grant_admin(self, user_key: str) -> None:
        """Make ``<channel>:<user id>`` an admin."""
        if user_key not in await self.admin_grants():
            try:
                await self.run(_execute, insert(_GRANTS).values(user_key=user_key, granted_at=utcnow()))
            except IntegrityError:  # granted concurrently
                pass

    async def admin_grants(self) -> set[str]:
        """Every user made admin through /auth."""
        return set(await self.run(_scalars, select(_GRANTS.c.user_key)))

    # --- retention -----------------------------------------------------------------------
    async def delete_expired_sessions(self, cutoff: datetime, batch: int = 200, max_messages: int = 2000,
                                      ) -> tuple[int, int]:
        """Delete one batch of sessions idle since before ``cutoff``, with their messages.

        Returns ``(sessions, messages)`` deleted in this batch; at most ``max_messages`` messages go per
        batch, and a batch that reaches it deletes no session yet ``(0, max_messages)``. A session that
        becomes active while the batch runs is kept: the condition is checked again under the write
        lock (SQLite) or row locks (PostgreSQL, which also skips sessions a running turn holds).
        """
        pick = (select(_S.session_id).where(_S.last_active < cutoff)
                .order_by(_S.last_active, _S.session_id).limit(batch))
        if self.dialect == "postgresql":
            pick = pick.with_for_update(skip_locked=True)
        assert self.database is not None, "store is not open"
        return await self.database.run_long(_delete_expired, pick, cutoff, max_messages)

    async def prune_inbox(self, cutoff: datetime, batch: int = 1000) -> int:
        """Delete one batch of answered inbox rows created before ``cutoff``; return how many."""
        pick = (select(_I.id).where(_I.status == "done", _I.created_at < cutoff).order_by(_I.id).limit(batch))
        assert self.database is not None, "store is not open"
        return await self.database.run_long(_prune_inbox, pick)

    # --- group background (DESIGN §1.3) ----------------------------------------------------
    async def add_group_message(self, channel: str, chat_id: str, user_name: str, text: str, kind: str,
                                sent_at: datetime, created_at: datetime, cap: int = GROUP_MESSAGE_CAP) -> None:
        """Store a group's background message (or trigger mark) and prune the group to its newest ``cap`` rows."""
        await self.run(add_group_message, channel, chat_id, user_name, text, kind, sent_at, created_at, cap)

    async def group_background(self, channel: str, chat_id: str, before: datetime, limit: int) -> list[GroupLine]:
        """The group's last ``limit`` background messages since its previous trigger mark, before ``before``."""
        if limit <= 0:
            return []
        return await self.run(group_background, channel, chat_id, before, limit)

    async def delete_group_messages(self, channel: str, chat_id: str) -> int:
        """Delete a group's whole background; return how many rows went."""
        return await self.run(delete_group_messages, channel, chat_id)

    async def delete_old_group_messages(self, cutoff: datetime, batch: int = 1000) -> int:
        """Delete one batch of group background rows received before ``cutoff``; return how many."""
        assert self.database is not None, "store is not open"
        return await self.database.run_long(delete_old_group_messages, cutoff, batch)

    # --- several processes (DESIGN §10) ----------------------------------------------------
    async def sessions_to_restore(self, since: datetime, unsummarised: int, limit: int) -> list[SessionInfo]:
        """Sessions active since ``since`` with more than ``unsummarised`` messages after both the context
        boundary and the summary, latest first, at most ``limit``: those whose first message after a start
        would wait for a restore summary (agent/restore_ahead.py)."""
        covered = case((_S.context_start_seq - 1 > _S.summarized_through_seq, _S.context_start_seq - 1),
                       else_=_S.summarized_through_seq)
        stmt = (select(_S.session_id, _S.channel, _S.chat_id, _S.user_id, _S.is_group, _S.title)
                .where(_S.last_active >= bindparam("since", type_=UTCDateTime()),
                       _S.last_seq - covered > bindparam("n"))
                .order_by(_S.last_active.desc()).limit(bindparam("limit")))
        rows = await self.run(_all, stmt, {"since": since, "n": unsummarised, "limit": limit})
        return [SessionInfo(row[0], row[1], row[2], row[3], bool(row[4]), row[5] or "") for row in rows]

    async def pending_sessions(self, channels: list[str]) -> list[str]:
        """Sessions with unanswered messages of the given channels."""
        return await self.run(_scalars, select(_I.session_id).where(
            _I.status == "pending", _I.channel.in_(channels)).distinct())

    async def claim_view(self, session_id: str, channels: list[str]) -> tuple[list[PendingIncoming],
                                                                              tuple[int, int] | None]:
        """In one transaction: a session's unanswered messages of the given channels, oldest first, with their
        kept replies; and its ``(last_seq, context_start_seq)`` (None when it does not exist yet), which tell
        whether another process changed it."""
        return await self.run(_claim_view, session_id, channels)

    async def summary_job_pending(self, job_id: int) -> bool:
        """True while the job is not finished (another process may have run it meanwhile)."""
        return await self.run(_scalar, select(_J.status).where(_J.id == job_id)) == "pending"

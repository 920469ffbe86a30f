"""The conversation store: SQLAlchemy 2 async on SQLite (WAL) or PostgreSQL.

Everything a user said is written here before the model sees it. Trimming only moves
``sessions.context_start_seq``; message rows are deleted only by the retention job.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, event, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

from memory.migrations import upgrade_to_head
from memory.models import (
    AdminGrantRow,
    InboxRow,
    MessageRow,
    SessionRow,
    SummaryJobRow,
    utcnow,
)

logger = logging.getLogger(__name__)

#: Connection pool of a PostgreSQL engine: enough for max_concurrent_turns' bursts, checked before use
#: (a server restart must not fail the next turn) and recycled before typical idle-connection timeouts.
POSTGRES_POOL: dict[str, Any] = {"pool_size": 10, "max_overflow": 20, "pool_pre_ping": True, "pool_recycle": 1800,
                                 "pool_timeout": 30}


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """Who a session belongs to, as derived by the dispatcher."""

    session_id: str
    channel: str
    chat_id: str
    user_id: str = ""
    is_group: bool = False
    title: str = ""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A session's persisted state."""

    session_id: str
    context_start_seq: int
    summary: str | None
    summary_turns: int
    summarized_through_seq: int
    last_seq: int
    last_active: datetime


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message with its per-session sequence number."""

    seq: int
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PendingIncoming:
    """An incoming message stored but not yet answered."""

    id: int
    session_id: str
    user_seq: int | None
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SummaryJob:
    """A journalled summary job."""

    id: int
    session_id: str
    reason: str
    from_seq: int
    through_seq: int
    attempts: int


def _record(row: SessionRow) -> SessionRecord:
    return SessionRecord(row.session_id, row.context_start_seq, row.summary, row.summary_turns,
                         row.summarized_through_seq, row.last_seq, row.last_active)


class ConversationStore:
    """Async access to sessions, messages, the inbox, summary jobs and admin grants."""

    def __init__(self, url: str, *, create_tables: bool = True) -> None:
        self.url = url
        self.create_tables = create_tables
        self.engine: AsyncEngine | None = None
        self._sessionmaker: async_sessionmaker | None = None

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.url.split(":", 1)[0].split("+", 1)[0]

    async def open(self) -> None:
        """Create the engine and bring the schema up to date."""
        kwargs: dict[str, Any] = {}
        if self.dialect == "sqlite":
            path = self.url.split("///", 1)[-1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            # Every session here ends in commit or rollback, so the pool's own rollback on return
            # is a redundant round trip to the SQLite thread on every operation.
            kwargs.update(pool_reset_on_return=None, pool_size=1, max_overflow=0)
        else:
            kwargs.update(POSTGRES_POOL)
        self.engine = create_async_engine(self.url, **kwargs)
        if self.dialect == "sqlite":
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
        self._sessionmaker = async_sessionmaker(self.engine, expire_on_commit=False)
        if self.create_tables:
            await self.migrate()

    async def migrate(self) -> None:
        """Apply the Alembic migrations up to head (a no-op when the database is already there)."""
        assert self.engine is not None, "store is not open"
        started = time.perf_counter()
        async with self.engine.begin() as conn:
            before, head = await conn.run_sync(upgrade_to_head)
        logger.info("Database schema at %s (was %s), checked in %.0f ms", head, before or "empty",
                    (time.perf_counter() - started) * 1000)

    async def close(self) -> None:
        """Dispose of the engine."""
        if self.engine is not None:
            await self.engine.dispose()
            self.engine = None

    def _s(self):
        assert self._sessionmaker is not None, "store is not open"
        return self._sessionmaker()

    def _begin(self):
        """A Core transaction: the hot paths skip the ORM session's bookkeeping."""
        assert self.engine is not None, "store is not open"
        return self.engine.begin()

    # --- sessions ------------------------------------------------------------------------
    async def ensure_session(self, info: SessionInfo) -> SessionRecord:
        """Return the session, creating it on first use."""
        async with self._s() as s:
            row = await s.get(SessionRow, info.session_id)
            if row is None:
                now = utcnow()
                row = SessionRow(session_id=info.session_id, channel=info.channel, chat_id=info.chat_id,
                                 user_id=info.user_id, is_group=info.is_group, title=info.title,
                                 created_at=now, last_active=now, context_start_seq=1, summary=None, summary_turns=0,
                                 summarized_through_seq=0, last_seq=0)
                s.add(row)
                try:
                    await s.commit()
                except IntegrityError:  # created concurrently
                    await s.rollback()
                    row = await s.get(SessionRow, info.session_id)
                    assert row is not None
            elif info.title and row.title != info.title:
                row.title = info.title
                await s.commit()
            return _record(row)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """The session's persisted state, or None."""
        async with self._s() as s:
            row = await s.get(SessionRow, session_id)
            return _record(row) if row else None

    async def set_context_start(self, session_id: str, seq: int) -> None:
        """Move the context boundary: messages before ``seq`` leave the context (rows are kept)."""
        async with self._s() as s:
            await s.execute(update(SessionRow).where(SessionRow.session_id == session_id)
                            .values(context_start_seq=seq))
            await s.commit()

    async def set_summary(self, session_id: str, summary: str | None, turns: int = 0,
                          through_seq: int | None = None) -> None:
        """Persist the injected summary (covering ``turns`` turns) and, optionally, how far summaries reach."""
        values: dict[str, Any] = {"summary": summary, "summary_turns": turns if summary else 0}
        if through_seq is not None:
            values["summarized_through_seq"] = func.max(SessionRow.summarized_through_seq, through_seq) \
                if self.dialect == "sqlite" else func.greatest(SessionRow.summarized_through_seq, through_seq)
        async with self._s() as s:
            await s.execute(update(SessionRow).where(SessionRow.session_id == session_id).values(**values))
            await s.commit()

    async def set_summarized_through(self, session_id: str, seq: int) -> None:
        """Record that messages up to ``seq`` were summarised (never moves back), leaving the summary as is."""
        through = func.max(SessionRow.summarized_through_seq, seq) if self.dialect == "sqlite" \
            else func.greatest(SessionRow.summarized_through_seq, seq)
        async with self._s() as s:
            await s.execute(update(SessionRow).where(SessionRow.session_id == session_id)
                            .values(summarized_through_seq=through))
            await s.commit()

    # --- messages ------------------------------------------------------------------------
    async def append(self, session_id: str, messages: list[dict[str, Any]]) -> list[int]:
        """Store messages at the end of a session; return their seqs."""
        if not messages:
            return []
        async with self._begin() as conn:
            return await self._append(conn, session_id, messages)

    async def _append(self, s, session_id: str, messages: list[dict[str, Any]]) -> list[int]:
        n = len(messages)
        now = utcnow()
        result = await s.execute(
            update(SessionRow).where(SessionRow.session_id == session_id)
            .values(last_seq=SessionRow.last_seq + n, last_active=now)
            .returning(SessionRow.last_seq)
        )
        last = result.scalar_one()
        seqs = list(range(last - n + 1, last + 1))
        # Core inserts: the ORM unit of work costs more than the write itself on this hot path.
        await s.execute(insert(MessageRow), [
            {"session_id": session_id, "seq": seq, "role": m.get("role", ""), "content": m, "created_at": now}
            for seq, m in zip(seqs, messages, strict=True)])
        return seqs

    async def load_messages(self, session_id: str, from_seq: int = 1, through_seq: int | None = None,
                            ) -> list[StoredMessage]:
        """Messages with ``from_seq <= seq [<= through_seq]``, in order."""
        stmt = (select(MessageRow.seq, MessageRow.content)
                .where(MessageRow.session_id == session_id, MessageRow.seq >= from_seq))
        if through_seq is not None:
            stmt = stmt.where(MessageRow.seq <= through_seq)
        async with self._s() as s:
            rows = (await s.execute(stmt.order_by(MessageRow.seq))).all()
        return [StoredMessage(seq, content) for seq, content in rows]

    async def load_tail(self, session_id: str, from_seq: int, limit: int) -> list[StoredMessage]:
        """The last ``limit`` messages with ``seq >= from_seq``, in order (an index range scan)."""
        stmt = (select(MessageRow.seq, MessageRow.content)
                .where(MessageRow.session_id == session_id, MessageRow.seq >= from_seq)
                .order_by(MessageRow.seq.desc()).limit(limit))
        async with self._s() as s:
            rows = (await s.execute(stmt)).all()
        return [StoredMessage(seq, content) for seq, content in reversed(rows)]

    # --- inbox: dedup and crash resume ---------------------------------------------------
    async def record_incoming(self, channel: str, message_id: str, session_id: str,
                              payload: dict[str, Any], user_message: dict[str, Any] | None,
                              ) -> tuple[int, int | None] | None:
        """Store an incoming message and, if given, its user message, in one transaction.

        Returns ``(inbox_id, user_seq)``, or None when ``(channel, message_id)`` was seen before.
        """
        try:
            async with self._begin() as s:
                seq = None
                if user_message is not None:
                    (seq,) = await self._append(s, session_id, [user_message])
                result = await s.execute(
                    insert(InboxRow).values(channel=channel, message_id=message_id, session_id=session_id,
                                            user_seq=seq, payload=payload, status="pending",
                                            created_at=utcnow()).returning(InboxRow.id))
                return result.scalar_one(), seq
        except IntegrityError:
            return None

    async def append_user(self, session_id: str, message: dict[str, Any], inbox_id: int | None) -> int:
        """Store the user message of a turn and link it to its inbox row, in one transaction."""
        async with self._begin() as s:
            (seq,) = await self._append(s, session_id, [message])
            if inbox_id is not None:
                await s.execute(update(InboxRow).where(InboxRow.id == inbox_id).values(user_seq=seq))
            return seq

    async def mark_done(self, inbox_ids: int | list[int]) -> None:
        """The message(s) have been answered."""
        ids = [inbox_ids] if isinstance(inbox_ids, int) else list(inbox_ids)
        if not ids:
            return
        async with self._begin() as conn:
            await conn.execute(update(InboxRow).where(InboxRow.id.in_(ids)).values(status="done"))

    async def pending_incoming(self) -> list[PendingIncoming]:
        """Messages stored but never answered, oldest first."""
        async with self._s() as s:
            rows = (await s.execute(select(InboxRow).where(InboxRow.status == "pending")
                                    .order_by(InboxRow.id))).scalars().all()
        return [PendingIncoming(r.id, r.session_id, r.user_seq, r.payload) for r in rows]

    # --- summary jobs --------------------------------------------------------------------
    async def add_summary_job(self, session_id: str, reason: str, from_seq: int, through_seq: int) -> int:
        """Journal a summary job; return its id."""
        async with self._s() as s, s.begin():
            row = SummaryJobRow(session_id=session_id, reason=reason, from_seq=from_seq,
                                through_seq=through_seq, status="pending", attempts=0, created_at=utcnow())
            s.add(row)
            await s.flush()
            return row.id

    async def finish_summary_job(self, job_id: int) -> None:
        """Mark a summary job done."""
        async with self._s() as s:
            await s.execute(update(SummaryJobRow).where(SummaryJobRow.id == job_id).values(status="done"))
            await s.commit()

    async def count_summary_attempt(self, job_id: int) -> None:
        """Record one more attempt at a job."""
        async with self._s() as s:
            await s.execute(update(SummaryJobRow).where(SummaryJobRow.id == job_id)
                            .values(attempts=SummaryJobRow.attempts + 1))
            await s.commit()

    async def pending_summary_jobs(self) -> list[SummaryJob]:
        """Jobs not finished, oldest first."""
        async with self._s() as s:
            rows = (await s.execute(select(SummaryJobRow).where(SummaryJobRow.status == "pending")
                                    .order_by(SummaryJobRow.id))).scalars().all()
        return [SummaryJob(r.id, r.session_id, r.reason, r.from_seq, r.through_seq, r.attempts) for r in rows]

    # --- admins --------------------------------------------------------------------------
    async def grant_admin(self, user_key: str) -> None:
        """Make ``<channel>:<user id>`` an admin."""
        async with self._s() as s:
            if await s.get(AdminGrantRow, user_key) is None:
                s.add(AdminGrantRow(user_key=user_key, granted_at=utcnow()))
                await s.commit()

    async def admin_grants(self) -> set[str]:
        """Every user made admin through /auth."""
        async with self._s() as s:
            return set((await s.execute(select(AdminGrantRow.user_key))).scalars().all())

    # --- retention -----------------------------------------------------------------------
    async def delete_expired_sessions(self, cutoff: datetime, batch: int = 200) -> tuple[int, int]:
        """Delete one batch of sessions idle since before ``cutoff``, with their messages.

        Returns ``(sessions, messages)`` deleted in this batch. A session that becomes active while the
        batch runs is kept: the condition is checked again under the write lock (SQLite) or row locks
        (PostgreSQL, which also skips sessions a running turn holds).
        """
        pick = (select(SessionRow.session_id).where(SessionRow.last_active < cutoff)
                .order_by(SessionRow.last_active, SessionRow.session_id).limit(batch))
        if self.dialect == "postgresql":
            pick = pick.with_for_update(skip_locked=True)
        async with self._s() as s, s.begin():
            ids = (await s.execute(pick)).scalars().all()
            if not ids:
                return 0, 0
            expired = select(SessionRow.session_id).where(SessionRow.session_id.in_(ids),
                                                          SessionRow.last_active < cutoff)
            msgs = await s.execute(delete(MessageRow).where(MessageRow.session_id.in_(expired)))
            await s.execute(delete(SummaryJobRow).where(SummaryJobRow.session_id.in_(expired)))
            sessions = await s.execute(delete(SessionRow).where(SessionRow.session_id.in_(ids),
                                                                SessionRow.last_active < cutoff))
            return sessions.rowcount or 0, msgs.rowcount or 0

    async def prune_inbox(self, cutoff: datetime, batch: int = 1000) -> int:
        """Delete one batch of answered inbox rows created before ``cutoff``; return how many."""
        pick = (select(InboxRow.id).where(InboxRow.status == "done", InboxRow.created_at < cutoff)
                .order_by(InboxRow.id).limit(batch))
        async with self._s() as s, s.begin():
            ids = (await s.execute(pick)).scalars().all()
            if not ids:
                return 0
            result = await s.execute(delete(InboxRow).where(InboxRow.id.in_(ids)))
            return result.rowcount or 0


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()

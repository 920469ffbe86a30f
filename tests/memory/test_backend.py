"""The store's backends: transactions on every backend, and SQLite's off-loop WAL checkpoints."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, StatementError

from memory import backend
from memory import store as store_module
from memory.models import AdminGrantRow, InboxRow, MessageRow, SessionRow, utcnow
from memory.store import ConversationStore, SessionInfo


class Boom(Exception):
    """Raised inside a transaction."""


def size(path: Path) -> int:
    """A file's size; 0 when it does not exist."""
    return path.stat().st_size if path.exists() else 0


def grant(conn: Connection, key: str) -> int:
    conn.execute(insert(AdminGrantRow).values(user_key=key, granted_at=utcnow()))
    return conn.execute(select(func.count()).select_from(AdminGrantRow)).scalar_one()


def grant_then_fail(conn: Connection) -> None:
    grant(conn, "telegram:2")
    raise Boom


async def test_run_commits_or_rolls_back_as_a_whole(store: ConversationStore) -> None:
    assert await store.run(grant, "telegram:1") == 1
    with pytest.raises(Boom):
        await store.run(grant_then_fail)
    assert await store.admin_grants() == {"telegram:1"}


def append_then_fail(tx: backend.Tx, session_id: str) -> None:
    store_module._append(tx, session_id, [{"role": "user", "content": "lost"}])
    raise Boom


async def test_run_tx_commits_or_rolls_back_as_a_whole(store: ConversationStore) -> None:
    await store.ensure_session(SessionInfo("telegram:1", "telegram", "1"))
    assert await store.append("telegram:1", [{"role": "user", "content": "kept"}]) == [1]
    with pytest.raises(Boom):
        await store.run_tx(append_then_fail, "telegram:1")
    assert [m.message["content"] for m in await store.load_messages("telegram:1")] == ["kept"]
    assert (await store.get_session("telegram:1")).last_seq == 1


async def test_hot_path_values_read_back_the_same_through_core(store: ConversationStore) -> None:
    """The driver path (SQLite) writes exactly what Core reads: JSON, aware UTC datetimes, booleans."""
    info = SessionInfo("telegram:group:5:7", "telegram", "5", user_id="7", is_group=True, title="Ünïcode 群")
    message = {"role": "user", "content": "héllo 你好 \"quoted\"", "extra": {"n": [1, 2.5, None, True]}}
    before = utcnow()
    inbox_id, seq = await store.record_incoming("telegram", "5:1", info.session_id, {"text": "héllo"}, message,
                                                session=info)
    record = await store.get_session(info.session_id)

    def read(conn: Connection) -> tuple:
        session = conn.execute(select(SessionRow.is_group, SessionRow.title, SessionRow.last_active,
                                      SessionRow.created_at)).one()
        stored = conn.execute(select(MessageRow.content, MessageRow.created_at, MessageRow.role)).one()
        inbox = conn.execute(select(InboxRow.payload, InboxRow.status, InboxRow.user_seq)).one()
        return tuple(session), tuple(stored), tuple(inbox)

    session, stored, inbox = await store.run(read)
    assert session[:2] == (True, "Ünïcode 群")
    assert session[2] == record.last_active and session[2].tzinfo is not None and session[2] >= before
    assert stored[0] == message and stored[2] == "user" and stored[1].utcoffset().total_seconds() == 0
    assert inbox == ({"text": "héllo"}, "pending", seq)
    assert (inbox_id, seq) == (1, 1)


async def test_hot_path_errors_are_sqlalchemy_errors(store: ConversationStore) -> None:
    def missing_parameter(tx: backend.Tx) -> None:
        tx.first(store_module._GET_SESSION, {})

    def duplicate_session(tx: backend.Tx) -> None:
        for _ in range(2):
            tx.execute(store_module._NEW_SESSION, {
                "session_id": "telegram:9", "channel": "telegram", "chat_id": "9", "user_id": "", "is_group": False,
                "title": "", "created_at": utcnow(), "last_active": utcnow(), "context_start_seq": 1,
                "summary": None, "summary_turns": 0, "summarized_through_seq": 0, "last_seq": 0})

    with pytest.raises(StatementError, match="A value is required for bind parameter 'sid'"):
        await store.run_tx(missing_parameter)
    with pytest.raises(IntegrityError):
        await store.run_tx(duplicate_session)
    assert await store.get_session("telegram:9") is None  # the first insert was rolled back with the second


async def test_sqlite_has_one_connection_and_a_second_checkout_fails_at_once(tmp_path: Path) -> None:
    store = ConversationStore(f"sqlite:///{tmp_path / 'c.db'}")
    await store.open()
    try:
        with pytest.raises(Exception, match="QueuePool limit"):
            store.engine.connect()  # the store holds the only one: a bug must not hang for a pool timeout
        assert await store.run(grant, "terminal:local") == 1
    finally:
        await store.close()


async def test_checkpointer_folds_the_wal_back_off_the_loop(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "CHECKPOINT_BYTES", 64 * 1024)
    monkeypatch.setattr(backend, "CHECKPOINT_INTERVAL", 0.01)
    db = tmp_path / "c.db"
    store = ConversationStore(f"sqlite:///{db}")
    await store.open()
    assert isinstance(store.backend, backend.SQLiteBackend)
    checkpointer = store.backend.checkpointer
    assert checkpointer is not None
    wal = Path(f"{db}-wal")
    try:
        await store.ensure_session(SessionInfo("telegram:1", "telegram", "1"))
        for _ in range(40):
            await store.append("telegram:1", [{"role": "user", "content": "x" * 4000}])
        assert size(wal) >= 64 * 1024  # autocheckpoint is off: commits never checkpoint
        async with asyncio.timeout(5):
            while checkpointer.checkpoints == 0:  # noqa: ASYNC110 - polling a counter the checkpointer bumps
                await asyncio.sleep(0.01)
        busy, frames, done = checkpointer.checkpoint()
        assert (busy, done) == (0, frames)  # everything in the WAL is in the database now
    finally:
        await store.close()
    assert size(wal) == 0  # close() truncates it
    reopened = ConversationStore(f"sqlite:///{db}")
    await reopened.open()
    try:
        assert len(await reopened.load_messages("telegram:1")) == 40
    finally:
        await reopened.close()


async def test_in_memory_sqlite_works_without_a_checkpointer() -> None:
    store = ConversationStore("sqlite://")
    await store.open()
    try:
        assert isinstance(store.backend, backend.SQLiteBackend)
        assert store.backend.checkpointer is None
        await store.ensure_session(SessionInfo("telegram:1", "telegram", "1"))
        assert await store.append("telegram:1", [{"role": "user", "content": "hi"}]) == [1]
    finally:
        await store.close()

"""The store's backends: transactions on every backend, and SQLite's off-loop WAL checkpoints."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection

from memory import backend
from memory.models import AdminGrantRow, utcnow
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

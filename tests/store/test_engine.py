"""The store's engines: one transaction per run on every backend; on SQLite, waiting for a lock never on the loop."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, OperationalError, StatementError

from core.records import SessionInfo
from store import engine as backend
from store import sessions as store_module
from store.engine import BUSY_TIMEOUT_MS, sqlite_path
from store.models import AdminGrantRow, InboxRow, MessageRow, SessionRow, utcnow
from store.store import Store


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


def append_then_fail(conn: Connection, session_id: str) -> None:
    store_module.append_messages(conn, session_id, [{"role": "user", "content": "lost"}])
    raise Boom


async def test_run_commits_or_rolls_back_as_a_whole(store: Store) -> None:
    assert await store.run(grant, "telegram:1") == 1
    with pytest.raises(Boom):
        await store.run(grant_then_fail)
    assert await store.admins.all() == {"telegram:1"}
    await store.sessions.ensure(SessionInfo("telegram:1", "telegram", "1"))
    assert await store.sessions.append("telegram:1", [{"role": "user", "content": "kept"}]) == [1]
    with pytest.raises(Boom):
        await store.run(append_then_fail, "telegram:1")
    assert [m.message["content"] for m in await store.sessions.load_messages("telegram:1")] == ["kept"]
    assert (await store.sessions.get("telegram:1")).last_seq == 1


async def test_values_read_back_as_written(store: Store) -> None:
    """JSON, aware UTC datetimes, booleans and Unicode, written by the per-turn statements, read through Core."""
    info = SessionInfo("telegram:group:5:7", "telegram", "5", user_id="7", is_group=True, title="Ünïcode 群")
    message = {"role": "user", "content": "héllo 你好 \"quoted\"", "extra": {"n": [1, 2.5, None, True]}}
    before = utcnow()
    inbox_id, seq = await store.journal.record_incoming("telegram", "5:1", info.session_id, {"text": "héllo"}, message,
                                                session=info)
    record = await store.sessions.get(info.session_id)

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


async def test_errors_are_sqlalchemy_errors_and_roll_back(store: Store) -> None:
    def missing_parameter(conn: Connection) -> None:
        conn.execute(store_module._GET_SESSION, {})

    def duplicate_session(conn: Connection) -> None:
        for _ in range(2):
            conn.execute(store_module._NEW_SESSION, {
                "session_id": "telegram:9", "channel": "telegram", "chat_id": "9", "user_id": "", "is_group": False,
                "title": "", "created_at": utcnow(), "last_active": utcnow(), "context_start_seq": 1,
                "summary": None, "summary_turns": 0, "summarized_through_seq": 0, "last_seq": 0})

    with pytest.raises(StatementError, match="A value is required for bind parameter 'sid'"):
        await store.run(missing_parameter)
    with pytest.raises(IntegrityError):
        await store.run(duplicate_session)
    assert await store.sessions.get("telegram:9") is None  # the first insert was rolled back with the second


async def test_concurrent_appends_get_distinct_seqs_in_order(store: Store) -> None:
    await store.sessions.ensure(SessionInfo("telegram:1", "telegram", "1"))
    results = await asyncio.gather(*(store.sessions.append("telegram:1", [{"role": "user", "content": str(i)},
                                                                 {"role": "assistant", "content": str(i)}])
                                     for i in range(30)))
    assert sorted(seq for pair in results for seq in pair) == list(range(1, 61))
    stored = await store.sessions.load_messages("telegram:1")
    for pair in results:  # each append's two messages are adjacent: transactions do not interleave
        assert stored[pair[0] - 1].message["content"] == stored[pair[1] - 1].message["content"]


def test_sqlite_path() -> None:
    assert sqlite_path("sqlite:////data/chatbot.db") == "/data/chatbot.db"
    assert sqlite_path("sqlite:///chatbot.db") == "chatbot.db"
    assert sqlite_path("sqlite://") == sqlite_path("sqlite:///:memory:") == ""


async def test_an_outside_writer_delays_store_writes_but_never_the_event_loop(tmp_path: Path) -> None:
    """Another program holding SQLite's write lock: our transaction waits in the worker thread, the loop runs on."""
    db = tmp_path / "c.db"
    store = Store(f"sqlite:///{db}")
    await store.open()
    outside = sqlite3.connect(db, isolation_level=None)
    try:
        await store.sessions.ensure(SessionInfo("telegram:1", "telegram", "1"))
        outside.execute("BEGIN IMMEDIATE")
        outside.execute("UPDATE sessions SET title = 'outside'")
        started = time.perf_counter()
        append = asyncio.ensure_future(store.sessions.append("telegram:1", [{"role": "user", "content": "waits"}]))
        ticks = 0
        while time.perf_counter() - started < 0.6:  # the loop keeps ticking while the append waits
            await asyncio.sleep(0.01)
            ticks += 1
        assert not append.done()
        outside.execute("COMMIT")
        assert await asyncio.wait_for(append, 5) == [1]
        assert time.perf_counter() - started >= 0.6
        # a wait on the loop's thread would have held it until the COMMIT: a tick or none in those 0.6 s
        assert ticks >= 5
        # a transaction that reads before it writes takes the lock at BEGIN: no "database is locked" when the
        # outside writer commits between its read and its write
        outside.execute("BEGIN IMMEDIATE")
        renamed = asyncio.ensure_future(store.sessions.ensure(SessionInfo("telegram:1", "telegram", "1", title="T")))
        await asyncio.sleep(0.1)
        outside.execute("UPDATE sessions SET title = 'outside again'")
        outside.execute("COMMIT")
        await asyncio.wait_for(renamed, 5)
        assert outside.execute("SELECT title FROM sessions").fetchone() == ("T",)
    finally:
        outside.close()
        await store.close()


async def test_transactions_after_a_waiting_one_wait_for_it_even_when_its_caller_gave_up(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = Store(f"sqlite:///{db}")
    await store.open()
    outside = sqlite3.connect(db, isolation_level=None)
    try:
        await store.sessions.ensure(SessionInfo("telegram:1", "telegram", "1"))
        assert store.database.waited == 0  # the lock was free: everything ran inline
        outside.execute("BEGIN IMMEDIATE")
        first = asyncio.ensure_future(store.sessions.append("telegram:1", [{"role": "user", "content": "first"}]))
        await asyncio.sleep(0.05)
        first.cancel()
        second = asyncio.ensure_future(store.sessions.append("telegram:1", [{"role": "user", "content": "second"}]))
        await asyncio.sleep(0.05)
        assert not second.done()  # waiting for the worker to finish the first, not beside it
        outside.execute("COMMIT")
        assert await asyncio.wait_for(second, 5) == [2]
        assert store.database.waited == 1  # the second then ran inline
        # the first transaction was under way when its caller gave up: it committed
        assert [m.message["content"] for m in await store.sessions.load_messages("telegram:1")] == ["first", "second"]
        assert store.database.waited == 1
    finally:
        outside.close()
        await store.close()


async def test_checkpoints_run_in_the_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "CHECKPOINT_BYTES", 64 * 1024)
    monkeypatch.setattr(backend, "CHECKPOINT_CHECK_EVERY", 5)
    db = tmp_path / "c.db"
    store = Store(f"sqlite:///{db}")
    await store.open()
    try:
        await store.sessions.ensure(SessionInfo("telegram:1", "telegram", "1"))
        for _ in range(40):
            await store.sessions.append("telegram:1", [{"role": "user", "content": "x" * 4000}])
        async with asyncio.timeout(5):
            while store.database.checkpoints == 0:  # noqa: ASYNC110 - a counter the worker bumps
                await asyncio.sleep(0.01)
    finally:
        await store.close()
    assert size(Path(f"{db}-wal")) == 0  # folded back into the database at close
    reopened = Store(f"sqlite:///{db}")
    await reopened.open()
    try:
        assert len(await reopened.sessions.load_messages("telegram:1")) == 40
    finally:
        await reopened.close()


async def test_an_outside_writer_holding_the_lock_too_long_fails_the_transaction(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    store = Store(f"sqlite:///{db}")
    await store.open()
    outside = sqlite3.connect(db, isolation_level=None)
    try:
        outside.execute("BEGIN IMMEDIATE")
        started = time.perf_counter()
        with pytest.raises(OperationalError, match="database is locked"):
            await store.run(grant, "telegram:1")
        assert time.perf_counter() - started >= BUSY_TIMEOUT_MS / 1000 * 0.9
        outside.execute("ROLLBACK")
        assert await store.run(grant, "telegram:1") == 1  # the connection is usable again
    finally:
        outside.close()
        await store.close()


async def test_in_memory_sqlite_works() -> None:
    store = Store("sqlite://")
    await store.open()
    try:
        await store.sessions.ensure(SessionInfo("telegram:1", "telegram", "1"))
        assert await store.sessions.append("telegram:1", [{"role": "user", "content": "hi"}]) == [1]
        assert [m.seq for m in await store.sessions.load_messages("telegram:1")] == [1]
    finally:
        await store.close()


async def test_transactions_asked_for_together_commit_together_and_fail_alone(tmp_path: Path) -> None:
    """SQLite's group commit: one commit for the transactions of one turn of the loop; one that raises is
    rolled back alone, and one whose caller gave up before it ran never runs."""
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    await store.open()
    database = store.database
    try:
        batches, transactions = database.batches, database.transactions
        counts = await asyncio.gather(*(store.run(grant, f"telegram:{i}") for i in range(5)))
        assert counts == [1, 2, 3, 4, 5]  # each saw the ones before it, in the order asked
        assert (database.batches - batches, database.transactions - transactions) == (1, 5)

        def grant_and_fail(conn: Connection) -> None:
            grant(conn, "telegram:failed")
            raise Boom

        mixed = await asyncio.gather(store.run(grant, "telegram:6"), store.run(grant_and_fail),
                                     store.run(grant, "telegram:1"),  # a duplicate key
                                     store.run(grant, "telegram:7"), return_exceptions=True)
        assert mixed[0] == 6 and mixed[3] == 7
        assert isinstance(mixed[1], Boom) and isinstance(mixed[2], IntegrityError)
        assert await store.admins.all() == {f"telegram:{i}" for i in (0, 1, 2, 3, 4, 6, 7)}

        given_up = asyncio.ensure_future(store.run(grant, "telegram:never"))
        kept = asyncio.ensure_future(store.run(grant, "telegram:8"))
        await asyncio.sleep(0)  # both asked for; the batch runs at the end of this turn of the loop
        given_up.cancel()
        assert await kept == 8
        assert "telegram:never" not in await store.admins.all()
    finally:
        await store.close()


def slow_grant(conn: Connection, key: str) -> None:
    conn.execute(insert(AdminGrantRow).values(user_key=key, granted_at=utcnow()))
    time.sleep(0.002)  # PostgreSQL runs this in SQLAlchemy's greenlet, off the loop's own await points


async def test_callers_cancelled_mid_transaction_leak_no_connection(store: Store) -> None:
    """Turns are cut at shutdown and "still working" notes cancelled while their writes run. On PostgreSQL a
    cancellation inside SQLAlchemy's checkout or commit used to leave a connection neither closed nor returned
    (seen as psycopg's "deleted while still open" warning); now each cancelled transaction ends on its own."""
    cancelled = 0
    for i in range(60):
        call = asyncio.ensure_future(store.run(slow_grant, f"telegram:{i}"))
        for _ in range(i % 6):  # cancel at a different point of the transaction each time
            await asyncio.sleep(0)
        if call.cancel():  # False when it is over already (SQLite's inline transactions often are)
            cancelled += 1
            with pytest.raises(asyncio.CancelledError):
                await call
    database = store.database
    assert database is not None
    if database.dialect != "sqlite":
        assert cancelled == 60  # a PostgreSQL transaction takes more than six turns of the loop
        if database._orphans:  # the cancelled transactions end on their own, soon
            await asyncio.wait(set(database._orphans), timeout=10)
        assert not database._orphans
        assert database.engine.sync_engine.pool.checkedout() == 0
    granted = await store.admins.all()
    assert granted <= {f"telegram:{i}" for i in range(60)}  # each one whole or not at all, and the store still works
    await store.run(grant, "telegram:after")
    assert "telegram:after" in await store.admins.all()

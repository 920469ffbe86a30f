"""Tests for store/locks.py: advisory locks shared by processes (PostgreSQL), local locks on SQLite."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from sqlalchemy import text

from store.locks import AdvisoryLocks, LocalLocks, lock_key, locks_for
from tests.conftest import TEST_DATABASE_URL

pg_only = pytest.mark.skipif(not TEST_DATABASE_URL, reason="TEST_DATABASE_URL not set")


async def eventually(locks: AdvisoryLocks, name: str, within: float = 5.0) -> bool:
    """Try to take a lock until the server has released it from a connection that went away."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await locks.try_acquire(name):
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


@pytest.fixture
def pg_url(db_url: str) -> str:
    if not db_url.startswith("postgresql"):
        pytest.skip("advisory locks are PostgreSQL's")
    return db_url


def test_lock_keys_are_stable_signed_64_bit():
    assert lock_key("session:telegram:1") == lock_key("session:telegram:1")
    assert lock_key("a") != lock_key("b")
    assert -2**63 <= lock_key("leader") < 2**63


def test_locks_for_picks_by_database():
    assert isinstance(locks_for("sqlite:///x.db"), LocalLocks)
    assert isinstance(locks_for("postgresql+psycopg://u@h/db"), AdvisoryLocks)


async def test_local_locks_exclude_within_the_process():
    locks = LocalLocks()
    assert not locks.shared
    assert await locks.try_acquire("x")
    assert not await locks.try_acquire("x")
    assert locks.held("x")
    await locks.release("x")
    assert await locks.try_acquire("x")


@pg_only
async def test_two_processes_exclude_each_other_and_close_releases(pg_url):
    a, b = AdvisoryLocks(pg_url), AdvisoryLocks(pg_url)
    try:
        assert await a.try_acquire("session:s1")
        assert not await b.try_acquire("session:s1")
        assert not await a.try_acquire("session:s1")  # not re-entrant, even in the holder
        assert await b.try_acquire("session:s2")
        await a.release("session:s1")
        assert await b.try_acquire("session:s1")
        await b.close()  # a process that ends frees everything it held (once the server has seen it go)
        assert await eventually(a, "session:s1") and await eventually(a, "session:s2")
    finally:
        await a.close()
        await b.close()


@pg_only
async def test_schemas_do_not_share_locks(pg_url, tmp_path):
    schema = "locks_other_schema"
    plain = pg_url.split("?", 1)[0].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    other = pg_url.split("?", 1)[0] + f"?options=-csearch_path%3D{schema}"
    a, b = AdvisoryLocks(pg_url), AdvisoryLocks(other)
    try:
        assert await a.try_acquire("leader")
        assert await b.try_acquire("leader")
    finally:
        await a.close()
        await b.close()
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pg_only
async def test_a_broken_connection_loses_every_lock_and_says_so(pg_url):
    a, b = AdvisoryLocks(pg_url), AdvisoryLocks(pg_url)
    lost: list[set[str]] = []
    a.on_lost.append(lost.append)
    try:
        assert await a.try_acquire("leader") and await a.try_acquire("session:s1")
        assert await a.ping()
        pid = await a.backend_pid()
        await (await b._connection()).execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        assert not await a.ping()
        assert lost == [{"leader", "session:s1"}]
        assert not a.held("leader")
        assert await eventually(b, "leader")  # the server freed them: another process takes over
        assert await a.ping()  # and the first reconnects
        assert not await a.try_acquire("leader")
    finally:
        await a.close()
        await b.close()

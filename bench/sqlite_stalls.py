"""What an outside writer holding SQLite's write lock does to other chats, on either way of running SQLite.

Four ways to run the store's SQLite transactions are compared:

* ``store``: the store as it is (store/engine.py: inline while the write lock is free, else in a worker);
* ``worker``: every transaction handed whole to the store's worker thread;
* ``aiosqlite``: SQLAlchemy's async engine over aiosqlite (thread hops per statement);
* ``inline``: always inline on the event loop's thread, waiting there for the lock (busy_timeout 5 s).

Twenty chats each take a turn every 100 ms (store the user message, a 50 ms "model call", store the reply),
while a heartbeat task measures how late the event loop wakes it. After a second, another program (a
thread here, standing for e.g. a ``sqlite3`` shell or a backup script) takes the write lock for 3 s.
Reported per option: the longest event-loop stall, turn latency (median, max), and how many turns
finished and how many model calls were started while the lock was held.

Run: ``python bench/sqlite_stalls.py [--hold 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import create_engine, event  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402
from sqlalchemy.pool import AsyncAdaptedQueuePool, QueuePool  # noqa: E402

from core.records import SessionInfo  # noqa: E402
from store import engine as backend  # noqa: E402
from store.store import Store  # noqa: E402

T = TypeVar("T")
CHATS = 20


def _waiting_connect(dbapi_conn: Any, record: Any) -> None:
    """The store's pragmas, but waiting for the lock where the transaction runs, and SQLite's own checkpoints."""
    backend._sqlite_connect(dbapi_conn, record)
    dbapi_conn.execute(f"PRAGMA busy_timeout={backend.BUSY_TIMEOUT_MS}")
    dbapi_conn.execute("PRAGMA wal_autocheckpoint=1000")


class WorkerDatabase(backend.SQLiteDatabase):
    """The store's SQLite engine, but every transaction goes to its worker thread."""

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one transaction in the worker thread."""
        return await self._in_worker(self._run_waiting, fn, args)


class InlineDatabase:
    """The store's transactions on a synchronous engine, on the event loop's thread (the other option)."""

    def __init__(self, path: str) -> None:
        self.dialect = "sqlite"
        self.engine = create_engine(f"sqlite:///{path}", poolclass=QueuePool, pool_size=1, max_overflow=0)
        event.listen(self.engine, "connect", _waiting_connect)
        event.listen(self.engine, "begin", backend._sqlite_begin)
        self.conn = self.engine.connect()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one transaction, blocking the loop while it runs."""
        with self.conn.begin():
            return fn(self.conn, *args)

    async def close(self) -> None:
        """Close the connection."""
        self.conn.close()
        self.engine.dispose()


class AiosqliteDatabase:
    """The store's transactions on SQLAlchemy's async engine over aiosqlite (its thread, per statement)."""

    def __init__(self, path: str) -> None:
        self.dialect = "sqlite"
        self.engine = create_async_engine(f"sqlite+aiosqlite:///{path}", poolclass=AsyncAdaptedQueuePool,
                                          pool_size=1, max_overflow=0, pool_timeout=60)
        event.listen(self.engine.sync_engine, "connect", _waiting_connect)
        event.listen(self.engine.sync_engine, "begin", backend._sqlite_begin)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one transaction through ``run_sync``."""
        async with self.engine.begin() as conn:
            return await conn.run_sync(fn, *args)

    async def close(self) -> None:
        """Close the connection."""
        await self.engine.dispose()


OPTIONS = {"inline": InlineDatabase, "worker": WorkerDatabase, "aiosqlite": AiosqliteDatabase}


async def open_store(path: str, option: str) -> Store:
    """A migrated store on ``path`` whose transactions run the given way."""
    store = Store(f"sqlite:///{path}")
    await store.open()
    if option in OPTIONS:
        await store.database.close()
        database = OPTIONS[option]
        store.database = database(f"sqlite:///{path}") if database is WorkerDatabase else database(path)
    return store


def hold_lock(path: str, start: float, hold: float, done: threading.Event) -> None:
    """Another program: take the write lock at ``start`` (perf_counter) and keep it for ``hold`` seconds."""
    time.sleep(max(0.0, start - time.perf_counter()))
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE sessions SET title = 'outside' WHERE session_id = 'bench:0'")
    time.sleep(hold)
    conn.execute("COMMIT")
    conn.close()
    done.set()


async def run(option: str, hold: float) -> dict[str, float]:
    """One run of the experiment; its figures."""
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/chatbot.db"
        store = await open_store(path, option)
        for i in range(CHATS):
            await store.sessions.ensure(SessionInfo(f"bench:{i}", "bench", str(i)))
        stop = time.perf_counter() + 1.0 + hold + 1.5
        lock_from = time.perf_counter() + 1.0
        lock_to = lock_from + hold
        latencies: list[float] = []
        finished_during = 0
        calls_during = 0
        stalls: list[float] = []

        async def heartbeat() -> None:
            while time.perf_counter() < stop:
                before = time.perf_counter()
                await asyncio.sleep(0.005)
                stalls.append(time.perf_counter() - before - 0.005)

        async def chat(i: int) -> None:
            nonlocal finished_during, calls_during
            await asyncio.sleep(i * 0.005)
            while time.perf_counter() < stop:
                started = time.perf_counter()
                await store.sessions.append(f"bench:{i}", [{"role": "user", "content": f"message {i}"}])
                if lock_from <= time.perf_counter() < lock_to:
                    calls_during += 1
                await asyncio.sleep(0.05)  # the model
                await store.sessions.append(f"bench:{i}", [{"role": "assistant", "content": "reply"}])
                end = time.perf_counter()
                latencies.append(end - started)
                if lock_from <= end < lock_to:
                    finished_during += 1
                await asyncio.sleep(max(0.0, 0.1 - (end - started)))

        done = threading.Event()
        holder = threading.Thread(target=hold_lock, args=(path, lock_from, hold, done), daemon=True)
        holder.start()
        await asyncio.gather(heartbeat(), *(chat(i) for i in range(CHATS)))
        holder.join()
        await store.close()
    return {"loop_stall_max_ms": max(stalls) * 1000, "turn_median_ms": statistics.median(latencies) * 1000,
            "turn_max_ms": max(latencies) * 1000, "finished_while_locked": finished_during,
            "model_calls_started_while_locked": calls_during, "turns": len(latencies)}


def main() -> None:
    """Run both options, interleaved, and print the figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--hold", type=float, default=3.0, help="seconds the outside writer holds the lock")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"store": [], "inline": [], "worker": [], "aiosqlite": []}
    for _ in range(args.runs):
        for option in results:
            results[option].append(asyncio.run(run(option, args.hold)))
    print(f"outside writer holds the write lock {args.hold:.1f} s; {CHATS} chats, a turn each 100 ms, 50 ms model")
    for option, runs in results.items():
        keys = runs[0].keys()
        medians = {k: statistics.median(r[k] for r in runs) for k in keys}
        print(f"  {option:9}: " + ", ".join(f"{k} {v:.0f}" for k, v in medians.items()))


if __name__ == "__main__":
    main()

"""How the store's transactions reach the database: inline on SQLite, through asyncio on PostgreSQL.

Every store operation is a plain function ``fn(conn, *args)`` on a SQLAlchemy ``Connection``, run in
one transaction by :meth:`Backend.run`:

* **SQLite** runs it *inline*, on the event loop's thread, on one connection held for the store's
  life. A hot-path transaction costs ~0.1-0.3 ms there, while aiosqlite's hop to its thread and back
  costs ~0.3 ms *per statement* and SQLAlchemy's async adaptation more again (3-4 ms per turn in
  all). A transaction never awaits, so two can never interleave, and no lock is needed. What could
  block the loop for long is kept off it: WAL checkpoints (the fsyncs) run in a worker thread on a
  connection of their own (:class:`WalCheckpointer`), and the retention job deletes in small batches.
* **PostgreSQL** runs it through the async psycopg engine with ``AsyncConnection.run_sync``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import QueuePool

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Connection pool of a PostgreSQL engine: enough for max_concurrent_turns' bursts, checked before use
#: (a server restart must not fail the next turn) and recycled before typical idle-connection timeouts.
POSTGRES_POOL: dict[str, Any] = {"pool_size": 10, "max_overflow": 20, "pool_pre_ping": True, "pool_recycle": 1800,
                                 "pool_timeout": 30}

#: Checkpoint the WAL once it holds this many bytes (SQLite's own default is 1,000 pages, ~4 MB).
CHECKPOINT_BYTES = 4 * 1024 * 1024
#: How often the checkpointer looks at the WAL's size.
CHECKPOINT_INTERVAL = 0.5
#: A WAL file larger than this is truncated back to it when it restarts.
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024
BUSY_TIMEOUT_MS = 5000


class Backend:
    """Runs transaction functions; see the module docstring."""

    dialect: str

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one transaction and return its result."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release the connections."""
        raise NotImplementedError


class SQLiteBackend(Backend):
    """One connection, used inline on the event loop's thread; checkpoints in a worker thread."""

    dialect = "sqlite"

    def __init__(self, url: str) -> None:
        self.path = url.split("///", 1)[1] if "///" in url else ""
        self.memory = self.path in ("", ":memory:")
        if not self.memory:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # One connection, held by the store: a second checkout is a bug, so fail at once rather than wait.
        self.engine: Engine = create_engine(f"sqlite:///{self.path or ':memory:'}", poolclass=QueuePool, pool_size=1,
                                            max_overflow=0, pool_timeout=0, pool_reset_on_return=None)
        event.listen(self.engine, "connect", _sqlite_pragmas)
        self.conn: Connection = self.engine.connect()
        self.checkpointer = None if self.memory else WalCheckpointer(self.path)

    def start(self) -> None:
        """Start the background checkpointer (needs a running loop)."""
        if self.checkpointer is not None:
            self.checkpointer.start()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one transaction, inline."""
        with self.conn.begin():
            return fn(self.conn, *args)

    async def close(self) -> None:
        """Stop the checkpointer, fold the WAL back into the database and close."""
        if self.checkpointer is not None:
            await self.checkpointer.stop()
        with contextlib.suppress(Exception):
            self.conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        self.conn.close()
        self.engine.dispose()


class WalCheckpointer:
    """Copies the WAL back into the database from a worker thread, so no commit ever pays for the fsyncs.

    The store's own connection has ``wal_autocheckpoint=0``. A PASSIVE checkpoint runs beside readers
    and writers; SQLite restarts the WAL from its start at the next write after a complete one.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.wal = Path(f"{path}-wal")
        self.checkpoints = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: sqlite3.Connection | None = None

    def start(self) -> None:
        """Start checking the WAL's size."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="sqlite-checkpoint")

    async def stop(self) -> None:
        """Stop, after any checkpoint under way."""
        self._stop.set()
        task, self._task = self._task, None
        # (a task of a loop that has ended was cancelled with it: nothing to wait for)
        if task is not None and not task.done():
            await task
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _wal_size(self) -> int:
        try:
            return os.stat(self.wal).st_size
        except FileNotFoundError:
            return 0

    async def _loop(self) -> None:
        last_size = 0
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), CHECKPOINT_INTERVAL)
            size = self._wal_size()
            # The file keeps its size after a restart of the WAL: checkpoint when it has grown since.
            if size >= CHECKPOINT_BYTES and size != last_size:
                try:
                    await asyncio.to_thread(self.checkpoint)
                except Exception:  # noqa: BLE001 - the next round tries again; commits never depend on it
                    logger.exception("WAL checkpoint failed")
            last_size = size

    def checkpoint(self) -> tuple[int, int, int]:
        """One PASSIVE checkpoint (blocking): ``(busy, wal frames, frames checkpointed)``."""
        if self._conn is None:
            self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        busy, frames, done = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.checkpoints += 1
        return busy, frames, done


class AsyncEngineBackend(Backend):
    """PostgreSQL through the async psycopg driver."""

    def __init__(self, url: str) -> None:
        self.engine: AsyncEngine = create_async_engine(url, **POSTGRES_POOL)
        self.dialect = self.engine.dialect.name

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one transaction through ``run_sync``."""
        async with self.engine.begin() as conn:
            return await conn.run_sync(fn, *args)

    async def close(self) -> None:
        """Dispose of the pool."""
        await self.engine.dispose()


def open_backend(url: str) -> Backend:
    """The backend for a database URL."""
    if url.startswith("sqlite"):
        return SQLiteBackend(url)
    return AsyncEngineBackend(url)


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA wal_autocheckpoint=0")  # WalCheckpointer does it off the event loop
    cur.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
    cur.close()

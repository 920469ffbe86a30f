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

The per-turn operations go one step further, through :meth:`Backend.run_tx`: their statements are
:class:`Statement` values, built once with SQLAlchemy, and the transaction function gets a :class:`Tx`.
On SQLite each statement is compiled once more for the engine's dialect and then executed on the
``sqlite3`` connection itself, with the column types' own bind and result processors, so the stored
values are exactly what SQLAlchemy writes and reads. Core's per-execute work (execution context,
parameter processing, result metadata, its transaction wrapper) cost ~3x the statement itself on the hot
path (~1 ms of CPU per turn, against ~0.3 ms on the driver). On PostgreSQL, :class:`Tx` runs the same
statements through Core.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.exc import DBAPIError, InvalidRequestError, StatementError
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


class Statement:
    """A statement of the hot path: built once with SQLAlchemy, compiled once per dialect where it runs on
    the driver. ``keys`` names the columns an INSERT sets (its parameters), as Core derives them per call."""

    __slots__ = ("core", "keys")

    def __init__(self, core: Any, keys: tuple[str, ...] | None = None) -> None:
        self.core = core
        self.keys = keys


class Tx(Protocol):
    """The transaction a :meth:`Backend.run_tx` function works in. Rows are tuples (indexable)."""

    def rows(self, stmt: Statement, params: dict[str, Any]) -> list[Any]:
        """Every row of a query."""
        ...

    def first(self, stmt: Statement, params: dict[str, Any]) -> Any:
        """The first row, or None."""
        ...

    def scalar(self, stmt: Statement, params: dict[str, Any]) -> Any:
        """The first column of the first row, or None."""
        ...

    def execute(self, stmt: Statement, params: dict[str, Any] | list[dict[str, Any]]) -> int:
        """Run a statement (once per dict for a list); return the number of rows it changed."""
        ...


class CoreTx:
    """:class:`Tx` on a SQLAlchemy connection."""

    __slots__ = ("conn",)

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def rows(self, stmt: Statement, params: dict[str, Any]) -> list[Any]:
        """Every row of a query."""
        return list(self.conn.execute(stmt.core, params).all())

    def first(self, stmt: Statement, params: dict[str, Any]) -> Any:
        """The first row, or None."""
        return self.conn.execute(stmt.core, params).first()

    def scalar(self, stmt: Statement, params: dict[str, Any]) -> Any:
        """The first column of the first row, or None."""
        return self.conn.execute(stmt.core, params).scalar()

    def execute(self, stmt: Statement, params: dict[str, Any] | list[dict[str, Any]]) -> int:
        """Run a statement; return the number of rows it changed."""
        return self.conn.execute(stmt.core, params).rowcount


class _Compiled:
    """A :class:`Statement` compiled for one dialect with a positional paramstyle, and its processors."""

    __slots__ = ("sql", "binds", "results")

    def __init__(self, stmt: Statement, dialect: Dialect) -> None:
        compiled = stmt.core.compile(dialect=dialect, column_keys=list(stmt.keys) if stmt.keys else None)
        self.sql = str(compiled)
        binds = compiled.binds
        #: (name, processor or None, required, default) per position; a default serves the binds SQLAlchemy
        #: added itself (e.g. an OFFSET)
        self.binds = tuple((name, binds[name].type.dialect_impl(dialect).bind_processor(dialect),
                            binds[name].required, binds[name].value)
                           for name in compiled.positiontup or ())
        core = stmt.core
        columns = core.selected_columns if hasattr(core, "selected_columns") else core.exported_columns
        processors = tuple(col.type.dialect_impl(dialect).result_processor(dialect, None) for col in columns)
        #: per column: a processor or None; None altogether when no column needs one
        self.results = processors if any(processors) else None

    def parameters(self, params: dict[str, Any]) -> tuple[Any, ...]:
        """The positional parameters for one execution."""
        out = []
        for name, process, required, default in self.binds:
            if name in params:
                value = params[name]
            elif required:  # as Core reports it
                problem = f"A value is required for bind parameter {name!r}"
                raise StatementError(problem, self.sql, params, InvalidRequestError(problem))
            else:
                value = default
            out.append(process(value) if process is not None else value)
        return tuple(out)

    def row(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        """A result row with the column types' processing applied."""
        results = self.results
        if results is None:
            return row
        return tuple(value if process is None else process(value) for process, value in zip(results, row, strict=True))


class DriverTx:
    """:class:`Tx` straight on a ``sqlite3`` connection (see the module docstring); errors are raised as
    SQLAlchemy's, so callers catch one family."""

    __slots__ = ("backend", "raw")

    def __init__(self, backend: SQLiteBackend, raw: sqlite3.Connection) -> None:
        self.backend = backend
        self.raw = raw

    def _cursor(self, stmt: Statement, params: dict[str, Any]) -> tuple[_Compiled, sqlite3.Cursor]:
        compiled = self.backend.compiled(stmt)
        args = compiled.parameters(params)
        try:
            return compiled, self.raw.execute(compiled.sql, args)
        except sqlite3.Error as exc:
            raise _wrap(compiled.sql, args, exc, self.backend.engine.dialect) from exc

    def rows(self, stmt: Statement, params: dict[str, Any]) -> list[Any]:
        """Every row of a query."""
        compiled, cursor = self._cursor(stmt, params)
        rows = cursor.fetchall()
        return rows if compiled.results is None else [compiled.row(r) for r in rows]

    def first(self, stmt: Statement, params: dict[str, Any]) -> Any:
        """The first row, or None."""
        rows = self.rows(stmt, params)  # read them all: a statement left unfinished would hold the commit
        return rows[0] if rows else None

    def scalar(self, stmt: Statement, params: dict[str, Any]) -> Any:
        """The first column of the first row, or None."""
        row = self.first(stmt, params)
        return row[0] if row is not None else None

    def execute(self, stmt: Statement, params: dict[str, Any] | list[dict[str, Any]]) -> int:
        """Run a statement (once per dict for a list); return the number of rows it changed."""
        compiled = self.backend.compiled(stmt)
        try:
            if isinstance(params, list):
                args_list = [compiled.parameters(p) for p in params]
                return self.raw.executemany(compiled.sql, args_list).rowcount
            args = compiled.parameters(params)
            return self.raw.execute(compiled.sql, args).rowcount
        except sqlite3.Error as exc:
            raise _wrap(compiled.sql, params, exc, self.backend.engine.dialect) from exc


def _wrap(sql: str, params: Any, exc: sqlite3.Error, dialect: Dialect) -> DBAPIError:
    """The SQLAlchemy exception Core would raise for a driver error (IntegrityError, OperationalError, ...)."""
    return DBAPIError.instance(sql, params, exc, sqlite3.Error, dialect=dialect)


class Backend:
    """Runs transaction functions; see the module docstring."""

    dialect: str

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one transaction and return its result."""
        raise NotImplementedError

    async def run_tx(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(tx, *args)`` in one transaction and return its result (see :class:`Tx`)."""
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
        self._compiled: dict[Statement, _Compiled] = {}

    def compiled(self, stmt: Statement) -> _Compiled:
        """``stmt`` compiled for this engine's dialect (once)."""
        compiled = self._compiled.get(stmt)
        if compiled is None:
            compiled = self._compiled[stmt] = _Compiled(stmt, self.engine.dialect)
        return compiled

    def start(self) -> None:
        """Start the background checkpointer (needs a running loop)."""
        if self.checkpointer is not None:
            self.checkpointer.start()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one transaction, inline."""
        with self.conn.begin():
            return fn(self.conn, *args)

    async def run_tx(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(tx, *args)`` on the driver connection, inline, and commit (as Core does on pysqlite:
        the driver opens the transaction at the first write)."""
        raw = self.conn.connection.driver_connection
        try:
            result = fn(DriverTx(self, raw), *args)
            raw.commit()
        except BaseException as exc:
            raw.rollback()
            if isinstance(exc, sqlite3.Error):  # from commit()
                raise _wrap("COMMIT", (), exc, self.engine.dialect) from exc
            raise
        return result

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

    async def run_tx(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(tx, *args)`` in one transaction through Core."""
        async with self.engine.begin() as conn:
            return await conn.run_sync(lambda sync_conn: fn(CoreTx(sync_conn), *args))

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

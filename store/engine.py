"""The store's engines: one transaction function per operation, the same Core statements on both databases.

Every store operation is a plain function ``fn(conn, *args)`` on a SQLAlchemy ``Connection``, run in one
transaction by ``run``. The event loop must never wait on the database for long: a slow disk or another
program holding SQLite's write lock may delay the transactions that need the database, never every chat
(README, "Storage", has the measurements behind this design).

* PostgreSQL (:class:`Database`): SQLAlchemy's async engine (psycopg), ``AsyncConnection.run_sync``.
* SQLite (:class:`SQLiteDatabase`): one connection on a synchronous engine. A transaction runs inline on
  the loop when SQLite's write lock is free at once, which is nearly always and is the cheapest way; it
  cannot wait there, because the connection's ``busy_timeout`` is 0. When the lock is taken (another
  program writes), the transaction is handed whole to one worker thread, which waits for the lock up to
  ``BUSY_TIMEOUT_MS``; transactions that come meanwhile wait (on the loop, asynchronously) until the
  thread is idle, then run inline again. Long work (``run_long``: cleanup batches, history searches)
  runs in that thread too, and so do WAL checkpoints (the only fsyncs with ``synchronous=NORMAL``), on a
  connection of their own so that transactions go on beside them. The transactions asked for in one turn
  of the event loop share one commit (see :meth:`SQLiteDatabase.run`).

Each SQLite transaction starts with ``BEGIN IMMEDIATE``: it takes the write lock at its start, so one
that reads and then writes cannot fail half-way because another program committed in between.
aiosqlite was measured and not chosen: it hops to its thread several times per statement.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.pool import QueuePool

from store.search_terms import SQL_FUNCTION, index_text

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Connection pool of a PostgreSQL engine: enough for max_concurrent_turns' bursts, checked before use
#: (a server restart must not fail the next turn) and recycled before typical idle-connection timeouts.
POSTGRES_POOL: dict[str, Any] = {"pool_size": 10, "max_overflow": 20, "pool_pre_ping": True, "pool_recycle": 1800,
                                 "pool_timeout": 30}
#: libpq keepalives on the advisory locks' connection (store/locks.py): a host that vanished without closing its
#: socket loses its locks after about idle + interval x count seconds.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3}
#: How long a SQLite transaction waits (in the worker) for another program's write lock before it fails.
BUSY_TIMEOUT_MS = 5000
#: Checkpoint the WAL once it holds this many bytes (SQLite's own automatic threshold is ~4 MB too).
CHECKPOINT_BYTES = 4 * 1024 * 1024
#: Look at the WAL's size once per this many commits.
CHECKPOINT_CHECK_EVERY = 100


class Runner(Protocol):
    """What a repository (store/sessions.py, store/journal.py, …) needs of the store: transactions on its engine."""

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        ...

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one transaction; return its result."""
        ...

    async def run_long(self, fn: Callable[..., T], *args: Any) -> T:
        """:meth:`run` for work that takes a while (off the event loop on SQLite too)."""
        ...


def database_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` says the database could not be reached or dropped the connection (a PostgreSQL
    restart, a network cut), so the same work can succeed a moment later on a new connection."""
    return isinstance(exc, (OperationalError, InterfaceError)) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated)


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite://`` URL; "" for an in-memory database."""
    path = url.split("///", 1)[1] if "///" in url else ""
    return "" if path == ":memory:" else path


def sqlite_database(url: str) -> str:
    """The ``database`` part of a ``sqlite://`` URL as SQLAlchemy reads it ("" when it has none)."""
    from sqlalchemy.engine import make_url

    return make_url(url).database or ""


def unreachable(url: str, timeout: float) -> str | None:
    """PostgreSQL: connect once (waiting at most ``timeout`` s); the driver's reason, first line, when that
    fails, else None."""
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": int(timeout)})
    try:
        with engine.connect():
            return None
    except SQLAlchemyError as exc:
        reason = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        return str(reason).strip().splitlines()[0]
    finally:
        engine.dispose()


class Database:
    """PostgreSQL: an async engine and the one way to use it, :meth:`run`."""

    def __init__(self, url: str) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine  # PostgreSQL only: SQLite runs without it

        self.dialect = url.split(":", 1)[0].split("+", 1)[0]
        self.engine: Any = create_async_engine(url, **POSTGRES_POOL)
        #: transactions whose callers were cancelled: they finish on their own (see :meth:`run`)
        self._orphans: set[asyncio.Task[Any]] = set()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` on a SQLAlchemy ``Connection`` in one transaction; return its result.

        A caller cancelled meanwhile (a turn cut at shutdown, a "still working" note no longer needed) does not
        cancel the transaction: it commits or rolls back on its own and gives its connection back to the pool.
        Cancelled inside SQLAlchemy's checkout or commit, the connection could be neither closed nor returned and
        would leak (sqlalchemy#8145, #12077). It is what SQLite's worker thread does too: a job once handed over
        runs to its end."""
        task = asyncio.ensure_future(self._transaction(fn, *args))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                if not task.cancelled():
                    task.exception()  # over already: its outcome is nobody's now (marked as seen)
            else:
                self._orphans.add(task)
                task.add_done_callback(self._orphan_done)
            raise

    async def _transaction(self, fn: Callable[..., T], *args: Any) -> T:
        async with self.engine.begin() as conn:
            return await conn.run_sync(fn, *args)

    def _orphan_done(self, task: asyncio.Task[Any]) -> None:
        self._orphans.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("a transaction whose caller was cancelled failed: %s", task.exception())

    async def run_long(self, fn: Callable[..., T], *args: Any) -> T:
        """:meth:`run`, for work that may take a while (PostgreSQL never runs on the loop anyway)."""
        return await self.run(fn, *args)

    async def close(self, grace: float = 5.0) -> None:
        """Close every connection, once the transactions of cancelled callers are over (up to ``grace`` s)."""
        if self._orphans:
            await asyncio.wait(set(self._orphans), timeout=grace)
        await self.engine.dispose()


def lock_engine(url: str, application_name: str) -> Any:
    """PostgreSQL: the engine of the advisory locks' one connection (store/locks.py): autocommit, no pool (a
    connection holding session-level locks must never be handed to anyone else), TCP keepalives."""
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool

    return create_async_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT",
                               connect_args={"application_name": application_name, **KEEPALIVES})


class SQLiteDatabase:
    """SQLite: one connection, inline when the write lock is free, else in one worker thread (see above)."""

    dialect = "sqlite"

    def __init__(self, url: str) -> None:
        self.path = sqlite_path(url)
        if self.path:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.engine: Any = create_engine(
            f"sqlite:///{self.path or ':memory:'}", poolclass=QueuePool, pool_size=1, max_overflow=0, pool_timeout=0,
            connect_args={"check_same_thread": False})  # used by the loop's thread or the worker, never both
        event.listen(self.engine, "connect", _sqlite_connect)
        event.listen(self.engine, "begin", _sqlite_begin)
        self.conn: Connection = self.engine.connect()
        self._worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")
        #: jobs handed to the worker and not finished: while any is, the connection belongs to the worker
        self._queued = 0
        self._idle = asyncio.Event()
        self._commits = 0
        self._last_wal_size = 0
        self._checkpoint_conn: sqlite3.Connection | None = None
        #: transactions that had to wait for the lock, and checkpoints run (for tests and logs)
        self.waited = 0
        self.checkpoints = 0
        #: transactions asked for in this turn of the loop, run by :meth:`_run_batch` at its end
        self._batch: list[tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[Any]]] | None = None
        #: transactions run, and the group commits that committed them (for tests and logs)
        self.transactions = 0
        self.batches = 0

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` on a SQLAlchemy ``Connection`` in one transaction; return its result.

        Transactions asked for in the same turn of the event loop commit together (a group commit): the
        caller still resumes only after its work is committed, and a work that raises is rolled back alone
        (the others are run again, each in a transaction of its own). ``fn`` must do nothing but database
        work, since it may run twice.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._batch is None:
            self._batch = []
            loop.call_soon(self._run_batch)
        self._batch.append((fn, args, future))
        return await future

    def _run_batch(self) -> None:
        """The transactions asked for in the last turn of the loop, in one transaction when it can."""
        batch = [job for job in self._batch or () if not job[2].cancelled()]
        self._batch = None
        if not batch:
            return
        if self._queued:  # the worker has the connection
            self._each_alone(batch)
            return
        try:
            transaction = self.conn.begin()
        except OperationalError as exc:
            if not _busy(exc):
                _fail(batch, exc)
                return
            self._each_alone(batch)
            return
        results: list[Any] = []
        try:
            with transaction:
                for fn, args, _ in batch:
                    results.append(fn(self.conn, *args))
        except Exception as exc:  # noqa: BLE001 - handed to its caller, or the others run again alone
            if len(batch) == 1:
                _fail(batch, exc)
            else:
                self._each_alone(batch)
            return
        self.batches += 1
        self.transactions += len(batch)
        self._committed()
        for (_, _, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)

    def _each_alone(self, batch: list[tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[Any]]]) -> None:
        for fn, args, future in batch:
            job = asyncio.ensure_future(self._run_alone(fn, *args))
            job.add_done_callback(lambda done, future=future: _settle(future, done))

    async def _run_alone(self, fn: Callable[..., T], *args: Any) -> T:
        """One transaction of its own: inline when the write lock is free, else in the worker."""
        while self._queued:  # the worker has the connection: wait (never in a thread) until it is done
            await self._idle.wait()
        try:
            transaction = self.conn.begin()
        except OperationalError as exc:
            if not _busy(exc):
                raise
        else:
            with transaction:
                result = fn(self.conn, *args)
            self._committed()
            return result
        self.waited += 1
        result = await self._in_worker(self._run_waiting, fn, args)
        self._committed()
        return result

    async def run_long(self, fn: Callable[..., T], *args: Any) -> T:
        """:meth:`run` in the worker thread, for work that may take a while (cleanup batches, searches)."""
        result = await self._in_worker(self._run_waiting, fn, args)
        self._committed()
        return result

    def _run_waiting(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        """In the worker: the transaction, waiting for the write lock as long as ``busy_timeout`` allows."""
        raw = self.conn.connection.driver_connection  # (through Core, a PRAGMA would begin a transaction)
        raw.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        try:
            with self.conn.begin():
                return fn(self.conn, *args)
        finally:
            raw.execute("PRAGMA busy_timeout=0")

    def _in_worker(self, job: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        self._queued += 1
        self._idle.clear()
        future = self._worker.submit(job, *args)
        # Counted down on the loop only once the job is over, even if its caller was cancelled meanwhile.
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(self._job_done))
        return asyncio.wrap_future(future)

    def _job_done(self) -> None:
        self._queued -= 1
        if not self._queued:
            self._idle.set()

    def _committed(self) -> None:
        """Every so many commits, hand a checkpoint to the worker once the WAL has grown enough."""
        self._commits += 1
        if not self.path or self._commits % CHECKPOINT_CHECK_EVERY:
            return
        try:
            size = os.stat(f"{self.path}-wal").st_size
        except FileNotFoundError:
            return
        # The file keeps its size after SQLite restarts it: checkpoint when it has grown since.
        if size >= CHECKPOINT_BYTES and size != self._last_wal_size:
            self._worker.submit(self._checkpoint).add_done_callback(_log_failure)
        self._last_wal_size = size

    def _checkpoint(self) -> None:
        """In the worker, on a connection of its own: a PASSIVE checkpoint runs beside our transactions."""
        if self._checkpoint_conn is None:
            self._checkpoint_conn = sqlite3.connect(self.path, isolation_level=None)
        self._checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self.checkpoints += 1

    async def close(self) -> None:
        """Close the connection (SQLite folds the WAL back into the database file as it does)."""
        logger.info("SQLite: %d transaction(s) in %d group commit(s); %d waited for another writer's lock; "
                    "%d checkpoint(s)", self.transactions, self.batches, self.waited, self.checkpoints)
        await self._in_worker(self._close)
        self._worker.shutdown()

    def _close(self) -> None:
        if self._checkpoint_conn is not None:
            self._checkpoint_conn.close()
        self.conn.close()
        self.engine.dispose()


def open_database(url: str) -> Database | SQLiteDatabase:
    """The engine for a database URL."""
    return SQLiteDatabase(url) if url.startswith("sqlite") else Database(url)


def _busy(exc: OperationalError) -> bool:
    """True when SQLite refused the write lock because another connection holds it (SQLITE_BUSY)."""
    code = getattr(exc.orig, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_BUSY


def _fail(batch: list[tuple[Any, Any, asyncio.Future[Any]]], exc: BaseException) -> None:
    for _, _, future in batch:
        if not future.done():
            future.set_exception(exc)


def _settle(future: asyncio.Future[Any], done: asyncio.Future[Any]) -> None:
    """Pass the outcome of ``done`` on to ``future`` (unless its caller gave up on it)."""
    if future.done():
        if not done.cancelled():
            done.exception()  # retrieved: nobody waits for it any more
    elif done.cancelled():
        future.cancel()
    elif done.exception() is not None:
        future.set_exception(done.exception())
    else:
        future.set_result(done.result())


def _log_failure(future: concurrent.futures.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.error("WAL checkpoint failed: %s", future.exception())


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    # Let SQLAlchemy's "begin" event open transactions (BEGIN IMMEDIATE) instead of the driver's implicit,
    # deferred BEGIN before the first write.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=0")  # never wait on the loop's thread; SQLiteDatabase._run_waiting waits
    cur.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run in the worker (SQLiteDatabase._committed)
    cur.close()
    # the history-search trigger (migration 0006) indexes a message's text through it
    dbapi_conn.create_function(SQL_FUNCTION, 1, index_text, deterministic=True)


def _sqlite_begin(conn: Any) -> None:
    # On the DB-API cursor rather than through exec_driver_sql: BEGIN binds nothing and returns no rows,
    # so the execution context, events and result object around it are work that every transaction paid
    # for nothing. A failure is raised as SQLAlchemy raises driver errors (OperationalError for a lock).
    try:
        conn.connection.dbapi_connection.cursor().execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise DBAPIError.instance("BEGIN IMMEDIATE", (), exc, sqlite3.Error) from exc

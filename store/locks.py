"""Locks that hold across processes: PostgreSQL is the only coordinator (DESIGN §10).

Several bot processes may share one PostgreSQL database. Who answers a session, who runs a summary job,
who polls Telegram and who runs the cleanup are decided by PostgreSQL *session-level advisory locks*, all
taken on one dedicated connection per process (:class:`AdvisoryLocks`: a SQLAlchemy connection of an engine of
its own, store/engine.py ``lock_engine``, never returned to a pool). Such a lock lives exactly as long
as the connection: when a process dies, even by ``kill -9``, the server sees its socket close and frees
every lock it held at once, so another process takes its work over without waiting out a lease. TCP
keepalives bound how long a vanished host (no FIN) holds its locks.

On SQLite the bot is one process (a second one refuses to start), so :class:`LocalLocks` grants every
lock that this process does not hold already.

Locks are not re-entrant: :meth:`try_acquire` fails for a name this process holds already, so two tasks of
one process exclude each other like two processes do. When the lock connection breaks (a server restart),
every lock is gone; :meth:`ping` notices, runs the ``on_lost`` callbacks and reconnects on next use.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from store.engine import lock_engine

logger = logging.getLogger(__name__)

def lock_key(name: str) -> int:
    """The 64-bit advisory lock key of a lock name (stable across processes and Python versions)."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "big", signed=True)


class Locks(Protocol):
    """Named exclusive locks; ``shared`` is True when other processes may hold them too."""

    shared: bool

    async def try_acquire(self, name: str) -> bool:
        """Take the lock if nobody (in any process) holds it; True when taken."""

    async def release(self, name: str) -> None:
        """Give the lock back (no-op when not held)."""

    def held(self, name: str) -> bool:
        """True while this process holds the lock."""

    async def ping(self) -> bool:
        """True while the locks held are still held (the coordinator is reachable)."""

    async def close(self) -> None:
        """Release everything."""


class LocalLocks:
    """One process (SQLite): a lock is free unless this process holds it."""

    shared = False

    def __init__(self) -> None:
        self._held: set[str] = set()

    async def try_acquire(self, name: str) -> bool:
        """Take the lock unless this process holds it already."""
        if name in self._held:
            return False
        self._held.add(name)
        return True

    async def release(self, name: str) -> None:
        """Give the lock back."""
        self._held.discard(name)

    def held(self, name: str) -> bool:
        """True while held."""
        return name in self._held

    async def ping(self) -> bool:
        """Always reachable."""
        return True

    async def close(self) -> None:
        """Release everything."""
        self._held.clear()


_TRY = text("SELECT pg_try_advisory_lock(:key)")
_UNLOCK = text("SELECT pg_advisory_unlock(:key)")
_PING = text("SELECT 1")


class AdvisoryLocks:
    """PostgreSQL session-level advisory locks on one dedicated autocommit connection.

    The connection is a SQLAlchemy ``AsyncConnection`` of an engine of its own without a pool
    (store/engine.py ``lock_engine``): a session-level lock belongs to the connection, so the connection must
    never go back to a pool (the next transaction to check it out would inherit the locks, and a pool's
    pre-ping or recycle would drop them unseen). Its failures are SQLAlchemy's, as the store's are."""

    shared = True

    def __init__(self, url: str, *, application_name: str = "longchat") -> None:
        self.url = url
        self.application_name = application_name
        self._engine: Any = None
        self._conn: Any = None  # sqlalchemy.ext.asyncio.AsyncConnection
        self._connecting = asyncio.Lock()
        self._held: set[str] = set()
        #: lock names are prefixed with the connection's schema, so deployments sharing a database in
        #: schemas of their own do not block each other (advisory locks are per database)
        self._namespace = ""
        self._closing: set[asyncio.Task] = set()
        #: called (synchronously) with the names that were held when the connection broke
        self.on_lost: list[Callable[[set[str]], None]] = []

    async def _connection(self) -> Any:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        async with self._connecting:
            if self._conn is None or self._conn.closed:
                if self._engine is None:
                    self._engine = lock_engine(self.url, self.application_name)
                conn = await self._engine.connect()
                try:
                    schema = (await conn.execute(text("SELECT current_schema()"))).scalar()
                except BaseException:
                    await _close_quietly(conn)
                    raise
                self._namespace = f"{schema or ''}/"
                self._conn = conn
            return self._conn

    async def _query(self, sql: Any, name: str | None = None) -> object:
        try:
            conn = await self._connection()
            params = {"key": lock_key(self._namespace + name)} if name is not None else {}
            return (await conn.execute(sql, params)).scalar()
        except SQLAlchemyError:
            self._broken()
            raise

    def _broken(self) -> None:
        """The connection failed: the server has freed whatever it held."""
        conn, self._conn = self._conn, None
        lost, self._held = self._held, set()
        if conn is not None and not conn.closed:
            task = asyncio.get_running_loop().create_task(_close_quietly(conn))
            self._closing.add(task)  # referenced until done: the loop keeps only weak references
            task.add_done_callback(self._closing.discard)
        if lost:
            logger.warning("lost the coordination connection: %d lock(s) released", len(lost))
            for callback in list(self.on_lost):
                try:
                    callback(lost)
                except Exception:  # noqa: BLE001 - one bad listener must not stop the others
                    logger.exception("a lock-lost callback failed")

    async def try_acquire(self, name: str) -> bool:
        """Take the lock if no process holds it; True when taken. Raises when the database is away."""
        if name in self._held:
            return False
        self._held.add(name)  # before the await: a second task of this process must not try too
        try:
            taken = bool(await self._query(_TRY, name))
        except BaseException:
            self._held.discard(name)
            raise
        if not taken:
            self._held.discard(name)
        return taken

    async def release(self, name: str) -> None:
        """Give the lock back; a broken connection has released it already."""
        if name not in self._held:
            return
        try:
            await self._query(_UNLOCK, name)
        except Exception:  # noqa: BLE001 - the connection broke: the server freed the lock
            logger.debug("release of %s: the connection is gone (the lock with it)", name)
        finally:
            self._held.discard(name)

    def held(self, name: str) -> bool:
        """True while this process holds the lock."""
        return name in self._held

    async def ping(self) -> bool:
        """Check the connection; False (and every lock dropped) when it broke."""
        try:
            await self._query(_PING)
            return True
        except Exception:  # noqa: BLE001 - any failure means the locks may be gone
            return False

    async def backend_pid(self) -> int:
        """The server process of the lock connection (``pg_stat_activity.pid``)."""
        return int(await self._query(text("SELECT pg_backend_pid()")))  # type: ignore[arg-type]

    async def close(self) -> None:
        """Close the connection, which releases every lock."""
        conn, self._conn = self._conn, None
        self._held.clear()
        if conn is not None:
            await _close_quietly(conn)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        engine, self._engine = self._engine, None
        if engine is not None:
            await engine.dispose()


async def _close_quietly(conn: Any) -> None:
    try:
        await conn.close()
    except Exception:  # noqa: BLE001 - closing a broken connection
        logger.debug("closing the lock connection failed", exc_info=True)


def locks_for(url: str) -> Locks:
    """Advisory locks on PostgreSQL, process-local locks otherwise."""
    if url.startswith(("postgresql", "postgres")):
        return AdvisoryLocks(url)
    return LocalLocks()

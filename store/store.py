"""The store: one database (SQLAlchemy 2 Core on SQLite in WAL mode, or PostgreSQL, through store/engine.py)
and a repository per aggregate over it.

=================  ==========================  ==============================================================
attribute          repository                  tables
=================  ==========================  ==============================================================
``sessions``       store/sessions.py           ``sessions``, ``messages`` (and /forget's and retention's deletes)
``journal``        store/journal.py            ``inbox``: journalled messages, kept replies, claims' view
``jobs``           store/jobs.py               ``summary_jobs``
``admins``         store/admins.py             ``admin_grants``
``groups``         store/group_messages.py     ``group_messages``
``reminders``      store/reminders.py          ``reminders`` (claimed and journalled in one transaction)
``usage``          store/usage.py              ``usage``, ``usage_daily``, ``usage_flights``
=================  ==========================  ==============================================================

A repository's operations are transaction functions ``fn(conn, ...)``, each run in one transaction by
:meth:`Store.run`. The other tables have their repositories in store/ too (history search, message vectors,
knowledge, media, shared values, exports, retention); nothing outside store/ imports SQLAlchemy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from store.admins import AdminGrants
from store.engine import Database, SQLiteDatabase, T, open_database
from store.group_messages import GroupMessages
from store.jobs import SummaryJobs
from store.journal import Journal
from store.migrations import upgrade_to_head
from store.reminders import Reminders
from store.sessions import Sessions
from store.usage import UsageStore

logger = logging.getLogger(__name__)


class Store:
    """One database, its repositories, and its transactions."""

    def __init__(self, url: str, *, create_tables: bool = True) -> None:
        self.url = url
        self.create_tables = create_tables
        self.database: Database | SQLiteDatabase | None = None
        self.sessions = Sessions(self)
        self.journal = Journal(self)
        self.jobs = SummaryJobs(self)
        self.admins = AdminGrants(self)
        self.groups = GroupMessages(self)
        self.reminders = Reminders(self)
        self.usage = UsageStore(self)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.url.split(":", 1)[0].split("+", 1)[0]

    @property
    def engine(self) -> Any:
        """The SQLAlchemy engine (sync on SQLite, async on PostgreSQL; see store/engine.py), or None when closed."""
        return self.database.engine if self.database is not None else None

    async def open(self) -> None:
        """Connect and bring the schema up to date."""
        self.database = open_database(self.url)
        if self.create_tables:
            await self.migrate()

    async def migrate(self) -> None:
        """Apply the Alembic migrations up to head (a no-op when the database is already there)."""
        started = time.perf_counter()
        before, head = await self.run(upgrade_to_head)
        logger.info("Database schema at %s (was %s), checked in %.0f ms", head, before or "empty",
                    (time.perf_counter() - started) * 1000)

    async def close(self) -> None:
        """Close the connections."""
        if self.database is not None:
            database, self.database = self.database, None
            await database.close()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` on a SQLAlchemy ``Connection`` in one transaction; return its result."""
        assert self.database is not None, "store is not open"
        return await self.database.run(fn, *args)

    async def run_long(self, fn: Callable[..., T], *args: Any) -> T:
        """:meth:`run` for work that takes a while (an export's pages, cleanup batches, searches): off the event
        loop on SQLite too."""
        assert self.database is not None, "store is not open"
        return await self.database.run_long(fn, *args)

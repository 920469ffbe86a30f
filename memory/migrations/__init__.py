"""Alembic migrations of the conversation store, applied at start by ``ConversationStore.migrate()``.

The Alembic configuration is built in code, so no ``alembic.ini`` is needed at run time (the one in
this folder is for developers' command-line use). The store runs the upgrade on its own async engine
through ``connection.run_sync(upgrade_to_head)``.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

logger = logging.getLogger(__name__)

SCRIPT_LOCATION = Path(__file__).resolve().parent
#: The revision whose schema equals what ``Base.metadata.create_all()`` made before migrations existed.
BASELINE = "0001"
#: Key of the PostgreSQL advisory lock that serialises concurrent starts.
_PG_LOCK_KEY = 0x6C6F6E67636861  # "longcha"


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config for this folder, optionally bound to an open connection."""
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPT_LOCATION))
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@lru_cache(maxsize=1)
def script_directory() -> ScriptDirectory:
    """The parsed revision scripts (cached: parsing them is the slow part of a no-op start)."""
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The newest revision."""
    head = script_directory().get_current_head()
    assert head is not None, "no migration scripts found"
    return head


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    return MigrationContext.configure(connection).get_current_revision()


def upgrade_to_head(connection: Connection) -> tuple[str | None, str]:
    """Bring the database on ``connection`` to head; return ``(revision before, head)``.

    Run inside a transaction. A database already at head costs two small queries.
    """
    if connection.dialect.name == "postgresql":
        # Two processes starting at once must not both create the tables.
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
    head = head_revision()
    context = MigrationContext.configure(connection)
    before = context.get_current_revision()
    if before == head:
        return before, head
    script = script_directory()
    if before is not None:
        try:
            script.get_revision(before)
        except CommandError as exc:
            raise RuntimeError(
                f"the database schema is at revision {before!r}, which this version does not know "
                f"(newest known: {head!r}); run a newer version of the bot") from exc
    elif inspect(connection).has_table("sessions"):
        logger.info("Adopting a database created before migrations: stamping revision %s", BASELINE)
        context.stamp(script, BASELINE)
        before = BASELINE
    command.upgrade(alembic_config(connection), "head")
    logger.info("Database schema upgraded from %s to %s", before or "empty", head)
    return before, head

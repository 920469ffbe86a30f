"""Alembic migrations of the conversation store, applied at start by ``Store.migrate()``.

The Alembic configuration is built in code, so no ``alembic.ini`` is needed at run time (the one in
this folder is for developers' command-line use). The store runs ``upgrade_to_head`` in one of its own
transactions (``Store.run``).

Importing Alembic is a noticeable part of start-up, so the usual start, on a database already at head,
does without it: the head revision is read from the scripts' ``revision``/``down_revision`` lines
(:func:`head_revision`, checked against Alembic's own answer by the tests) and compared with the one row
of ``alembic_version``. Alembic is imported only when there is something to upgrade, stamp or explain.
"""

from __future__ import annotations

import ast
import logging
import re
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

logger = logging.getLogger(__name__)

SCRIPT_LOCATION = Path(__file__).resolve().parent
#: The revision whose schema equals what ``Base.metadata.create_all()`` made before migrations existed.
BASELINE = "0001"
#: Alembic's default version table, which env.py does not rename.
VERSION_TABLE = "alembic_version"
#: Key of the PostgreSQL advisory lock that serialises concurrent starts.
_PG_LOCK_KEY = 0x6C6F6E67636861  # "longcha"
#: A module-level ``revision = ...`` or ``down_revision: str | None = ...`` line of a revision script.
_ASSIGNMENT = re.compile(r"^(revision|down_revision)\s*(?::[^=\n]*)?=\s*(.+?)\s*$", re.MULTILINE)


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config for this folder, optionally bound to an open connection."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPT_LOCATION))
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@lru_cache(maxsize=1)
def script_directory() -> ScriptDirectory:
    """The parsed revision scripts (cached: parsing them is the slow part of a no-op start)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def scan_head(versions: Path) -> str | None:
    """The single head of the revision scripts in ``versions``, read from their source without Alembic.

    None when it cannot be told this way (no scripts, an unreadable assignment, several heads); callers
    then ask Alembic.
    """
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in versions.glob("*.py"):
        found = dict(match.groups() for match in _ASSIGNMENT.finditer(script.read_text(encoding="utf-8")))
        if "revision" not in found or "down_revision" not in found:
            return None
        try:
            revision = ast.literal_eval(found["revision"])
            down = ast.literal_eval(found["down_revision"])
        except (ValueError, SyntaxError):
            return None
        if not isinstance(revision, str):
            return None
        revisions.add(revision)
        if isinstance(down, str):
            parents.add(down)
        elif isinstance(down, tuple | list):
            parents.update(down)
        elif down is not None:
            return None
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


@lru_cache(maxsize=1)
def head_revision() -> str:
    """The newest revision (read from the scripts' source; Alembic decides when that is ambiguous)."""
    head = scan_head(SCRIPT_LOCATION / "versions")
    if head is None:
        head = script_directory().get_current_head()
    assert head is not None, "no migration scripts found"
    return head


def _version_rows(connection: Connection) -> list[str]:
    """The revisions stamped in ``alembic_version``: none for a database never migrated."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return []
    return [row[0] for row in connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))]


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def upgrade_to_head(connection: Connection) -> tuple[str | None, str]:
    """Bring the database on ``connection`` to head; return ``(revision before, head)``.

    Run inside a transaction. A database already at head costs two small queries and no Alembic import.
    """
    if connection.dialect.name == "postgresql":
        # Two processes starting at once must not both create the tables.
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
    head = head_revision()
    if _version_rows(connection) == [head]:
        return head, head
    return _upgrade(connection, head)


def _upgrade(connection: Connection, head: str) -> tuple[str | None, str]:
    """The slow path of :func:`upgrade_to_head`, with Alembic: adopt, check and upgrade."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.util.exc import CommandError

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


def needs_upgrade(url: str) -> bool:
    """Whether the database at ``url`` is not at head yet (a fresh file, an older schema, one never stamped).

    Cheap and without Alembic: one short connection and the one row of ``alembic_version``. The start uses it to
    decide whether to migrate in a child process (:func:`migrate_in_child`), which keeps Alembic's import cost
    (about 10 MB of a long-running process's memory) out of the bot.
    """
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if not path or path == ":memory:":
            return False  # a database of this process alone: the store migrates it itself
        return _sqlite_versions(Path(path)) != [head_revision()]
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return _version_rows(connection) != [head_revision()]
    finally:
        engine.dispose()


def _sqlite_versions(path: Path) -> list[str]:
    """The revisions stamped in a SQLite file's ``alembic_version`` (none for a missing or empty file), read with
    the standard library: the start asks before SQLAlchemy is imported."""
    import sqlite3
    from contextlib import closing

    if not path.exists():
        return []
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return [row[0] for row in db.execute(f"SELECT version_num FROM {VERSION_TABLE}")]
    except sqlite3.OperationalError:  # no such table: never migrated
        return []


#: How long a start waits for the migrating child (a large database's upgrade may take a while).
MIGRATE_CHILD_SECONDS = 3600.0


def start_migration(url: str) -> subprocess.Popen[str]:
    """Start bringing the database at ``url`` to head in a child process (``python -m store.migrations``), so that
    Alembic is never imported by the bot itself; :func:`finish_migration` waits for it. The start goes on with its
    own imports meanwhile, so on two cores the child costs a start little time."""
    import os
    import subprocess
    import sys

    root = SCRIPT_LOCATION.parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(root), os.environ.get("PYTHONPATH"))))}
    child = subprocess.Popen([sys.executable, "-m", "store.migrations"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert child.stdin is not None
    stdin, child.stdin = child.stdin, None  # written and closed here: communicate() only reads
    stdin.write(url)  # not on the command line: the URL may hold a password
    stdin.close()
    return child


def finish_migration(child: subprocess.Popen[str]) -> tuple[str | None, str]:
    """Wait for :func:`start_migration`'s child; return ``(revision before, head)``. Raise ``RuntimeError`` with the
    child's own reason (its last line on stderr) when it failed."""
    stdout, stderr = child.communicate(timeout=MIGRATE_CHILD_SECONDS)
    if child.returncode != 0:
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        raise RuntimeError(lines[-1] if lines else f"the migration process exited with status {child.returncode}")
    import json

    result = json.loads(stdout.strip().splitlines()[-1])
    return result["before"], result["head"]


def migrate_in_child(url: str) -> tuple[str | None, str]:
    """Bring the database at ``url`` to head in a child process and wait for it (:func:`start_migration`)."""
    return finish_migration(start_migration(url))

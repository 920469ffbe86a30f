"""Alembic migrations: they build exactly the models' schema, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.util.exc import CommandError
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from store.history_search import is_search_table
from store.migrations import (
    BASELINE,
    SCRIPT_LOCATION,
    alembic_config,
    current_revision,
    head_revision,
    migrate_in_child,
    needs_upgrade,
    scan_head,
    script_directory,
    upgrade_to_head,
)
from store.migrations.env_filters import include_name
from store.models import Base
from store.store import Store

ROOT = Path(__file__).resolve().parents[2]
#: The tables of revision 0001, which ``create_all()`` made before migrations existed.
BASELINE_TABLES = {"sessions", "messages", "inbox", "summary_jobs", "admin_grants"}
MODEL_TABLES = BASELINE_TABLES | {"memory_chunks", "group_messages", "reminders", "usage", "usage_daily",
                                  "usage_flights", "message_vectors", "shared_values",
                                  "knowledge_documents", "knowledge_chunks", "knowledge_grants"}


def schema_of(conn: Connection) -> dict[str, Any]:
    """Tables, columns, indexes, unique constraints and foreign keys, as the database reports them."""
    insp = inspect(conn)
    out: dict[str, Any] = {}
    for table in insp.get_table_names():
        out[table] = {
            "columns": {c["name"]: c["nullable"] for c in insp.get_columns(table)},
            "pk": insp.get_pk_constraint(table)["constrained_columns"],
            "indexes": {i["name"]: (tuple(i["column_names"]), bool(i["unique"])) for i in insp.get_indexes(table)},
            "unique": {tuple(u["column_names"]) for u in insp.get_unique_constraints(table)},
            "fks": {(tuple(f["constrained_columns"]), f["referred_table"], (f.get("options") or {}).get("ondelete"))
                    for f in insp.get_foreign_keys(table)},
        }
    return out


def insert_grant(conn: Connection) -> None:
    """An admin grant, to show data survives."""
    conn.execute(text("INSERT INTO admin_grants (user_key, granted_at) VALUES ('telegram:1', CURRENT_TIMESTAMP)"))


async def open_store(db_url: str, *, create_tables: bool = True) -> Store:
    """An opened store."""
    store = Store(db_url, create_tables=create_tables)
    await store.open()
    return store


def model_schema() -> dict[str, Any]:
    """What the models declare, in the shape of :func:`schema_of`."""
    out: dict[str, Any] = {}
    for table in Base.metadata.sorted_tables:
        out[table.name] = {
            "columns": {c.name: c.nullable for c in table.columns},
            "pk": [c.name for c in table.primary_key.columns],
            "indexes": {i.name: (tuple(c.name for c in i.columns), bool(i.unique)) for i in table.indexes},
            "unique": {tuple(c.name for c in u.columns) for u in table.constraints
                       if type(u).__name__ == "UniqueConstraint"},
            "fks": {(tuple(fk.parent.name for fk in c.elements), c.elements[0].column.table.name, c.ondelete)
                    for c in table.foreign_key_constraints},
        }
    return out


class TestMigrations:
    """Alembic on every backend."""

    async def test_upgrade_from_empty_matches_models(self, db_url: str) -> None:
        store = await open_store(db_url)
        try:
            schema = await store.run(schema_of)
            revision = await store.run(current_revision)
        finally:
            await store.close()
        search = {name for name in schema if is_search_table(name)}
        assert "message_search" in search  # migration 0002, outside the models (memory/search.py)
        assert set(schema) - search == MODEL_TABLES | {"alembic_version"}
        del schema["alembic_version"]
        expected = model_schema()
        assert set(expected) == MODEL_TABLES
        for table in MODEL_TABLES:
            # SQLite reports unique constraints as constraints and PostgreSQL too; neither lists them as indexes
            got = schema[table]
            got["indexes"] = {k: v for k, v in got["indexes"].items() if not k.startswith("uq_")}
            assert got == expected[table], table
        assert revision == head_revision()

    async def test_models_and_migrations_do_not_differ(self, db_url: str) -> None:
        store = await open_store(db_url)
        try:
            diff = await store.run(lambda c: compare_metadata(
                MigrationContext.configure(c, opts={"compare_type": True, "compare_server_default": True,
                                                    "include_name": include_name}),
                Base.metadata))
        finally:
            await store.close()
        assert diff == []

    async def test_second_migrate_is_a_quick_no_op(self, db_url: str, caplog: pytest.LogCaptureFixture) -> None:
        store = await open_store(db_url)
        try:
            await store.run(insert_grant)
            caplog.set_level(logging.INFO)
            await store.migrate()
            assert await store.run(upgrade_to_head) == (head_revision(), head_revision())
            assert await store.admins.all() == {"telegram:1"}
        finally:
            await store.close()
        assert not [r for r in caplog.records if "Running upgrade" in r.getMessage()]  # at head: nothing ran
        # a fresh process start on an existing database: open() including the check
        store = await open_store(db_url)
        await store.close()

    async def test_adopts_a_database_created_before_migrations(self, db_url: str) -> None:
        store = await open_store(db_url, create_tables=False)
        try:
            # The baseline schema as 0001 made it (later revisions add columns to its tables), unversioned.
            await store.run(lambda c: command.upgrade(alembic_config(c), BASELINE))
            await store.run(lambda c: c.execute(text("DROP TABLE alembic_version")))
            await store.run(insert_grant)
            assert await store.run(current_revision) is None
            await store.migrate()
            assert await store.run(current_revision) == head_revision()
            assert await store.admins.all() == {"telegram:1"}
        finally:
            await store.close()
        assert BASELINE == "0001"

    async def test_unknown_revision_fails_clearly(self, db_url: str) -> None:
        store = await open_store(db_url)
        try:
            await store.run(lambda c: c.execute(text("UPDATE alembic_version SET version_num = 'zz99'")))
            with pytest.raises(RuntimeError, match="revision 'zz99', which this version does not know"):
                await store.migrate()
        finally:
            await store.close()

    async def test_downgrade_to_base_and_up_again(self, db_url: str) -> None:
        store = await open_store(db_url)
        try:
            await store.run(lambda c: command.downgrade(alembic_config(c), "base"))
            assert set(await store.run(lambda c: inspect(c).get_table_names())) == {"alembic_version"}
            await store.migrate()
            tables = set(await store.run(lambda c: inspect(c).get_table_names()))
            assert {t for t in tables if not is_search_table(t)} == MODEL_TABLES | {"alembic_version"}
            assert "message_search" in tables
        finally:
            await store.close()


def test_command_line_environment_upgrades_a_url(db_url: str) -> None:
    """``alembic upgrade head`` without the store (env.py opens the store's kind of engine itself)."""
    cfg = alembic_config()
    cfg.set_main_option("sqlalchemy.url", db_url.replace("%", "%%"))
    command.upgrade(cfg, "head")
    command.upgrade(cfg, "head")
    from sqlalchemy import create_engine

    engine = create_engine(db_url)  # psycopg 3 serves synchronous engines too
    try:
        with engine.connect() as conn:
            tables = {t for t in inspect(conn).get_table_names() if not is_search_table(t)}
            assert tables == MODEL_TABLES | {"alembic_version"}
            assert current_revision(conn) == head_revision()
    finally:
        engine.dispose()


def test_head_read_from_the_scripts_equals_alembics() -> None:
    assert scan_head(SCRIPT_LOCATION / "versions") == script_directory().get_current_head() == head_revision()


def write_revision(folder: Path, revision: str, down: str | tuple[str, ...] | None) -> None:
    """A revision script as the template writes it."""
    (folder / f"{revision}_x.py").write_text(
        f'"""x\n\nRevision ID: {revision}\n"""\n\nrevision: str = {revision!r}\n'
        f"down_revision: str | None = {down!r}\nbranch_labels = None\n", encoding="utf-8")


def test_scan_head_follows_the_chain_and_merges(tmp_path: Path) -> None:
    assert scan_head(tmp_path) is None  # no scripts
    write_revision(tmp_path, "0001", None)
    write_revision(tmp_path, "0002", "0001")
    assert scan_head(tmp_path) == "0002"
    write_revision(tmp_path, "0003a", "0002")
    write_revision(tmp_path, "0003b", "0002")
    assert scan_head(tmp_path) is None  # two heads: Alembic decides (and refuses)
    write_revision(tmp_path, "0004", ("0003a", "0003b"))
    assert scan_head(tmp_path) == "0004"
    (tmp_path / "0005_odd.py").write_text("revision = make_id()\ndown_revision = '0004'\n", encoding="utf-8")
    assert scan_head(tmp_path) is None  # not a literal: Alembic decides


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_start_at_head_does_not_import_alembic(db_url: str) -> None:
    async def create() -> None:
        store = await open_store(db_url)
        await store.close()

    asyncio.run(create())
    script = (
        "import asyncio, sys\n"
        "from store.store import Store\n"
        f"store = Store({db_url!r})\n"
        "asyncio.run(store.open())\n"
        "asyncio.run(store.close())\n"
        "assert 'alembic' not in sys.modules, 'alembic was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


async def test_fast_path_leaves_other_revisions_to_alembic(db_url: str) -> None:
    store = await open_store(db_url)
    try:
        assert await store.run(upgrade_to_head) == (head_revision(), head_revision())
        # two rows (as after a branch): the one-row fast path must not accept it as "at head"
        await store.run(lambda c: c.execute(text("INSERT INTO alembic_version (version_num) VALUES ('zz98')")))
        with pytest.raises(CommandError, match="more than one head"):
            await store.migrate()
    finally:
        await store.close()


def test_migrate_in_child_brings_a_database_to_head_and_says_why_it_cannot(db_url: str) -> None:
    """A start migrates in a child process (Alembic's import cost stays out of the bot), and its refusal reaches
    the parent as the child's reason."""
    assert needs_upgrade(db_url)
    assert migrate_in_child(db_url) == (None, head_revision())
    assert not needs_upgrade(db_url)
    assert migrate_in_child(db_url) == (head_revision(), head_revision())
    from sqlalchemy import create_engine

    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            assert {t for t in inspect(conn).get_table_names() if not is_search_table(t)} == \
                MODEL_TABLES | {"alembic_version"}
            conn.execute(text("UPDATE alembic_version SET version_num = 'zz99'"))
    finally:
        engine.dispose()
    assert needs_upgrade(db_url)
    with pytest.raises(RuntimeError, match=r"^the database schema is at revision 'zz99', which this version does "
                                           r"not know \(newest known: '\d+'\); run a newer version of the bot$"):
        migrate_in_child(db_url)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_start_that_migrates_does_not_import_alembic(db_url: str) -> None:
    script = (
        "import sys\n"
        "from bootstrap.preflight import migrate_database\n"
        "from config.settings import Config\n"
        f"cfg = Config(db_url={db_url!r})\n"
        "line = migrate_database(cfg)\n"
        "assert line.startswith('Database schema upgraded from empty to '), line\n"
        "assert migrate_database(cfg) is None\n"
        "assert 'alembic' not in sys.modules, 'alembic was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

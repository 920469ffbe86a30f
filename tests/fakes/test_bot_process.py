"""The harness's database preparation (tests/fakes/bot_process.py): a fresh SQLite bot starts on a copy of a
template at the schema's head, where the app would have put its database, and nothing that exists is replaced."""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path

from store.migrations import head_revision
from tests.fakes.bot_process import database_from_template, postgresql_url, sqlite_file


def config(folder: Path, **settings) -> Path:
    path = folder / "config.json"
    path.write_text(json.dumps(settings), encoding="utf-8")
    return path


def test_the_sqlite_file_is_where_the_app_puts_it(tmp_path: Path) -> None:
    assert sqlite_file(config(tmp_path)) == tmp_path / "data" / "chatbot.db"
    assert sqlite_file(config(tmp_path, data_dir="../elsewhere")) == tmp_path.parent / "elsewhere" / "chatbot.db"
    assert sqlite_file(config(tmp_path, db_url="sqlite:///db/bot.db")) == tmp_path / "db" / "bot.db"
    assert sqlite_file(config(tmp_path, db_url=f"sqlite:///{tmp_path}/x.db")) == tmp_path / "x.db"
    assert sqlite_file(config(tmp_path, db_url="sqlite:///:memory:")) is None
    assert sqlite_file(config(tmp_path, db_url="postgresql://bot@127.0.0.1/bot")) is None
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    assert sqlite_file(tmp_path / "config.json") is None  # the bot refuses that file itself


def test_a_fresh_database_is_a_private_copy_at_head_and_an_existing_one_is_kept(tmp_path: Path) -> None:
    path = config(tmp_path, data_dir="data")
    database_from_template(path)
    db = tmp_path / "data" / "chatbot.db"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(head_revision(),)]
        conn.execute("CREATE TABLE mine (x)")
    conn.close()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600 and stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    assert sorted(p.name for p in db.parent.iterdir()) == ["chatbot.db"]
    database_from_template(path)  # a restart: the database is the bot's own now
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM mine").fetchone() == (0,)
    conn.close()


def test_only_a_postgresql_url_is_migrated_by_the_harness(tmp_path: Path) -> None:
    assert postgresql_url(config(tmp_path, db_url="postgresql://bot@127.0.0.1/bot")) == \
        "postgresql+psycopg://bot@127.0.0.1/bot"
    assert postgresql_url(config(tmp_path, db_url="sqlite:///x.db")) == ""
    assert postgresql_url(config(tmp_path)) == ""

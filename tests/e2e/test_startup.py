"""Tests of bootstrap/preflight.py: logging, the setup checks and SQLite's one-process lock (the last with real
processes)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path

from bootstrap import preflight
from bootstrap.preflight import LOG_MAX_BYTES, lock_database, setup_logging, sqlite_file
from config.settings import Config
from tests.e2e.test_telegram import settings
from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI

ROOT = Path(__file__).resolve().parents[2]


def test_logging_rotates_masks_secrets_and_keeps_tracebacks_off_the_console(tmp_path, capsys) -> None:
    cfg = Config(data_dir=str(tmp_path), open_ai_api_key="sk-live-0123456789abcd", admin_password="pass-word-1")
    root = logging.getLogger()
    before = list(root.handlers)
    level = root.level
    try:
        redact = setup_logging(cfg, quiet_console=False)
        added = [h for h in root.handlers if h not in before]
        (rotating,) = [h for h in added if isinstance(h, RotatingFileHandler)]
        assert rotating.maxBytes == LOG_MAX_BYTES and rotating.backupCount > 0
        log = logging.getLogger("test.app")
        try:
            raise RuntimeError("bad key sk-live-0123456789abcd")
        except RuntimeError:
            log.exception("call failed with %s", "pass-word-1")
        redact.update(cfg.model_copy(update={"admin_password": "new-pass-2"}))
        log.warning("now new-pass-2")
    finally:
        for handler in root.handlers[:]:
            if handler not in before:
                root.removeHandler(handler)
                handler.close()
        root.setLevel(level)
    console = capsys.readouterr().err.splitlines()
    assert [line.split(" test.app: ", 1)[1] for line in console] == [
        "call failed with [secret] (details in bot.log)", "now [secret]"]
    text = (tmp_path / "bot.log").read_text(encoding="utf-8")
    assert "Traceback" in text and "bad key [secret]" in text
    assert "0123456789" not in text and "pass-word-1" not in text and "new-pass-2" not in text
    assert (tmp_path / "bot.log").stat().st_mode & 0o777 == 0o600


# --- SQLite serves one process ----------------------------------------------------------------------
def test_only_sqlite_files_are_locked(tmp_path):
    assert sqlite_file(Config(data_dir=str(tmp_path))) == tmp_path / "chatbot.db"
    assert sqlite_file(Config(data_dir=str(tmp_path), db_url="sqlite:///:memory:")) is None
    assert sqlite_file(Config(data_dir=str(tmp_path), db_url="postgresql://bot@127.0.0.1/bot")) is None
    assert lock_database(Config(data_dir=str(tmp_path), db_url="sqlite:///:memory:")) is None


def test_a_second_process_on_one_sqlite_file_refuses_to_start(tmp_path):
    with FakeTelegramAPI() as api, FakeOpenAIServer() as llm:
        # a first start on no database at all (no copy of the harness's migrated template): it migrates the file
        first = BotProcess(tmp_path / "one", fresh_database=True, **settings(api, llm, data_dir="../data"))
        second = BotProcess(tmp_path / "two", fresh_database=True, **settings(api, llm, data_dir="../data"))
        for bot in (first, second):
            bot.folder.mkdir()
        first.start()
        try:
            assert "INFO app: Database schema upgraded from empty to " in first.log()
            second.start(wait_for_log=None)
            assert second.proc.wait(30) == 2
            database = tmp_path / "data" / "chatbot.db"
            assert second.log() == (f"setup error: the SQLite database {database} is in use by another bot "
                                    "process; SQLite serves one process: stop the other one, or use PostgreSQL "
                                    "(db_url) to run several\n")
            second.stop()
            api.push_text(61, "still one bot", user_id=61)
            assert [m["text"] for m in api.wait_for_sent_sync(1, timeout=15)] == ["echo: still one bot"]
        finally:
            assert first.stop() == 0
        # the lock goes with its process: now the second one starts
        second.start()
        assert second.stop() == 0


def test_the_lock_is_held_for_the_process_and_not_taken_twice(tmp_path):
    cfg = Config(data_dir=str(tmp_path))
    lock = lock_database(cfg)
    try:
        assert lock == tmp_path / "chatbot.db.lock" and lock.stat().st_mode & 0o777 == 0o600
        assert lock_database(cfg) is None  # this process holds it already
        script = ("import sys; from config.settings import Config\n"
                  "from bootstrap.preflight import lock_database, SetupError\n"
                  f"try: lock_database(Config(data_dir={str(tmp_path)!r}))\n"
                  "except SetupError as exc: print(exc); sys.exit(2)\n")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert (done.returncode, done.stdout) == (2, f"the SQLite database {tmp_path / 'chatbot.db'} is in use by "
                                                     "another bot process; SQLite serves one process: stop the "
                                                     "other one, or use PostgreSQL (db_url) to run several\n")
    finally:
        os.close(preflight._held_locks.pop(tmp_path / "chatbot.db"))


def test_an_unreachable_postgresql_is_one_line_and_exit_2(tmp_path):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bot = BotProcess(tmp_path, db_url=f"postgresql://bot:s3cret-pw@127.0.0.1:{port}/bot", data_dir="data")
    bot.start(wait_for_log=None)
    assert bot.proc.wait(30) == 2
    assert bot.log() == (f"setup error: the database postgresql+psycopg://bot:***@127.0.0.1:{port}/bot cannot be "
                         f'reached (connection failed: connection to server at "127.0.0.1", port {port} failed: '
                         "Connection refused); check that PostgreSQL is running there and that db_url in config.json "
                         "is right\n")
    bot.stop()

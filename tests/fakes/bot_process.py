"""Run ``python app.py`` as a subprocess against the fake servers, and stop it like an operator would."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SECRET_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TELEGRAM_BOT_TOKEN")


def clean_env() -> dict[str, str]:
    """The environment without real secrets or endpoints, so nothing can reach a real service."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS}
    env["PYTHONUNBUFFERED"] = "1"
    return env


_template_lock = threading.Lock()
_template: Path | None = None


def migrated_template() -> Path:
    """An empty SQLite database brought to head by ``python -m store.migrations`` (the child process a first start
    runs), made once per test session in a temporary folder removed at exit.

    A fresh bot's database is a copy of it (:func:`database_from_template`, called by :meth:`BotProcess.start`),
    which saves each first start the migration (about 0.7 s at low load); tests about the first start itself ask for
    ``fresh_database=True``."""
    global _template
    with _template_lock:
        if _template is None:
            folder = Path(tempfile.mkdtemp(prefix="longchat-template-"))
            atexit.register(shutil.rmtree, folder, True)
            path = folder / "chatbot.db"
            done = subprocess.run([sys.executable, "-m", "store.migrations"], input=f"sqlite:///{path}", text=True,
                                  capture_output=True, cwd=ROOT, env=clean_env(), timeout=120)
            if done.returncode != 0:
                raise RuntimeError(f"could not make the template database: {done.stderr}")
            leftovers = [p.name for p in folder.iterdir() if p.name != path.name]
            assert not leftovers, f"the migration left {leftovers} beside the template (its WAL not checkpointed)"
            _template = path
        return _template


def sqlite_file(config_path: Path, settings: dict[str, Any] | None = None) -> Path | None:
    """The SQLite file a bot with this config file (or these settings, when given) opens, as config/settings.py
    resolves it; None for PostgreSQL, an in-memory database, or a config file that is not a JSON object (the bot
    refuses that itself)."""
    if settings is None:
        try:
            settings = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(settings, dict):
            return None
    base = config_path.parent
    url = settings.get("db_url") or ""
    if not url:
        data_dir = Path(settings.get("data_dir") or "data").expanduser()
        return (base / data_dir).resolve() / "chatbot.db"
    for prefix in ("sqlite+aiosqlite:///", "sqlite:///"):
        if url.startswith(prefix):
            rest = url[len(prefix):].split("?", 1)[0]
            return None if not rest or rest == ":memory:" else (base / rest).resolve()
    return None


def database_from_template(config_path: Path) -> None:
    """Before a start: when the SQLite database of the config file at ``config_path`` does not exist yet, put a
    copy of :func:`migrated_template` there (owner-only, as the app makes its data folder and database file), so
    the start finds its schema at head; a PostgreSQL database whose schema is behind is brought to head here
    (:func:`migrate`). A test about a first start itself does not call this."""
    path = sqlite_file(config_path)
    if path is None:
        postgresql = postgresql_url(config_path)
        if postgresql:
            migrate(postgresql)
        return
    if path.exists():
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.copy")
    shutil.copyfile(migrated_template(), partial)
    partial.chmod(0o600)
    partial.rename(path)


def postgresql_url(config_path: Path) -> str:
    """The PostgreSQL URL of the config file at ``config_path``, as the store gets it (psycopg driver); "" for
    another database or an unreadable file."""
    from config.settings import normalise_db_url

    try:
        settings = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    url = settings.get("db_url") if isinstance(settings, dict) else None
    return normalise_db_url(url, Path(".")) if isinstance(url, str) and url.startswith("postgres") else ""


def migrate(url: str) -> None:
    """Bring the PostgreSQL database at ``url`` to head in this process (store/migrations' own ``upgrade_to_head``,
    on a synchronous connection; Alembic is imported once per test session), unless it is there already. A database
    that cannot be reached is left alone: the bot started on it says so itself."""
    from sqlalchemy import create_engine
    from sqlalchemy.exc import OperationalError
    from sqlalchemy.pool import NullPool

    from store.migrations import upgrade_to_head

    engine = create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 5})
    try:
        try:
            connection = engine.connect()
        except OperationalError:
            return
        with connection, connection.begin():
            upgrade_to_head(connection)
    finally:
        engine.dispose()


#: every bot started and not stopped yet, so a test that fails before its stop does not leave its process running
#: into the rest of the suite (tests/e2e/conftest.py ends them after each test)
RUNNING: set[BotProcess] = set()


class BotProcess:
    """``app.py`` in a subprocess, with its output in files under the config folder.

    Several processes can share one config file (as a deployment of several processes does): point
    :attr:`config_path` at it and set :attr:`owns_config` false, so a start does not rewrite it.

    A bot whose SQLite database does not exist yet starts on a copy of :func:`migrated_template` (already at the
    schema's head), and one on a PostgreSQL schema behind head on that schema migrated here
    (:func:`database_from_template`); with ``fresh_database=True`` it starts on no file at all or the schema as it
    is, and migrates it itself, as a first start does.
    """

    def __init__(self, folder: Path, *, fresh_database: bool = False, **settings: Any) -> None:
        self.folder = folder
        self.config_path = folder / "config.json"
        self.settings = settings
        self.proc: subprocess.Popen | None = None
        #: environment variables added to the clean environment
        self.extra_env: dict[str, str] = {}
        #: write :attr:`settings` to :attr:`config_path` at every start
        self.owns_config = True
        #: start on an empty database (no copy of the migrated template)
        self.fresh_database = fresh_database
        self._runs = 0

    def write_config(self, **changes: Any) -> None:
        """Write config.json with the settings (and changes)."""
        self.settings.update(changes)
        self.config_path.write_text(json.dumps(self.settings, indent=2), encoding="utf-8")

    def command(self) -> list[str]:
        """The command line that runs the bot."""
        return [sys.executable, str(ROOT / "app.py"), "--config", str(self.config_path)]

    def start(self, wait_for_log: str | None = "INFO app: ready:", timeout: float = 30) -> BotProcess:
        """Start the bot and wait until its log shows it is receiving."""
        if self.owns_config:
            self.write_config()
        if not self.fresh_database:
            database_from_template(self.config_path)
        self._runs += 1
        self.stdout_path = self.folder / f"stdout.{self._runs}.txt"
        self.stderr_path = self.folder / f"stderr.{self._runs}.txt"
        self._out = open(self.stdout_path, "w")  # noqa: SIM115 - closed in stop()
        self._err = open(self.stderr_path, "w")  # noqa: SIM115
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err,
                                     cwd=self.folder, env={**clean_env(), **self.extra_env})
        RUNNING.add(self)
        if wait_for_log:
            self.wait_for_log(wait_for_log, timeout)
        return self

    @property
    def pid(self) -> int | None:
        """The running process's id, or None."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def log(self) -> str:
        """Everything the current run wrote to stderr."""
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def wait_for_log(self, needle: str, timeout: float = 30) -> None:
        """Wait until ``needle`` appears in the log."""
        deadline = time.monotonic() + timeout
        while needle not in self.log():
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"bot exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{needle!r} not in the log:\n{self.log()}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Send ``sig`` and wait for the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._out.close()
            self._err.close()
            RUNNING.discard(self)
        return code

    def kill(self) -> None:
        """``kill -9``: no chance to clean up."""
        self.stop(signal.SIGKILL)

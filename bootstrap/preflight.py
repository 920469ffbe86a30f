"""What happens before the app runs: logging, the setup checks, and SQLite's one-process lock.

Each check raises :class:`SetupError` with the one line ``app.py`` prints before it exits with
:data:`SETUP_ERROR` (DESIGN §1.1): an unwritable data folder, no channel that can run, a SQLite database
another bot process has open. Nothing here imports the heavy packages (SQLAlchemy is imported where a URL
must be parsed), so ``python app.py --help`` and the checks stay fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import time
from logging.handlers import RotatingFileHandler
from pathlib import Path
from urllib.parse import urlsplit

from config.redact import Redactor, database_label
from config.settings import (
    DEFAULT_API_BASE,
    Config,
    endpoint_refused_hint,
    endpoint_unresolved_hint,
)

logger = logging.getLogger("app")

#: The log file rotates at this size, keeping this many old files (bot.log.1, …).
LOG_MAX_BYTES = 5 * 1024 * 1024
LOG_BACKUPS = 3
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: Exit status of a configuration or setup mistake (one line on stderr says what to fix).
SETUP_ERROR = 2


class LogFormatter(logging.Formatter):
    """The log file's format, secrets masked."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__(LOG_FORMAT)
        self.redact = redact

    def format(self, record: logging.LogRecord) -> str:
        """Format, then mask secrets; once per record (a rotating file handler asks twice: to measure, then
        to write)."""
        done = record.__dict__.get("_lines")
        if done is None:
            done = record.__dict__["_lines"] = {}
        line = done.get(id(self))
        if line is None:
            line = done[id(self)] = self._format(record)
        return line

    def _format(self, record: logging.LogRecord) -> str:
        return self.redact(super().format(record))


class ConsoleFormatter(LogFormatter):
    """One line per record on the console: tracebacks stay in the log file."""

    def _format(self, record: logging.LogRecord) -> str:
        """The message line only; a traceback is pointed to, not printed."""
        if not (record.exc_info or record.exc_text or record.stack_info):
            return self.redact(logging.Formatter.format(self, record))
        line = self.redact(logging.Formatter.format(self, _without_traceback(record)))
        if record.exc_info or record.exc_text:
            line += " (details in bot.log)"
        return line


def _without_traceback(record: logging.LogRecord) -> logging.LogRecord:
    copy = logging.makeLogRecord(record.__dict__)
    copy.exc_info = None
    copy.exc_text = None
    copy.stack_info = None
    return copy


class ConsoleHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is now: on a terminal, the prompt's patched stream, so log lines
    land above the prompt instead of inside it.

    Records from ``level`` up are shown, and below it those logged with ``extra={"console": True}``: the news
    that ends a warning the console showed ("config.json is valid again") is said where the warning was."""

    def __init__(self, level: int = logging.INFO) -> None:
        super().__init__(sys.stderr)
        self.shown_from = level
        self.addFilter(lambda record: record.levelno >= self.shown_from or getattr(record, "console", False))

    @property
    def stream(self):  # noqa: D102 - StreamHandler's attribute, looked up at each write
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def setup_logging(cfg: Config, quiet_console: bool) -> Redactor:
    """INFO to ``<data_dir>/bot.log`` (rotating, owner-only); INFO to stderr too, unless an interactive
    terminal owns the screen (then warnings only). Secrets are masked everywhere; returns the masker so
    config changes can update it."""
    redact = Redactor()
    redact.update(cfg)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    console = ConsoleHandler(logging.WARNING if quiet_console else logging.INFO)
    console.setFormatter(ConsoleFormatter(redact))
    root.addHandler(console)
    log_path = cfg.data_path() / "bot.log"
    try:
        os.close(os.open(log_path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600))
        file_handler = RotatingFileHandler(log_path, maxBytes=LOG_MAX_BYTES, backupCount=LOG_BACKUPS,
                                           encoding="utf-8")
        file_handler.setFormatter(LogFormatter(redact))
        root.addHandler(file_handler)
    except OSError as exc:
        logger.warning("cannot write the log file %s: %s", log_path, exc.strerror or exc)
    for noisy in ("httpx", "httpx2", "httpcore", "telegram.ext.Updater", "apscheduler", "aiosqlite", "watchfiles"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Alembic's INFO lines are migration chatter; the store logs the schema version it reached.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    return redact


class SetupError(Exception):
    """A setup mistake the operator must fix; its message is the one line shown."""


def check_data_dir(cfg: Config) -> None:
    """Create the data folder (owner-only) and prove it can be written; raise :class:`SetupError` if not."""
    folder = cfg.data_path()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        if not cfg.db_url:
            # created owner-only before SQLite opens it; SQLite gives its -wal and -shm files the same mode
            os.close(os.open(folder / "chatbot.db", os.O_CREAT | os.O_WRONLY, 0o600))
    except OSError as exc:
        raise SetupError(f"the data folder {folder} cannot be written ({exc.strerror or exc}); "
                         "fix its permissions or set data_dir in config.json to a folder you can write") from None


#: Seconds the start-up check waits for PostgreSQL to answer (an address that drops packets never refuses).
DATABASE_CONNECT_SECONDS = 5


def check_database(cfg: Config) -> None:
    """For PostgreSQL (psycopg, the driver the store uses): connect once, and raise :class:`SetupError` naming the
    database (password hidden) and the driver's reason when it cannot be reached. SQLite needs no check: the data
    folder check covers its file."""
    url = cfg.database_url()
    if not url.startswith("postgresql+psycopg://"):
        return
    from store.engine import unreachable

    reason = unreachable(url, DATABASE_CONNECT_SECONDS)
    if reason is not None:
        raise SetupError(f"the database {database_label(cfg)} cannot be reached ({reason}); check that PostgreSQL "
                         "is running there and that db_url in config.json is right")


class Migration:
    """The database's schema brought to head in a child process (store/migrations), started by
    :func:`start_migration` before the bot's own imports and waited for (:meth:`wait`) before the store opens."""

    def __init__(self, cfg: Config) -> None:
        from store.migrations import needs_upgrade, start_migration

        self.label = database_label(cfg)
        self.started = time.perf_counter()
        self.child = start_migration(cfg.database_url()) if needs_upgrade(cfg.database_url()) else None

    def wait(self) -> str | None:
        """The line to log once the schema is at head (None when it already was); :class:`SetupError` with the
        migration's reason when it failed."""
        if self.child is None:
            return None
        from store.migrations import finish_migration

        try:
            before, head = finish_migration(self.child)
        except (RuntimeError, OSError) as exc:
            raise SetupError(f"the database {self.label} could not be brought up to date: {exc}") from None
        if before == head:  # another process, starting at the same time, migrated it first (behind the lock)
            return f"Database schema at {head}: another process brought it up to date"
        return (f"Database schema upgraded from {before or 'empty'} to {head} in a child process "
                f"({(time.perf_counter() - self.started) * 1000:.0f} ms)")


def migrate_database(cfg: Config) -> str | None:
    """Bring the database's schema to head in a child process when it is not there yet (a first start, a new
    version), so that the bot itself never imports Alembic (about 9 MB); return the line to log, or None when the
    schema was already at head. Raise :class:`SetupError` with the migration's reason when it fails."""
    return Migration(cfg).wait()


def channel_problems(cfg: Config) -> dict[str, str]:
    """The configured channels that cannot run, each with the reason (each channel's own preflight)."""
    from channels.registry import channel_problem

    problems = {}
    for name in cfg.channels:
        why = channel_problem(name, cfg)
        if why:
            problems[name] = why
    return problems


def check_channels(cfg: Config) -> None:
    """Raise :class:`ConfigError` when ``channel_type`` names an unknown channel, and :class:`SetupError` when no
    configured channel can run."""
    from channels.registry import check_channel_type

    check_channel_type(cfg)
    problems = channel_problems(cfg)
    if problems and len(problems) == len(cfg.channels):
        raise SetupError("no channel can run: " + "; ".join(f"{name}: {why}" for name, why in problems.items()))


def start_line(cfg: Config) -> str:
    """The log's first line: model, endpoint, channels, database (password hidden) and data folder."""
    return (f"starting: model {cfg.model} at {cfg.open_ai_api_base}; channels {', '.join(cfg.channels)}; "
            f"database {database_label(cfg)}; data folder {cfg.data_path()}")


async def probe_model_endpoint(cfg: Config, wait: float = 3.0) -> str | None:
    """For a custom endpoint: connect once; return the one-line hint when the connection is refused or the host
    name does not resolve."""
    if not cfg.model_configured or cfg.open_ai_api_base.rstrip("/") == DEFAULT_API_BASE:
        return None
    parsed = urlsplit(cfg.open_ai_api_base)
    if not parsed.hostname:
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        async with asyncio.timeout(wait):  # not wait_for: it can swallow a cancel, and leak the connection
            _reader, writer = await asyncio.open_connection(parsed.hostname, port)
    except ConnectionRefusedError:
        return endpoint_refused_hint(cfg.open_ai_api_base)
    except socket.gaierror:
        return endpoint_unresolved_hint(cfg.open_ai_api_base)
    except (OSError, TimeoutError) as exc:
        logger.debug("model endpoint probe: %s", exc)
        return None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


#: The SQLite database file each process holds open, with its lock (kept for the process's life).
_held_locks: dict[Path, int] = {}


def sqlite_file(cfg: Config) -> Path | None:
    """The SQLite database file of ``cfg``; None for PostgreSQL and for an in-memory database."""
    url = cfg.database_url()
    if not url.startswith("sqlite"):
        return None
    from store.engine import sqlite_database

    database = sqlite_database(url)
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    return Path(database)


def lock_database(cfg: Config) -> Path | None:
    """On SQLite: hold an exclusive lock on ``<database>.lock`` for the rest of the process's life, so a second
    bot process on the same file refuses to start (:class:`SetupError`); PostgreSQL is shared by design.

    The lock is the operating system's (``flock``): it goes with the process, also after ``kill -9``, so it
    is never left stale. Returns the lock file, or None when there is nothing to lock.
    """
    database = sqlite_file(cfg)
    if database is None or database in _held_locks:
        return None
    try:
        import fcntl
    except ImportError:  # Windows: no flock; one process is the operator's to ensure
        return None
    lock_path = database.with_name(database.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as exc:
        raise SetupError(f"cannot create the lock file {lock_path} ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise SetupError(f"the SQLite database {database} is in use by another bot process; SQLite serves one "
                         "process: stop the other one, or use PostgreSQL (db_url) to run several") from None
    _held_locks[database] = fd
    return lock_path

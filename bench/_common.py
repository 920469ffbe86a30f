"""Shared helpers of the benchmark scripts: fast seeding, CPU accounting, percentiles and a result table."""

from __future__ import annotations

import json
import logging
import os
import random
import sqlite3
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

logger = logging.getLogger(__name__)

#: Realistic text lengths (characters): users write short messages, assistants answer longer.
USER_LENGTHS = (12, 40, 80, 150, 300, 600)
ASSISTANT_LENGTHS = (60, 200, 400, 800, 1500, 3000)
_WORDS = ("the", "a", "meeting", "tomorrow", "could", "you", "please", "summarise", "report", "numbers",
          "because", "weather", "python", "database", "and", "then", "we", "should", "check", "again",
          "Berlin", "price", "ticket", "train", "recipe", "garden", "thanks", "idea", "plan", "why")


def sqlite_time(value: datetime) -> str:
    """A UTC datetime as SQLAlchemy stores it in SQLite (naive, microseconds always present)."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


def _text(rng: random.Random, length: int) -> str:
    words: list[str] = []
    size = 0
    while size < length:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:length]


def _pool(rng: random.Random, role: str, lengths: Sequence[int], n: int = 256) -> list[str]:
    """Pre-serialised message contents (the JSON column) of varied lengths."""
    out = []
    for i in range(n):
        base = lengths[i % len(lengths)]
        length = max(5, int(base * rng.uniform(0.6, 1.4)))
        out.append(json.dumps({"role": role, "content": _text(rng, length)}))
    return out


def seed_sessions(db_path: Path, *, sessions: int, per_session: int, last_active: datetime,
                  prefix: str = "telegram:", first_chat: int = 1_000_000, summarized: int | None = None,
                  seed: int = 7, checkpoint: bool = True) -> int:
    """Insert ``sessions`` sessions with ``per_session`` alternating user/assistant messages each.

    Goes straight through sqlite3 (executemany, one transaction). The schema must exist already (open a
    ``Store`` once). ``sessions.last_seq`` is the number of messages; when ``summarized`` is
    given, messages ``1..summarized`` count as summarised (``summarized_through_seq``) and the context
    starts right after them, with a persisted summary. ``checkpoint`` truncates the WAL afterwards (only
    when no one else has the database open). Returns the number of messages inserted.
    """
    rng = random.Random(seed)
    user_pool = _pool(rng, "user", USER_LENGTHS)
    assistant_pool = _pool(rng, "assistant", ASSISTANT_LENGTHS)
    summary = _text(rng, 700) if summarized else None
    through = summarized or 0
    active = sqlite_time(last_active)
    # One created_at per seq, shared by every session: the text columns are what costs, not these.
    start = last_active - timedelta(minutes=2 * per_session)
    stamps = [sqlite_time(start + timedelta(minutes=2 * seq)) for seq in range(1, per_session + 1)]
    conn = sqlite3.connect(db_path, timeout=60)
    try:
        conn.execute("PRAGMA synchronous=OFF")
        session_rows = []
        for i in range(sessions):
            chat = str(first_chat + i)
            session_rows.append((f"{prefix}{chat}", prefix.rstrip(":").split(":")[0], chat, chat, 0, f"User {chat}",
                                 stamps[0], active, through + 1, summary, through // 2 if summary else 0, through,
                                 per_session))

        def message_rows() -> Iterable[tuple]:
            n_user, n_assistant = len(user_pool), len(assistant_pool)
            for i in range(sessions):
                sid = session_rows[i][0]
                for seq in range(1, per_session + 1):
                    k = i * 31 + seq
                    if seq % 2:
                        yield sid, seq, "user", user_pool[k % n_user], stamps[seq - 1]
                    else:
                        yield sid, seq, "assistant", assistant_pool[k % n_assistant], stamps[seq - 1]

        with conn:
            conn.executemany(
                "INSERT INTO sessions (session_id, channel, chat_id, user_id, is_group, title, created_at, "
                "last_active, context_start_seq, summary, summary_turns, summarized_through_seq, last_seq) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", session_rows)
            conn.executemany("INSERT INTO messages (session_id, seq, role, content, created_at) VALUES (?,?,?,?,?)",
                             message_rows())
        if checkpoint:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return sessions * per_session


def table_counts(db_path: Path) -> tuple[int, int]:
    """(sessions, messages) rows in the database."""
    conn = sqlite3.connect(db_path)
    try:
        return (conn.execute("SELECT count(*) FROM sessions").fetchone()[0],
                conn.execute("SELECT count(*) FROM messages").fetchone()[0])
    finally:
        conn.close()


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid``, from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: Iterable[float]) -> float:
    """The median, or nan when empty."""
    values = list(values)
    return statistics.median(values) if values else float("nan")


def print_table(rows: Sequence[tuple[str, str, str]]) -> None:
    """A Markdown table (what, result, target), ready for the README."""
    print()
    print("| what | result | target |")
    print("|---|---|---|")
    for what, result, target in rows:
        print(f"| {what} | {result} | {target} |")
    print()


class Stopwatch:
    """``with Stopwatch() as sw: ...; sw.ms``."""

    def __enter__(self) -> Stopwatch:
        self.started = time.perf_counter()
        self.ms = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.ms = (time.perf_counter() - self.started) * 1000


class ThrowawayPostgres:
    """A PostgreSQL cluster of its own in a temporary folder, for one benchmark run (``with`` it).

    Run as the ``postgres`` user when we are root (initdb refuses root). :attr:`url` is its ``postgres``
    database; :attr:`available` is false (with :attr:`why`) where PostgreSQL is not installed.
    """

    def __init__(self) -> None:
        import glob
        import shutil

        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        self.bin = Path(bins[-1]).parent if bins else None
        self.as_pg: list[str] = []
        self.why = ""
        if self.bin is None:
            self.why = "initdb is not installed (Debian: apt-get install postgresql)"
        elif os.getuid() == 0:
            if shutil.which("runuser") is None:
                self.why = "running as root without runuser"
            self.as_pg = ["runuser", "-u", "postgres", "--"]
        self.folder: Path | None = None
        self.port = 0

    @property
    def available(self) -> bool:
        """Whether a cluster can be started here."""
        return not self.why

    @property
    def url(self) -> str:
        """The URL of its ``postgres`` database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        import subprocess

        subprocess.run([*self.as_pg, *args], check=True, capture_output=True, timeout=120)

    def _pg_ctl(self, action: str) -> None:
        assert self.bin is not None and self.folder is not None
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-l", str(self.folder / "server.log"),
                  "-w", "-m", "fast", "-o", f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder}", action)

    def __enter__(self) -> ThrowawayPostgres:
        import shutil
        import socket
        import tempfile

        if not self.available:
            raise RuntimeError(f"cannot start PostgreSQL: {self.why}")
        assert self.bin is not None
        # Not under a private temporary folder of root's: the server runs as postgres.
        self.folder = Path(tempfile.mkdtemp(prefix="bench-pg-"))
        if self.as_pg:
            shutil.chown(self.folder, "postgres")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._run(str(self.bin / "initdb"), "-D", str(self.folder / "data"), "--auth=trust", "-U", "postgres",
                  "-E", "UTF8", "--no-locale")
        self._pg_ctl("start")
        return self

    def __exit__(self, *exc: object) -> None:
        import shutil
        import subprocess

        try:
            self._pg_ctl("stop")
        except subprocess.SubprocessError:
            logger.warning("could not stop the throwaway PostgreSQL in %s", self.folder)
        shutil.rmtree(self.folder or "", ignore_errors=True)

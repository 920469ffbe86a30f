"""Restart cost with a big history: start-up time and the lazy restore of a session's first message.

(a) ``python app.py`` (telegram channel, fake Bot API and fake OpenAI server) from process start to the
    ``INFO app: ready:`` log line, with an empty database and with 10,000 sessions x 100 messages
    (1,000,000 messages, seeded directly with sqlite3). Start-up must not depend on history size.
(b) In process, on the same 1M-message database: ``SessionManager.get(info)`` for sessions never loaded
    (restart recovery, DESIGN section 4), median over many sessions.

Run: ``python bench/restart.py``. Targets: ready <= 2 s, independent of size; restore <= 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import median, percentile, print_table, seed_sessions, table_counts  # noqa: E402
from tests.fakes.bot_process import BotProcess  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402
from tests.fakes.telegram_api import FakeTelegramAPI  # noqa: E402

READY = "INFO app: ready:"
FIRST_CHAT = 1_000_000


def log_time(line: str) -> float:
    """Epoch seconds of a log line's ``%(asctime)s`` (local time, millisecond precision)."""
    stamp = line[:23]  # 2026-11-22 05:55:45,478
    return time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp[20:23]) / 1000


def settings(api: FakeTelegramAPI, llm: FakeOpenAIServer) -> dict:
    """The bot's config.json."""
    return {"channel_type": "telegram", "telegram_bot_token": api.token, "telegram_base_url": api.base_url,
            "telegram_rate_limit": False, "open_ai_api_base": llm.base_url, "open_ai_api_key": "test",
            "model_max_parallel": 1000,  # the fake stands in for a remote provider: no one-slot limit
            "data_dir": "data"}


def time_to_ready(folder: Path, api: FakeTelegramAPI, llm: FakeOpenAIServer) -> tuple[float, float, float]:
    """Start app.py and stop it gracefully. Returns seconds from spawn to the ready line, seconds from spawn
    to the schema check's log line (imports, config, database open), and the schema check's own ms."""
    bot = BotProcess(folder, **settings(api, llm))
    spawned = time.time()
    bot.start(wait_for_log=READY, timeout=60)
    try:
        log = bot.log()
    finally:
        code = bot.stop()
    if code != 0 or "Traceback" in log:
        raise RuntimeError(f"bot exited with {code}:\n{log[-3000:]}")
    ready_line = next(line for line in log.splitlines() if READY in line)
    schema = next((line for line in log.splitlines() if "checked in" in line), "")
    schema_ms = float(schema.rsplit("checked in ", 1)[1].split()[0]) if schema else float("nan")
    to_schema = log_time(schema) - spawned if schema else float("nan")
    return log_time(ready_line) - spawned, to_schema, schema_ms


async def create_schema(db: Path) -> None:
    """Create the schema the way the app does (Alembic migrations through Store.open)."""
    from store.store import Store

    store = Store(f"sqlite:///{db}")
    await store.open()
    await store.close()


async def restore_times(db: Path, sessions: int, samples: int, folder: Path) -> list[float]:
    """Milliseconds of ``SessionManager.get`` for ``samples`` random sessions never loaded before."""
    from agent.sessions import LoggingDropSink, SessionManager
    from config.settings import Config, ConfigHolder
    from core.records import SessionInfo
    from store.store import Store

    store = Store(f"sqlite:///{db}")
    await store.open()
    try:
        manager = SessionManager(store, ConfigHolder(Config(data_dir=str(folder))), LoggingDropSink())
        chats = random.Random(3).sample(range(FIRST_CHAT, FIRST_CHAT + sessions), samples + 10)
        timings = []
        for i, chat in enumerate(chats):
            info = SessionInfo(session_id=f"telegram:{chat}", channel="telegram", chat_id=str(chat),
                               user_id=str(chat), title=f"User {chat}")
            started = time.perf_counter()
            state = await manager.get(info)
            elapsed = (time.perf_counter() - started) * 1000
            assert state.messages, f"session {chat} restored nothing"
            if i >= 10:  # the first few pay for statement compilation
                timings.append(elapsed)
        return timings
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--per-session", type=int, default=100)
    parser.add_argument("--starts", type=int, default=5, help="starts per database")
    parser.add_argument("--samples", type=int, default=200, help="sessions restored in (b)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    n_messages = args.sessions * args.per_session
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        root = Path(tmp)
        empty, big = root / "empty", root / "big"
        for folder in (empty, big):
            (folder / "data").mkdir(parents=True)
            asyncio.run(create_schema(folder / "data" / "chatbot.db"))
        started = time.perf_counter()
        seed_sessions(big / "data" / "chatbot.db", sessions=args.sessions, per_session=args.per_session,
                      last_active=datetime.now(UTC) - timedelta(days=1), first_chat=FIRST_CHAT,
                      summarized=args.per_session * 6 // 10)
        seeded = time.perf_counter() - started
        db_size = (big / "data" / "chatbot.db").stat().st_size / 1e6
        counts = table_counts(big / "data" / "chatbot.db")
        print(f"seeded {counts[0]:,} sessions / {counts[1]:,} messages ({db_size:.0f} MB) in {seeded:.1f} s",
              flush=True)

        ready: dict[str, list[float]] = {"empty": [], "big": []}
        schema: dict[str, list[float]] = {"empty": [], "big": []}
        to_schema: dict[str, list[float]] = {"empty": [], "big": []}
        with FakeTelegramAPI(username="bench_bot") as api, FakeOpenAIServer() as llm:
            (root / "warmup").mkdir()
            time_to_ready(root / "warmup", api, llm)  # warm the OS file cache for Python and the libraries
            for rep in range(args.starts):
                for name, folder in (("empty", empty), ("big", big)):
                    seconds, before_schema, schema_ms = time_to_ready(folder, api, llm)
                    ready[name].append(seconds)
                    schema[name].append(schema_ms)
                    to_schema[name].append(before_schema)
                    print(f"start {rep + 1}, {name} database: ready in {seconds * 1000:.0f} ms (spawn to schema "
                          f"checked {before_schema * 1000:.0f} ms, of which the check {schema_ms:.0f} ms; then "
                          f"{(seconds - before_schema) * 1000:.0f} ms to ready)", flush=True)

        timings = asyncio.run(restore_times(big / "data" / "chatbot.db", args.sessions, args.samples, big))
        small_db = root / "small" / "chatbot.db"
        small_db.parent.mkdir()
        asyncio.run(create_schema(small_db))
        seed_sessions(small_db, sessions=300, per_session=args.per_session,
                      last_active=datetime.now(UTC) - timedelta(days=1), first_chat=FIRST_CHAT,
                      summarized=args.per_session * 6 // 10)
        small_timings = asyncio.run(restore_times(small_db, 300, min(args.samples, 250), small_db.parent))

    r_empty, r_big = median(ready["empty"]), median(ready["big"])
    p50, p95, worst = median(timings), percentile(timings, 95), max(timings)
    s50 = median(small_timings)
    print(f"\n(a) ready: empty DB median {r_empty * 1000:.0f} ms, {n_messages:,}-message DB median "
          f"{r_big * 1000:.0f} ms, ratio {r_big / r_empty:.2f} (schema check {median(schema['empty']):.0f} vs "
          f"{median(schema['big']):.0f} ms)")
    print(f"    phases (medians, empty / big): spawn to schema checked (imports, config, DB open) "
          f"{median(to_schema['empty']) * 1000:.0f} / {median(to_schema['big']) * 1000:.0f} ms; schema checked to "
          f"ready (tokenizer load, Telegram connect, resume, scheduler) "
          f"{(r_empty - median(to_schema['empty'])) * 1000:.0f} / {(r_big - median(to_schema['big'])) * 1000:.0f} ms")
    print(f"(b) restore (SessionManager.get, never-loaded session, {len(timings)} sessions): median {p50:.2f} ms, "
          f"p95 {p95:.2f} ms, max {worst:.2f} ms; on a 30,000-message DB median {s50:.2f} ms "
          f"(ratio {p50 / s50:.2f})")
    print_table([
        ("start to ready, empty DB", f"{r_empty:.2f} s", "<= 2 s"),
        (f"start to ready, {args.sessions:,} sessions / {n_messages:,} messages", f"{r_big:.2f} s "
         f"(x{r_big / r_empty:.2f} of empty)", "<= 2 s, independent of size"),
        ("first message after start: restore a session", f"median {p50:.1f} ms, p95 {p95:.1f} ms "
         f"(x{p50 / s50:.2f} of a 30k-message DB)", "<= 20 ms"),
    ])


if __name__ == "__main__":
    main()

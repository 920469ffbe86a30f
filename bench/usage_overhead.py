"""What usage accounting adds to a turn: recording one model call's row, and the caps' check around a turn
(today's sums of the speaker, the group and the bot, the turns in flight, the in-flight mark written and
removed), with ``--rows`` rows already recorded today.

Run: ``python bench/usage_overhead.py [--db URL] [--rows 10000]`` (SQLite in a temporary folder by default;
a PostgreSQL URL works too, in a fresh schema of its own).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.tokens import TokenCounters  # noqa: E402
from config.settings import Config, normalise_db_url  # noqa: E402
from core.llm import Usage  # noqa: E402
from core.records import SessionInfo  # noqa: E402
from store.store import Store  # noqa: E402
from usage.caps import UsageCaps  # noqa: E402
from usage.recorder import UsageRecorder  # noqa: E402

TRIES = 300


def _ms(samples: list[float]) -> str:
    samples = sorted(samples)
    return (f"median {statistics.median(samples) * 1000:.2f} ms, p95 "
            f"{samples[int(len(samples) * 0.95)] * 1000:.2f} ms")


async def run(url: str, rows: int, tmp: str) -> None:
    store = Store(url)
    await store.open()
    usage = store.usage
    now = datetime.now(UTC)
    batch = [{"session_id": f"telegram:group:-{i % 50}:{i % 400}", "user_id": f"telegram:{i % 400}",
              "model": "m", "purpose": "reply", "prompt_tokens": 500, "completion_tokens": 50, "cached_tokens": 0,
              "created_at": now - timedelta(seconds=i)} for i in range(rows)]
    for start in range(0, rows, 5000):
        await usage.add(batch[start:start + 5000])
    recorder = UsageRecorder(usage, TokenCounters())
    cfg = Config(data_dir=tmp, timezone="UTC", usage_cap_user_daily_tokens=10**9,
                 usage_cap_group_daily_tokens=10**9, usage_cap_daily_tokens=10**9)
    caps = UsageCaps(usage, lambda: cfg)
    info = SessionInfo("telegram:group:-7:7", "telegram", "-7", "7", is_group=True)
    record, check = [], []
    for _ in range(TRIES):
        started = time.perf_counter()
        await recorder.record("telegram:group:-7:7", "telegram:7", "m", "reply", Usage(500, 50, 100))
        record.append(time.perf_counter() - started)
        started = time.perf_counter()
        async with caps.turn("telegram:7", info, is_admin=False):
            pass
        check.append(time.perf_counter() - started)
    print(f"{store.dialect}, {rows:,} rows today: recording a call {_ms(record)}; the caps around a turn "
          f"{_ms(check)}")
    await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", default="")
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{tmp}/chatbot.db"
        if url.startswith("postgres"):
            import psycopg

            schema = f"bench_{uuid.uuid4().hex[:10]}"
            libpq = "postgresql://" + url.split("://", 1)[1]
            with psycopg.connect(libpq, autocommit=True) as conn:
                conn.execute(f'CREATE SCHEMA "{schema}"')
            try:
                normal = normalise_db_url(url, Path(tmp))
                asyncio.run(run(f"{normal}{'&' if '?' in normal else '?'}options=-csearch_path%3D{schema}",
                                args.rows, tmp))
            finally:
                with psycopg.connect(libpq, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        else:
            asyncio.run(run(url, args.rows, tmp))


if __name__ == "__main__":
    main()

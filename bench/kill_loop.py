"""Crash safety under load: ``kill -9`` the bot again and again while chats keep writing, then count.

``python app.py`` runs as a subprocess against the fake Bot API and the fake OpenAI server (which answers
``echo: <text>`` after ``--latency`` seconds). Chats send numbered messages (``c<chat> m<i>``) at a steady
rate; every ``--interval`` seconds (jittered) the bot is killed with SIGKILL and started again, ``--kills``
times. Like Telegram, the fake Bot API hands out again every update the bot had not confirmed. At the end
we wait for the replies to settle and count, per message: answered once, lost (never answered),
duplicated (answered more than once), and per chat out of order (a reply to an earlier message after a
reply to a later one).

Run: ``python bench/kill_loop.py`` (SQLite), ``python bench/kill_loop.py --db-url postgresql://…`` (an
empty PostgreSQL database; the script clears its tables first). Goal: 0 lost, 0 duplicated, 0 out of order.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import print_table  # noqa: E402
from tests.fakes.bot_process import BotProcess  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402
from tests.fakes.tally import message_text, tally  # noqa: E402
from tests.fakes.telegram_api import FakeTelegramAPI  # noqa: E402


def settings(api: FakeTelegramAPI, llm: FakeOpenAIServer, db_url: str) -> dict:
    """The bot's config.json."""
    return {"channel_type": "telegram", "telegram_bot_token": api.token, "telegram_base_url": api.base_url,
            "telegram_rate_limit": False, "open_ai_api_base": llm.base_url, "open_ai_api_key": "bench",
            "model_max_parallel": 1000,  # the fake stands in for a remote provider: no one-slot limit
            "data_dir": "data", "db_url": db_url, "stream_replies": False, "memory_embedding_model": ""}


def clear_postgres(url: str) -> None:
    """Drop every table of the benchmark database, so each run starts empty."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()


def run(db_url: str, *, chats: int, rate: float, kills: int, interval: float, latency: float,
        seed: int, keep: str = "") -> dict[str, int]:
    """One run; returns the counts. ``keep``: a folder for the bot's files and logs, kept afterwards."""
    rng = random.Random(seed)
    with FakeTelegramAPI(username="kill_bot") as api, FakeOpenAIServer() as llm, \
            tempfile.TemporaryDirectory() as scratch:
        tmp = keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        llm.latency = latency
        bot = BotProcess(Path(tmp), **settings(api, llm, db_url)).start(timeout=60)
        sent: list[tuple[int, int]] = []
        next_index = defaultdict(int)
        kill_at = time.monotonic() + interval * rng.uniform(0.5, 1.5)
        done_kills = 0
        step = 1.0 / rate
        while done_kills < kills:
            chat = rng.randrange(chats)
            i = next_index[chat]
            next_index[chat] += 1
            api.push_text(1000 + chat, message_text(chat, i), user_id=1000 + chat, first_name=f"U{chat}")
            sent.append((chat, i))
            time.sleep(step)
            if time.monotonic() >= kill_at:
                bot.stop(signal.SIGKILL)
                done_kills += 1
                bot.start(timeout=60)
                kill_at = time.monotonic() + interval * rng.uniform(0.5, 1.5)
        # settle: wait until every message has a reply or nothing changes for a while
        deadline = time.monotonic() + 60
        last, quiet_since = -1, time.monotonic()
        while time.monotonic() < deadline:
            n = len(api.sent)
            if n != last:
                last, quiet_since = n, time.monotonic()
            elif n >= len(sent) and time.monotonic() - quiet_since > 3:
                break
            elif time.monotonic() - quiet_since > 15:
                break
            time.sleep(0.2)
        assert bot.stop() == 0
        result = tally(sent, list(api.sent))
    if keep:
        print(result.describe(), file=sys.stderr)
    return {**result.counts(), "kills": kills}


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db-url", default="", help="PostgreSQL URL (default: SQLite in a temporary folder)")
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--rate", type=float, default=30.0, help="messages per second, all chats together")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--interval", type=float, default=3.0, help="mean seconds between kills")
    parser.add_argument("--latency", type=float, default=0.2, help="the fake model's answer time (s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", default="", help="keep the bot's folder (logs: stderr.<run>.txt) here, and "
                        "list what was lost or duplicated")
    args = parser.parse_args()
    if args.db_url:
        clear_postgres(args.db_url)
    counts = run(args.db_url, chats=args.chats, rate=args.rate, kills=args.kills, interval=args.interval,
                 latency=args.latency, seed=args.seed, keep=args.keep)
    db = "PostgreSQL" if args.db_url else "SQLite"
    print_table([(f"{db}, {k}", str(v), "0" if k in ("lost", "duplicated", "out of order") else "")
                 for k, v in counts.items()])


if __name__ == "__main__":
    main()

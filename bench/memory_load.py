"""Memory under load, through the real ``app.py``: searches while the indexer has a backlog, and the backlog
after a burst.

The bot runs as a subprocess (tests/fakes/bot_process.py) on the fake Telegram Bot API and the fake OpenAI
server, SQLite, with the default memory settings (``memory_embedding_model`` ``"local"``: the bundled model
embeds the stored turns in the background, memory/history_index.py).

**Searches during a backlog.** Before the bot starts, ``--backlog`` messages (LoCoMo dialog turns, each user
turn "<speaker>: <text>" followed by the bot's "ok, noted.") are stored in the sessions of three private
chats, none of them embedded. A message in a fourth chat wakes the indexer, which starts on that backlog;
once it has embedded its first messages (the model is loaded and it is at work), the three chats ask at
once, ``--rounds`` times: each question (one of LoCoMo's, of the chat's own conversation) makes the fake
model call ``history_search`` (even rounds) or ``memory_search`` (odd rounds) with the question, then answer.
A search's latency is measured as the model sees it: from the fake model's tool call to the request that
brings the tool's result (the tool's run plus the bot's bookkeeping of a few milliseconds). The sessions'
memory files hold only what the restore summaries wrote (a few dozen lines), so ``memory_search`` embeds
its question only once they are indexed: it is not a like-for-like comparison with ``history_search``,
which always embeds it. The backlog (user and assistant messages without a ``message_vectors`` row) is read
before and after the questions, to show it was there.

**A burst.** A fresh bot; ``--chats`` private chats send ``--rate`` user messages a second together for
``--burst`` seconds (each answered by the fake model with "ok, noted.", so twice as many messages are
stored), then nothing for ``--quiet`` seconds. The backlog is read every 5 s; reported: the largest, the
one at the end of the burst, how long it took to reach 0 after the burst, the bot's CPU (cores) during the
burst and the quiet, and the bot's CPU per stored message with the cores the pace needs at that cost (on a
shared machine, run a shorter ``--burst`` and read this line: whether the backlog drains within ``--quiet``
depends on the cores the machine gives the bot).

    python bench/memory_load.py PATH/locomo10.json[.gz] [--backlog 2000] [--rounds 20] [--rate 30]
                                [--burst 60] [--quiet 60] [--skip-search] [--skip-burst]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import median, percentile, process_cpu  # noqa: E402
from bench.memory_locomo import evidence_ids, load, turns  # noqa: E402
from core.records import SessionInfo  # noqa: E402
from store.history_search import message_text  # noqa: E402
from store.store import Store  # noqa: E402
from tests.fakes.bot_process import BotProcess  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402
from tests.fakes.telegram_api import FakeTelegramAPI  # noqa: E402

FIRST_CHAT = 200_000
BACKLOG_SQL = ("SELECT count(*) FROM messages m LEFT JOIN message_vectors v ON v.message_id = m.id "
               "WHERE v.message_id IS NULL AND m.role IN ('user', 'assistant')")


def backlog(db: Path) -> int:
    """User and assistant messages without a vector row (read-only, beside the running bot)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return int(conn.execute(BACKLOG_SQL).fetchone()[0])
    finally:
        conn.close()


class Model:
    """The fake model: a question gets a tool call (the tool named in the question's tag), the tool's result a
    short answer, anything else "ok, noted."; the time from each tool call to its result is recorded."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.called: dict[str, float] = {}
        self.latency: dict[str, list[float]] = {"history_search": [], "memory_search": []}

    def __call__(self, body: dict[str, Any]) -> dict[str, Any] | str:
        messages = body["messages"]
        users = [m for m in messages if m.get("role") == "user"]
        last = message_text(users[-1]) if users else ""
        if not last.startswith("Q|") or not body.get("tools"):
            return "ok, noted."
        _, tool, question = last.split("|", 2)
        with self.lock:
            if messages[-1].get("role") == "tool":
                started = self.called.pop(last, None)
                if started is not None:
                    self.latency[tool].append((time.perf_counter() - started) * 1000)
                return "answered."
            self.called[last] = time.perf_counter()
        arguments = json.dumps({"query": question})
        return {"content": None, "tool_calls": [{"id": f"call_{abs(hash(last))}", "type": "function",
                                                 "function": {"name": tool, "arguments": arguments}}]}


def settings(api: FakeTelegramAPI, llm: FakeOpenAIServer) -> dict[str, Any]:
    return {"channel_type": "telegram", "telegram_bot_token": api.token, "telegram_base_url": api.base_url,
            "telegram_rate_limit": False, "open_ai_api_base": llm.base_url, "open_ai_api_key": "bench",
            "model_max_parallel": 1000, "data_dir": "data", "stream_replies": False}


def seed(db: Path, data: list[dict[str, Any]], messages: int) -> list[str]:
    """Store ``messages`` messages (user turns and acknowledgements) in three chats' sessions; their ids."""
    sessions = [f"telegram:{FIRST_CHAT + i}" for i in range(3)]

    async def fill() -> None:
        store = Store(f"sqlite:///{db}")
        await store.open()
        try:
            per = messages // 6
            for sid, conversation in zip(sessions, data, strict=False):
                await store.sessions.ensure(SessionInfo(sid, "telegram", sid.split(":")[1], sid.split(":")[1]))
                items = turns(conversation)[:per]
                for start in range(0, len(items), 250):
                    await store.sessions.append(sid, [m for t in items[start:start + 250] for m in (
                        {"role": "user", "content": f"{t['speaker']}: {t.get('text', '')}"},
                        {"role": "assistant", "content": "ok, noted."})])
        finally:
            await store.close()

    asyncio.run(fill())
    return sessions


def wait_for(api: FakeTelegramAPI, chat: int, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(api.chat_texts(chat)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"chat {chat}: {len(api.chat_texts(chat))} of {count} replies")
        time.sleep(0.01)


def searches(args: argparse.Namespace, data: list[dict[str, Any]]) -> None:
    folder = Path(tempfile.mkdtemp(prefix="memory-load-"))
    db = folder / "data" / "chatbot.db"
    db.parent.mkdir(parents=True)
    seed(db, data, args.backlog)
    questions = [[qa["question"] for qa in conversation["qa"] if evidence_ids(qa)] for conversation in data[:3]]
    model = Model()
    with FakeTelegramAPI(username="bench_bot") as api, FakeOpenAIServer() as llm:
        llm.responder = model
        bot = BotProcess(folder, **settings(api, llm)).start(timeout=60)
        try:
            waker = FIRST_CHAT + 9
            api.push_text(waker, "hello", user_id=waker)
            wait_for(api, waker, 1, 60)
            # the indexer is at work (it has embedded its first batch: the model is loaded) before the questions
            seeded, deadline = backlog(db), time.monotonic() + 120
            while backlog(db) > seeded - 16 and time.monotonic() < deadline:
                time.sleep(0.05)
            before = backlog(db)
            assert bot.proc is not None
            cpu0, wall0 = process_cpu(bot.proc.pid), time.monotonic()
            chats = [FIRST_CHAT + i for i in range(3)]
            for r in range(args.rounds):
                tool = "history_search" if r % 2 == 0 else "memory_search"
                for i, chat in enumerate(chats):
                    api.push_text(chat, f"Q|{tool}|{questions[i][r % len(questions[i])]}", user_id=chat)
                for chat in chats:
                    wait_for(api, chat, r + 1, args.turn_timeout)
            after = backlog(db)
            cpu, wall = process_cpu(bot.proc.pid) - cpu0, time.monotonic() - wall0
        finally:
            bot.stop(timeout=300)  # a stop waits for the summaries and one batch of the indexer
    print(f"searches while the indexer has a backlog: {before} messages waiting before the questions, "
          f"{after} after; 3 chats asking at once, {args.rounds} rounds; the bot's CPU meanwhile "
          f"{cpu:.1f} s in {wall:.1f} s ({cpu / max(wall, 1e-9):.2f} cores); load average {os.getloadavg()[0]:.1f}")
    print("| tool | searches | median | p90 | p95 | max |")
    print("|---|---|---|---|---|---|")
    for tool, ms in model.latency.items():
        if ms:
            print(f"| {tool} | {len(ms)} | {median(ms):.0f} ms | {percentile(ms, 90):.0f} ms | "
                  f"{percentile(ms, 95):.0f} ms | {max(ms):.0f} ms |")


def burst(args: argparse.Namespace, data: list[dict[str, Any]]) -> None:
    folder = Path(tempfile.mkdtemp(prefix="memory-burst-"))
    db = folder / "data" / "chatbot.db"
    texts = [f"{t['speaker']}: {t.get('text', '')}" for conversation in data for t in turns(conversation)]
    with FakeTelegramAPI(username="bench_bot") as api, FakeOpenAIServer() as llm:
        llm.responder = Model()
        bot = BotProcess(folder, **settings(api, llm)).start(timeout=60)
        try:
            assert bot.proc is not None
            pid = bot.proc.pid
            samples: list[tuple[float, int]] = []
            cpu0 = process_cpu(pid)
            start = time.monotonic()
            sent = 0
            next_sample = start
            total = int(args.rate * args.burst)
            while sent < total:
                now = time.monotonic()
                due = min(total, int((now - start) * args.rate) + 1)
                while sent < due:
                    chat = FIRST_CHAT + 100 + sent % args.chats
                    api.push_text(chat, texts[sent % len(texts)], user_id=chat)
                    sent += 1
                if now >= next_sample:
                    samples.append((now - start, backlog(db)))
                    next_sample += 5.0
                time.sleep(0.005)
            burst_end = time.monotonic()
            cpu_burst = process_cpu(pid) - cpu0
            at_end = backlog(db)
            samples.append((burst_end - start, at_end))
            drained = None
            while time.monotonic() - burst_end < args.quiet:
                time.sleep(5.0)
                left = backlog(db)
                samples.append((time.monotonic() - start, left))
                if left == 0 and drained is None:
                    drained = time.monotonic() - burst_end
                    break
            quiet_seconds = time.monotonic() - burst_end
            cpu_quiet = process_cpu(pid) - cpu0 - cpu_burst
            final = backlog(db)
        finally:
            bot.stop(timeout=300)  # a stop waits for the summaries and one batch of the indexer
    print(f"burst: {sent} user messages at {args.rate}/s for {args.burst:.0f} s in {args.chats} chats "
          f"({2 * sent} stored with the answers), then up to {args.quiet:.0f} s quiet")
    after = f"0 after {drained:.0f} s quiet" if drained is not None else f"{final} after {args.quiet:.0f} s quiet"
    print(f"backlog: largest {max(n for _, n in samples)}, at the end of the burst {at_end}, {after}")
    print(f"bot CPU: {cpu_burst / (burst_end - start):.2f} cores during the burst, "
          f"{cpu_quiet / max(quiet_seconds, 1e-9):.2f} after it")
    print("backlog samples (s, messages): " + ", ".join(f"{t:.0f}:{n}" for t, n in samples))
    # Whether the pace fits the machine, from CPU, not wall time (a shared machine gives the bot a fraction of
    # its cores): the bot's CPU per stored message, turns and indexing together, times the pace.
    handled = 2 * sent - final
    if handled > 0:
        per_message = (cpu_burst + cpu_quiet) / handled
        print(f"bot CPU per stored message (turn and indexing, {handled} messages embedded or skipped): "
              f"{per_message * 1000:.1f} ms; {args.rate:.0f} user messages a second (twice as many stored) "
              f"need {per_message * 2 * args.rate:.2f} cores")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="LoCoMo's locomo10.json (or a .json.gz of the same shape)")
    parser.add_argument("--backlog", type=int, default=2000, help="messages waiting for the indexer")
    parser.add_argument("--rounds", type=int, default=20, help="questions each of the 3 chats asks")
    parser.add_argument("--rate", type=float, default=30.0, help="user messages a second in the burst")
    parser.add_argument("--chats", type=int, default=10, help="chats the burst is spread over")
    parser.add_argument("--burst", type=float, default=60.0, help="seconds of the burst (the issue: 300)")
    parser.add_argument("--quiet", type=float, default=60.0, help="seconds after it")
    parser.add_argument("--turn-timeout", type=float, default=600.0, help="seconds to wait for one answer")
    parser.add_argument("--skip-search", action="store_true")
    parser.add_argument("--skip-burst", action="store_true")
    args = parser.parse_args(argv)
    data = load(Path(args.path))
    if not args.skip_search:
        searches(args, data)
    if not args.skip_burst:
        burst(args, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Turn latency while the retention job deletes 1,000,000 expired messages.

In process, on an SQLite file: 10,000 sessions idle for 40 days with 100 messages each (seeded directly
with sqlite3), plus live sessions. Chats run continuously through the real Dispatcher, SessionManager
and Agent with an in-process fake model answering at once, on a recording channel. We measure every
turn's latency (``Dispatcher.handle`` to the reply) without the cleanup (before and after) and while
``CleanupJob.run_once()`` runs, and report the added latency. When the default message cap per batch
misses the target (or with ``--sweep``), smaller caps are tried on freshly seeded expired sessions.

Run: ``python bench/cleanup.py``. Target: the cleanup adds <= 100 ms to any turn.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import itertools
import logging
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.loop import Agent  # noqa: E402
from agent.sessions import LoggingDropSink, SessionManager  # noqa: E402
from agent.tools.base import ToolRegistry  # noqa: E402
from agent.tools.current_time import current_time  # noqa: E402
from bench._common import median, percentile, print_table, seed_sessions, table_counts  # noqa: E402
from config.settings import Config, ConfigHolder  # noqa: E402
from core.messages import IncomingMessage
from dispatcher.dispatcher import Dispatcher  # noqa: E402
from store.retention import CleanupJob  # noqa: E402
from store.store import Store  # noqa: E402
from tests.fakes.channel import RecordingChannel  # noqa: E402
from tests.fakes.fake_llm import FakeLLM  # noqa: E402

TARGET_MS = 100.0
EXPIRED_FIRST_CHAT = 1_000_000
LIVE_FIRST_CHAT = 5_000_000
_message_ids = itertools.count(1)


class AwaitingChannel(RecordingChannel):
    """A recording channel that can wait for the reply to one message."""

    def __init__(self) -> None:
        super().__init__()
        self.waiters: dict[str, asyncio.Future] = {}

    async def send(self, to: IncomingMessage, text: str) -> None:
        """Wake whoever waits for the reply. Replies are not kept: tens of thousands of them would be the
        bench's own load on the garbage collector, not the bot's."""
        fut = self.waiters.pop(to.message_id, None)
        if fut is not None and not fut.done():
            fut.set_result(text)


class TimedStore:
    """The retention part of the store, timing every batch; optionally pausing after each (--pause)."""

    def __init__(self, store: Store, pause: float = 0.0) -> None:
        self.store = store
        self.pause = pause
        self.batch_ms: list[float] = []

    async def delete_expired_sessions(self, cutoff: datetime, batch: int = 200, max_messages: int = 2000,
                                      ) -> tuple[int, int]:
        """Delete one batch, timed; then sleep ``pause`` x its duration (an experiment, off by default)."""
        started = time.perf_counter()
        try:
            return await self.store.sessions.delete_expired(cutoff, batch, max_messages)
        finally:
            elapsed = time.perf_counter() - started
            self.batch_ms.append(elapsed * 1000)
            if self.pause:
                await asyncio.sleep(elapsed * self.pause)

    async def prune_inbox(self, cutoff: datetime, batch: int = 1000) -> int:
        """Prune the inbox (not timed)."""
        return await self.store.journal.prune(cutoff, batch)


@dataclass
class Bot:
    """The real message path, in process."""

    store: Store
    holder: ConfigHolder
    dispatcher: Dispatcher
    channel: AwaitingChannel
    live_chats: list[int]
    latencies: list[float] = field(default_factory=list)

    async def turn(self, chat: int) -> float:
        """One message and its reply; returns ms."""
        msg = self.channel.message(f"message {next(_message_ids)} about the weather and trains", chat_id=str(chat),
                                   user_id=str(chat), user_name=f"User {chat}")
        fut = asyncio.get_running_loop().create_future()
        self.channel.waiters[msg.message_id] = fut
        started = time.perf_counter()
        await self.dispatcher.handle(msg)
        await asyncio.wait_for(fut, 30)
        return (time.perf_counter() - started) * 1000

    async def chat_loops(self, n: int, until: asyncio.Future | float) -> list[float]:
        """``n`` chats sending continuously until ``until`` (a future, or seconds). Returns turn latencies."""
        out: list[float] = []
        deadline = time.perf_counter() + until if isinstance(until, float) else None

        def done() -> bool:
            return until.done() if deadline is None else time.perf_counter() >= deadline  # type: ignore[union-attr]

        async def loop(i: int) -> None:
            chats = self.live_chats[i::n]
            for chat in itertools.cycle(chats):
                if done():
                    return
                out.append(await self.turn(chat))

        await asyncio.gather(*(loop(i) for i in range(n)))
        return out


async def open_bot(db: Path, folder: Path, live: int) -> Bot:
    """Store, session manager, agent, dispatcher and channel, as app.py builds them."""
    holder = ConfigHolder(Config(data_dir=str(folder)))
    store = Store(f"sqlite:///{db}")
    await store.open()
    sink = LoggingDropSink()
    sessions = SessionManager(store, holder, sink)
    agent = Agent(llm=FakeLLM(record=False), tools=ToolRegistry([current_time]), store=store, config=holder, sink=sink)
    await asyncio.to_thread(agent.counter, holder().model)
    gc.freeze()  # as app.py does once started: start-up objects stay out of the collector's full passes
    dispatcher = Dispatcher(config=holder, store=store, agent=agent, sessions=sessions)
    channel = AwaitingChannel()
    dispatcher.add_channel(channel)
    return Bot(store, holder, dispatcher, channel, list(range(LIVE_FIRST_CHAT, LIVE_FIRST_CHAT + live)))


@dataclass
class Phase:
    """Turn latencies of one phase, and the cleanup's figures when it ran."""

    name: str
    latencies: list[float]
    seconds: float
    batch: int = 0
    batch_ms: list[float] = field(default_factory=list)
    sessions: int = 0
    messages: int = 0

    def line(self) -> str:
        """A one-line summary."""
        lat = self.latencies
        text = (f"{self.name}: {len(lat)} turns in {self.seconds:.1f} s, latency median {median(lat):.1f} ms, "
                f"p99 {percentile(lat, 99):.1f} ms, max {max(lat):.1f} ms")
        if self.batch:
            text += (f"; deleted {self.sessions:,} sessions / {self.messages:,} messages, <= {self.batch} a batch, "
                     f"{len(self.batch_ms)} batches of median {median(self.batch_ms):.0f} ms, "
                     f"max {max(self.batch_ms):.0f} ms")
        return text


async def run_phase(bot: Bot, name: str, chats: int, seconds: float) -> Phase:
    """Chats only."""
    started = time.perf_counter()
    lat = await bot.chat_loops(chats, seconds)
    return Phase(name, lat, time.perf_counter() - started)


async def run_cleanup(bot: Bot, name: str, chats: int, batch: int, max_messages: int, limit: float | None = None,
                      pause: float = 0.0) -> Phase:
    """Chats while ``CleanupJob.run_once()`` runs (stopped after ``limit`` seconds, if given)."""
    timed = TimedStore(bot.store, pause)
    job = CleanupJob(timed, bot.holder, batch_size=batch, max_messages=max_messages)
    started = time.perf_counter()
    task = asyncio.ensure_future(job.run_once())
    stopper = None
    if limit is not None:
        stopper = asyncio.get_running_loop().call_later(limit, job.stop)
    lat = await bot.chat_loops(chats, task)
    stats = await task
    if stopper is not None:
        stopper.cancel()
    return Phase(name, lat, time.perf_counter() - started, max_messages, timed.batch_ms, stats.sessions,
                 stats.messages)


def added(base: list[float], during: Phase) -> tuple[float, float]:
    """(max added ms: worst turn during cleanup minus the baseline median, p99 during minus p99 baseline)."""
    return max(during.latencies) - median(base), percentile(during.latencies, 99) - percentile(base, 99)


async def bench(args: argparse.Namespace, root: Path) -> None:
    db = root / "chatbot.db"
    now = datetime.now(UTC)
    expired_at = now - timedelta(days=40)
    store = Store(f"sqlite:///{db}")
    await store.open()
    await store.close()
    started = time.perf_counter()
    seed_sessions(db, sessions=args.expired, per_session=args.per_session, last_active=expired_at,
                  first_chat=EXPIRED_FIRST_CHAT)
    seed_sessions(db, sessions=args.live, per_session=20, last_active=now - timedelta(hours=2),
                  first_chat=LIVE_FIRST_CHAT, seed=11)
    counts = table_counts(db)
    print(f"seeded {counts[0]:,} sessions / {counts[1]:,} messages ({db.stat().st_size / 1e6:.0f} MB) in "
          f"{time.perf_counter() - started:.1f} s", flush=True)

    bot = await open_bot(db, root, args.live)
    if args.pause:
        print(f"EXPERIMENT: pause {args.pause} x batch time", flush=True)
    try:
        await run_phase(bot, "warm-up", args.chats, 2.0)  # restores every live session once
        before = await run_phase(bot, "baseline before", args.chats, args.baseline)
        print(before.line(), flush=True)
        main = await run_cleanup(bot, "during cleanup", args.chats, args.batch, args.max_messages, pause=args.pause)
        print(main.line(), flush=True)
        after = await run_phase(bot, "baseline after", args.chats, args.baseline)
        print(after.line(), flush=True)
        base = before.latencies + after.latencies
        worst, p99_added = added(base, main)
        left = table_counts(db)
        print(f"left after cleanup: {left[0]:,} sessions / {left[1]:,} messages (the live ones)")
        print(f"\nbaseline median {median(base):.1f} ms, p99 {percentile(base, 99):.1f} ms, max {max(base):.1f} ms")
        print(f"during cleanup (<= {args.max_messages} messages a batch): median {median(main.latencies):.1f} ms, "
              f"p99 {percentile(main.latencies, 99):.1f} ms, max {max(main.latencies):.1f} ms")
        print(f"added: worst turn {worst:.1f} ms over the baseline median; p99 +{p99_added:.1f} ms "
              f"(target <= {TARGET_MS:.0f} ms)", flush=True)
        rows = [(f"turn latency while deleting {main.messages:,} expired messages (<= {args.max_messages} a batch, "
                 f"{main.seconds:.0f} s)", f"median {median(main.latencies):.1f} ms vs {median(base):.1f} ms, "
                 f"p99 {percentile(main.latencies, 99):.1f} vs {percentile(base, 99):.1f} ms, worst turn "
                 f"+{worst:.0f} ms", f"<= +{TARGET_MS:.0f} ms")]

        sweep = args.sweep or ([b for b in (500, 250, 100) if b < args.max_messages] if worst > TARGET_MS else [])
        for k, cap in enumerate(sweep):
            # Seed with the bot closed: an outside writer racing the bot's connections is not what we measure.
            await close_bot(bot)
            seeding = time.perf_counter()
            seed_sessions(db, sessions=args.sweep_sessions, per_session=args.per_session, last_active=expired_at,
                          first_chat=EXPIRED_FIRST_CHAT + 100_000 * (k + 1))
            print(f"seeded {args.sweep_sessions:,} more expired sessions in {time.perf_counter() - seeding:.1f} s",
                  flush=True)
            bot = await open_bot(db, root, args.live)
            await run_phase(bot, "warm-up", args.chats, 1.0)
            phase = await run_cleanup(bot, f"during cleanup, <= {cap} messages a batch", args.chats, args.batch, cap,
                                      limit=args.sweep_seconds, pause=args.pause)
            print(phase.line(), flush=True)
            w, p = added(base, phase)
            print(f"  added: worst turn +{w:.1f} ms, p99 +{p:.1f} ms", flush=True)
            rows.append((f"same, <= {cap} messages a batch ({phase.messages:,} messages in {phase.seconds:.0f} s)",
                         f"p99 {percentile(phase.latencies, 99):.1f} ms, worst turn +{w:.0f} ms, batch median "
                         f"{median(phase.batch_ms):.0f} ms", f"<= +{TARGET_MS:.0f} ms"))
        print_table(rows)
    finally:
        await close_bot(bot)


async def close_bot(bot: Bot) -> None:
    """Finish queued turns and close the database."""
    await bot.dispatcher.drain(5)
    await bot.store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--expired", type=int, default=10_000, help="expired sessions")
    parser.add_argument("--per-session", type=int, default=100)
    parser.add_argument("--live", type=int, default=40, help="live sessions the chats cycle through")
    parser.add_argument("--chats", type=int, default=2, help="chats sending at once")
    defaults = inspect.signature(CleanupJob).parameters
    parser.add_argument("--batch", type=int, default=defaults["batch_size"].default,
                        help="sessions a batch (default: the app's)")
    parser.add_argument("--max-messages", type=int, default=defaults["max_messages"].default,
                        help="messages a batch at most (default: the app's)")
    parser.add_argument("--baseline", type=float, default=4.0,
                        help="seconds of chats without cleanup, before and after")
    parser.add_argument("--sweep", type=int, nargs="*", help="message caps to try (default: smaller ones if needed)")
    parser.add_argument("--sweep-sessions", type=int, default=2_000, help="expired sessions seeded per sweep run")
    parser.add_argument("--sweep-seconds", type=float, default=8.0, help="longest sweep run")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="experiment: after each batch, sleep this many times the batch's duration")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-cleanup-") as tmp:
        asyncio.run(bench(args, Path(tmp)))


if __name__ == "__main__":
    main()

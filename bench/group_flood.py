"""A group flood against private chats: what storing group background costs, and whether others feel it.

The real dispatcher, agent loop and SQLite store, an in-process fake model answering at once. Rounds,
interleaved A/B: private-chat turns alone (A), and the same turns while a served group floods the bot
with untriggered messages (B: 200 a second by default, ``--rate 0`` for one per loop iteration). It
reports the median private turn in each, their ratio, and the loop time per background message
(intake decision, task, and insert with pruning to 500 rows).
Run: ``python bench/group_flood.py [--db URL] [--rate N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.loop import Agent  # noqa: E402
from agent.sessions import LoggingDropSink, SessionManager  # noqa: E402
from agent.tools.base import ToolRegistry  # noqa: E402
from config.settings import Config, ConfigHolder  # noqa: E402
from dispatcher.dispatcher import Dispatcher  # noqa: E402
from store.store import Store  # noqa: E402
from tests.fakes.channel import RecordingChannel  # noqa: E402
from tests.fakes.fake_llm import FakeLLM  # noqa: E402

ROUNDS = 6
TURNS = 50
FLOOD = 2000


async def private_turns(dispatcher: Dispatcher, channel: RecordingChannel, start: int) -> list[float]:
    timings = []
    for i in range(TURNS):
        started = time.perf_counter()
        await dispatcher.handle(channel.message(f"private message {i}", chat_id="1", user_id="1"))
        await channel.wait_for(start + i + 1)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


async def flood(dispatcher: Dispatcher, channel: RecordingChannel, n: int, stop: asyncio.Event,
                rate: float = 0.0) -> int:
    """Submit ``n`` untriggered group messages, at ``rate`` per second (0: one per loop iteration)."""
    sent = 0
    started = time.perf_counter()
    while sent < n and not stop.is_set():
        dispatcher.submit(channel.message(f"chatter {sent} about nothing in particular", chat_id="-9",
                                          user_id=str(sent % 7), user_name=f"U{sent % 7}", is_group=True,
                                          group_name="Flood"))
        sent += 1
        await asyncio.sleep(max(0.0, started + sent / rate - time.perf_counter()) if rate else 0)
    return sent


async def main(url: str | None, rate: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        holder = ConfigHolder(Config(data_dir=tmp))
        store = Store(url or f"sqlite:///{tmp}/chatbot.db")
        await store.open()
        sink = LoggingDropSink()
        sessions = SessionManager(store, holder, sink)
        agent = Agent(llm=FakeLLM(record=False), tools=ToolRegistry(), store=store, config=holder, sink=sink)
        dispatcher = Dispatcher(config=holder, store=store, agent=agent, sessions=sessions)
        channel = RecordingChannel()
        dispatcher.add_channel(channel)
        replies = 0
        alone: list[float] = []
        flooded: list[float] = []
        per_message: list[float] = []
        await private_turns(dispatcher, channel, replies)  # warm-up
        replies += TURNS
        for _ in range(ROUNDS):
            alone += await private_turns(dispatcher, channel, replies)
            replies += TURNS
            stop = asyncio.Event()
            flood_task = asyncio.create_task(flood(dispatcher, channel, 10**9, stop, rate))
            flooded += await private_turns(dispatcher, channel, replies)
            replies += TURNS
            stop.set()
            await flood_task
            await dispatcher.background.flush()
            # The flood's own cost: FLOOD messages submitted back to back, until every insert is done.
            started = time.perf_counter()
            await flood(dispatcher, channel, FLOOD, asyncio.Event())
            await dispatcher.background.flush()
            per_message.append((time.perf_counter() - started) * 1e6 / FLOOD)
        await dispatcher.drain(5)
        await store.close()
    a, b = statistics.median(alone), statistics.median(flooded)
    pace = f"{rate:.0f} messages/s" if rate else "one message per loop iteration"
    print(f"group flood ({store.dialect}, {pace}; {ROUNDS} interleaved rounds of {TURNS} private turns each):")
    print(f"  private turn median: alone {a:.2f} ms, during a flood {b:.2f} ms (ratio {b / a:.2f})")
    print(f"  per background message (decide, task, insert + prune to 500): median "
          f"{statistics.median(per_message):.0f} µs")


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", default=None, help="a SQLAlchemy URL (default: a SQLite file)")
    parser.add_argument("--rate", type=float, default=200.0, help="flood messages per second; 0: as fast as possible")
    args = parser.parse_args()
    asyncio.run(main(args.db, args.rate))

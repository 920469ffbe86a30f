"""Framework overhead per turn: everything except waiting for the model.

An in-process fake model that answers at once, a SQLite file in a temporary folder, and the real
dispatcher, session manager, agent loop and store. Each turn goes from ``Dispatcher.handle`` to the
reply being sent. Run: ``python bench/turn_overhead.py [--sqlite store|inline|worker|aiosqlite]``.
Target: median <= 2 ms. It also prints the
process CPU time per turn (all threads, including SQLite's).
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
from agent.tools.current_time import current_time  # noqa: E402
from bench.sqlite_stalls import OPTIONS, open_store  # noqa: E402
from config.settings import Config, ConfigHolder  # noqa: E402
from dispatcher.dispatcher import Dispatcher  # noqa: E402
from tests.fakes.channel import RecordingChannel  # noqa: E402
from tests.fakes.fake_llm import FakeLLM  # noqa: E402

TURNS = 300
WARMUP = 20


async def main(option: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        holder = ConfigHolder(Config(data_dir=tmp))
        store = await open_store(f"{tmp}/chatbot.db", option)
        sink = LoggingDropSink()
        sessions = SessionManager(store, holder, sink)
        agent = Agent(llm=FakeLLM(record=False), tools=ToolRegistry([current_time]), store=store, config=holder,
                      sink=sink)
        dispatcher = Dispatcher(config=holder, store=store, agent=agent, sessions=sessions)
        channel = RecordingChannel()
        dispatcher.add_channel(channel)
        timings = []
        cpu_start = 0.0
        for i in range(TURNS + WARMUP):
            if i == WARMUP:
                cpu_start = time.process_time()
            started = time.perf_counter()
            await dispatcher.handle(channel.message(f"message number {i} with a little text"))
            await channel.wait_for(i + 1)
            timings.append((time.perf_counter() - started) * 1000)
        cpu_per_turn = (time.process_time() - cpu_start) / TURNS * 1000
        await dispatcher.drain(5)
        await store.close()
    timings = timings[WARMUP:]
    median = statistics.median(timings)
    p95 = statistics.quantiles(timings, n=20)[18]
    print(f"turn overhead over {TURNS} turns (SQLite file, {option}, fake model answering at once):")
    print(f"  wall: median {median:.2f} ms, p95 {p95:.2f} ms (target <= 2 ms median)")
    print(f"  CPU (all threads): {cpu_per_turn:.2f} ms per turn")


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser()
    parser.add_argument("--sqlite", choices=["store", *OPTIONS], default="store",
                        help="how SQLite transactions run (see bench/sqlite_stalls.py)")
    asyncio.run(main(parser.parse_args().sqlite))

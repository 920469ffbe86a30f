"""Benchmark: a turn that triggers a trim replies as fast as one that does not (the summary runs in the background).

Run: ``python bench/trim_latency.py``. The chat model and the summary model are in-process fakes with
200 ms latency each; the store is SQLite in a temporary folder, the daily memory real. With
``agent_max_context_turns = 4``, every other turn drops two turns and submits a summary job. Target: the
median reply latency of trimming turns is within 10 % of that of the other turns.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.loop import Agent  # noqa: E402
from agent.sessions import LiveSessions, SessionManager  # noqa: E402
from agent.tools.base import ToolRegistry  # noqa: E402
from config.settings import Config, ConfigHolder  # noqa: E402
from core.records import SessionInfo  # noqa: E402
from memory.daily import DailyMemory  # noqa: E402
from store.store import Store  # noqa: E402
from summaries.summarizer import Summarizer  # noqa: E402
from tests.fakes.fake_llm import FakeLLM  # noqa: E402

LATENCY = 0.2
SAMPLES = 15
WARMUP_TURNS = 4
SESSION = SessionInfo(session_id="terminal:bench", channel="terminal", chat_id="bench")


class CountingSummarizer(Summarizer):
    """Counts submitted jobs, so each turn can be classified as trimming or not."""

    submitted = 0

    async def submit(self, session_id: str, reason: str, from_seq: int, through_seq: int) -> None:
        """Count, then submit."""
        self.submitted += 1
        await super().submit(session_id, reason, from_seq, through_seq)


async def run(folder: Path) -> tuple[list[float], list[float], int]:
    """Run turns until both kinds have SAMPLES measurements; return (trim, plain) latencies in ms, jobs."""
    config = ConfigHolder(Config(data_dir=str(folder), timezone="UTC", agent_max_context_turns=4))
    store = Store(config().database_url())
    await store.open()
    live = LiveSessions(store)
    summarizer = CountingSummarizer(store=store, llm=FakeLLM(latency=LATENCY), config=config, sessions=live,
                                    daily=DailyMemory(folder / "memory", config().zone()))
    sessions = SessionManager(store, config, summarizer, live=live)
    agent = Agent(llm=FakeLLM(latency=LATENCY), tools=ToolRegistry(), store=store, config=config, sink=summarizer)
    trim: list[float] = []
    plain: list[float] = []
    try:
        state = await sessions.get(SESSION)
        n = 0
        while len(trim) < SAMPLES or len(plain) < SAMPLES:
            before = summarizer.submitted
            started = time.perf_counter()
            async with state.lock:
                await state.add_user({"role": "user", "content": f"message {n}: let us keep talking about the plan"})
                await agent.run_turn(state)
            elapsed = (time.perf_counter() - started) * 1000
            if n >= WARMUP_TURNS:
                (trim if summarizer.submitted > before else plain).append(elapsed)
            n += 1
        await summarizer.drain(10)
        jobs = summarizer.submitted
    finally:
        await store.close()
    return trim[:SAMPLES], plain[:SAMPLES], jobs


def main() -> None:
    """Print both medians and their ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        trim, plain, jobs = asyncio.run(run(Path(tmp)))
    t, p = statistics.median(trim), statistics.median(plain)
    print(f"model latency {LATENCY * 1000:.0f} ms, {SAMPLES} turns each, {jobs} summary jobs")
    print(f"median reply latency, turn that trims:    {t:7.1f} ms")
    print(f"median reply latency, turn without trim:  {p:7.1f} ms")
    print(f"ratio trim/no-trim: {t / p:.3f} ({'within' if abs(t / p - 1) <= 0.10 else 'OUTSIDE'} 10 %)")


if __name__ == "__main__":
    main()

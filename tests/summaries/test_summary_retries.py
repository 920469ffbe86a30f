"""A summary request is retried by one layer only: the summariser, with the client trying once each time.

The real ``openai`` SDK (agent/llm.py) talks to the fake OpenAI server, so every model call is an HTTP
request the server counts.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import time_machine

from agent.llm import OpenAILLM
from agent.sessions import LiveSessions
from core.retry import SUMMARY_CALL
from summaries.summarizer import Summarizer
from tests.fakes.openai_server import FakeOpenAIServer
from tests.summaries.test_summarizer import NOON, A, World, day_file


@pytest.fixture
def server():
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
async def world(tmp_path: Path, server):
    """The summariser with its default retry policy over the default model client."""
    llm = OpenAILLM(api_key="k", base_url=server.base_url, model="m")
    w = await World(tmp_path, llm).open()
    w.summarizer = Summarizer(store=w.store, llm=llm, config=w.config, sessions=LiveSessions(w.store),
                              daily=w.daily)
    assert w.summarizer.retry == SUMMARY_CALL
    yield w
    await w.close()
    await llm.close()


async def test_a_failing_summary_part_makes_three_model_calls_not_nine(world, server):
    await world.seed(A, "What is the plan?", "We ship on Friday.")
    for _ in range(9):
        server.enqueue_error(503, "overloaded")
    with time_machine.travel(NOON, tick=True):
        summary = await world.summarizer.summarize_now(A.session_id, "trim", 1, 2)
    assert summary == "- (fallback) What is the plan? → We ship on Friday."
    assert len(server.requests) == 3  # before: the summariser's 3 tries x the client's 3
    assert server.pending == 6
    assert await world.job_rows() == [("trim", "done", 3)]  # each model call is journalled as a try
    assert day_file(world.tmp_path, A).read_text(encoding="utf-8").endswith(
        "- (fallback) What is the plan? → We ship on Friday.\n")


async def test_the_summariser_honours_retry_after(world, server):
    await world.seed(A, "What is the plan?", "We ship on Friday.")
    server.enqueue_error(429, "slow down", code="rate_limit_exceeded", headers={"Retry-After": "0.3"})
    server.enqueue_text("- Ship on Friday")
    started = time.monotonic()
    assert await world.summarizer.summarize_now(A.session_id, "trim", 1, 2) == "- Ship on Friday"
    assert time.monotonic() - started >= 0.3
    assert len(server.requests) == 2
    assert await world.job_rows() == [("trim", "done", 2)]


async def test_a_used_up_quota_is_not_retried(world, server):
    await world.seed(A, "What is the plan?", "We ship on Friday.")
    server.enqueue_error(429, "You exceeded your current quota", code="insufficient_quota")
    server.enqueue_text("- never asked")
    summary = await world.summarizer.summarize_now(A.session_id, "trim", 1, 2)
    assert summary == "- (fallback) What is the plan? → We ship on Friday."
    assert len(server.requests) == 1
    assert await world.job_rows() == [("trim", "done", 1)]


async def test_a_reply_still_gets_the_clients_three_tries(server):
    llm = OpenAILLM(api_key="k", base_url=server.base_url, model="m", retry_base_delay=0.01)
    for _ in range(2):
        server.enqueue_error(503, "overloaded")
    server.enqueue_text("answer")
    try:
        assert (await llm.complete([{"role": "user", "content": "q"}])).content == "answer"
    finally:
        await llm.close()
    assert len(server.requests) == 3

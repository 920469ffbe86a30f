"""usage/recorder.py with the real client (agent/llm.py) on the fake OpenAI server: one row per answered call,
with its scope and the server's figures, or the tokenizer's count when the server reports none."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from agent.llm import OpenAILLM
from agent.tokens import TokenCounters
from core.errors import OtherLLMError
from core.llm import Usage
from core.usage import usage_scope
from store.models import UsageRow
from store.store import Store
from store.usage import UsageStore
from tests.fakes.openai_server import FakeOpenAIServer
from usage.recorder import UsageRecorder

MODEL = "chat-model"
ASK = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture
def server() -> FakeOpenAIServer:
    with FakeOpenAIServer(model=MODEL) as fake:
        yield fake


@pytest.fixture
async def recorder(store: Store) -> UsageRecorder:
    return UsageRecorder(UsageStore(store), TokenCounters())


@pytest.fixture
async def llm(server: FakeOpenAIServer, recorder: UsageRecorder) -> AsyncIterator[OpenAILLM]:
    client = OpenAILLM(api_key="test", base_url=server.base_url, model=MODEL, retry_base_delay=0.01, usage=recorder)
    yield client
    await client.close()


async def rows(store: Store) -> list[tuple]:
    def read(conn):
        c = UsageRow.__table__.c
        return [tuple(r) for r in conn.execute(select(c.session_id, c.user_id, c.model, c.purpose, c.prompt_tokens,
                                                      c.completion_tokens, c.cached_tokens).order_by(c.id))]
    return await store.run(read)


async def test_an_answer_is_one_row_with_its_scope_and_the_servers_figures(llm, server, store):
    server.enqueue_text("Paris.", usage={"prompt_tokens": 120, "completion_tokens": 3,
                                         "prompt_tokens_details": {"cached_tokens": 96}})
    with usage_scope("telegram:5", "telegram:7", "reply"):
        assert (await llm.complete(ASK)).content == "Paris."
    assert await rows(store) == [("telegram:5", "telegram:7", MODEL, "reply", 120, 3, 96)]


async def test_deepseek_reports_its_cache_hits_in_its_own_field(llm, server, store):
    server.enqueue_text("Paris.", usage={"prompt_tokens": 50, "completion_tokens": 2, "prompt_cache_hit_tokens": 32,
                                         "prompt_cache_miss_tokens": 18})
    with usage_scope("telegram:5", "", "flush"):
        await llm.complete(ASK)
    assert await rows(store) == [("telegram:5", "", MODEL, "flush", 50, 2, 32)]


async def test_a_call_outside_any_scope_is_still_on_the_bill(llm, server, store):
    server.enqueue_text("Paris.", usage={"prompt_tokens": 10, "completion_tokens": 2})
    await llm.complete(ASK)
    assert await rows(store) == [("", "", MODEL, "other", 10, 2, 0)]


async def test_a_streamed_answer_asks_for_usage_and_records_the_servers_figures(llm, server, store):
    server.enqueue_text("Paris is the capital.", usage={"prompt_tokens": 77, "completion_tokens": 6})
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    with usage_scope("telegram:5", "telegram:7", "reply"):
        response = await llm.stream(ASK, on_text=on_text)
    assert "".join(pieces) == response.content == "Paris is the capital."
    assert server.requests[-1]["stream_options"] == {"include_usage": True}
    assert await rows(store) == [("telegram:5", "telegram:7", MODEL, "reply", 77, 6, 0)]


async def test_a_stream_without_usage_is_counted_with_the_tokenizer(llm, server, store, recorder):
    server.report_usage = False
    server.enqueue_text("Paris is the capital.")
    with usage_scope("telegram:5", "telegram:7", "reply"):
        await llm.stream(ASK)
    counted = recorder.estimate(MODEL, server.requests[-1]["messages"], None, "Paris is the capital.")
    assert counted.prompt_tokens > 0 and counted.completion_tokens == 5
    assert await rows(store) == [("telegram:5", "telegram:7", MODEL, "reply", counted.prompt_tokens, 5, 0)]


async def test_an_answer_without_usage_is_counted_with_the_tokenizer_tools_included(llm, server, store, recorder):
    server.report_usage = False
    server.enqueue_tool_calls([("current_time", "{}")])
    tools = [{"type": "function", "function": {"name": "current_time", "parameters": {"type": "object"}}}]
    await llm.complete(ASK, tools=tools)
    with_tools = recorder.estimate(MODEL, ASK, tools, "current_time{}")
    assert with_tools.prompt_tokens > recorder.estimate(MODEL, ASK, None, "").prompt_tokens
    assert (await rows(store))[0][4:6] == (with_tools.prompt_tokens, with_tools.completion_tokens)


@pytest.mark.parametrize("status", [400, 422])
async def test_an_endpoint_refusing_stream_options_is_answered_and_remembered(llm, server, store, recorder, status):
    server.refuse_stream_options = status
    server.enqueue_text("Paris.")
    assert (await llm.stream(ASK)).content == "Paris."
    assert ["stream_options" in r for r in server.requests] == [True, False]
    assert llm.no_stream_options
    server.enqueue_text("Lyon is not.")
    assert (await llm.stream(ASK)).content == "Lyon is not."
    assert ["stream_options" in r for r in server.requests] == [True, False, False]
    # a stream without stream_options carries no usage: both are counted with the tokenizer
    counts = [recorder.estimate(MODEL, ASK, None, text) for text in ("Paris.", "Lyon is not.")]
    assert [r[4:6] for r in await rows(store)] == [(c.prompt_tokens, c.completion_tokens) for c in counts]
    assert counts[0].completion_tokens < counts[1].completion_tokens


async def test_a_bad_request_for_another_reason_is_raised_and_stream_options_kept(llm, server, store):
    server.enqueue_error(400, "messages: the last message must not be empty")
    server.enqueue_error(400, "messages: the last message must not be empty")
    with pytest.raises(OtherLLMError, match="must not be empty"):
        await llm.stream(ASK)
    assert ["stream_options" in r for r in server.requests] == [True, False]
    assert not llm.no_stream_options
    assert await rows(store) == []


async def test_a_retried_call_is_one_row_for_the_try_that_answered(llm, server, store):
    server.enqueue_error(503, "overloaded")
    server.enqueue_text("Paris.", usage={"prompt_tokens": 30, "completion_tokens": 2})
    await llm.complete(ASK)
    assert len(server.requests) == 2
    assert [r[4:6] for r in await rows(store)] == [(30, 2)]


async def test_a_stream_cut_after_its_usage_is_recorded_and_so_is_its_retry(llm, server, store):
    # The last chunk (usage) came, but not [DONE] nor a finish reason: the tokens were spent all the same.
    server.enqueue_raw(200, 'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"chat-model",'
                            '"choices":[],"usage":{"prompt_tokens":25,"completion_tokens":4}}\n\n',
                       {"Content-Type": "text/event-stream"})
    server.enqueue_text("Paris.", usage={"prompt_tokens": 25, "completion_tokens": 2})
    with usage_scope("telegram:5", "telegram:7", "reply"):
        assert (await llm.stream(ASK)).content == "Paris."
    assert [r[3:6] for r in await rows(store)] == [("reply", 25, 4), ("reply", 25, 2)]


async def test_rows_wait_in_memory_while_the_database_is_away(store, recorder):
    await store.close()
    await recorder.record("telegram:5", "telegram:7", MODEL, "transcribe", None, fallback=Usage(12, 0))
    assert recorder.pending == 1
    await store.open()
    await recorder.record("telegram:5", "telegram:7", MODEL, "reply", Usage(30, 5, 10))
    assert recorder.pending == 0
    assert await rows(store) == [("telegram:5", "telegram:7", MODEL, "transcribe", 12, 0, 0),
                                 ("telegram:5", "telegram:7", MODEL, "reply", 30, 5, 10)]


async def test_the_record_api_takes_the_servers_usage_before_the_callers_count(store, recorder):
    await recorder.record("telegram:5", "telegram:7", "whisper-1", "transcribe", Usage(0, 0), fallback=Usage(9, 0))
    await recorder.record("telegram:5", "telegram:7", "whisper-1", "transcribe", Usage(20, 3), fallback=Usage(9, 0))
    await recorder.record("telegram:5", "telegram:7", "whisper-1", "dance", Usage(1, 1))
    assert [r[3:6] for r in await rows(store)] == [("transcribe", 9, 0), ("transcribe", 20, 3), ("other", 1, 1)]
    assert datetime.now(UTC).year >= 2026

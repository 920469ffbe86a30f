"""Tests for agent/llm.py's streams and endpoint mistakes (DESIGN §2.4), through the real SDK against the fake
server on loopback, and for agent/slots.py (``model_max_parallel``)."""

from __future__ import annotations

import asyncio

import pytest

from agent.llm import OpenAILLM
from agent.slots import ModelSlots, automatic_parallel, is_local_endpoint, urgent
from config.settings import Config
from core.errors import (
    ContextOverflowError,
    EndpointNotFoundError,
    EndpointUnresolvedError,
    StreamCutError,
)
from dispatcher.replies import error_reply
from tests.fakes.openai_server import FakeOpenAIServer

USER = [{"role": "user", "content": "hello"}]


@pytest.fixture
def fake():
    with FakeOpenAIServer() as srv:
        yield srv


def client(srv: FakeOpenAIServer, **kw) -> OpenAILLM:
    return OpenAILLM(api_key="k", base_url=srv.base_url, model="m", retry_base_delay=0.01, **kw)


class Shown:
    """Collects the pieces a stream shows."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.started = asyncio.Event()

    async def __call__(self, piece: str) -> None:
        self.pieces.append(piece)
        self.started.set()


async def test_a_stream_cut_before_any_text_is_asked_again_and_never_an_answer(fake):
    fake.enqueue_stream("", finish=False)  # role chunk, no finish reason, [DONE]: llama-cpp-python's cut
    fake.enqueue_text("the real answer")
    shown = Shown()
    llm = client(fake)
    try:
        response = await llm.stream(USER, on_text=shown)
    finally:
        await llm.close()
    assert (response.content, response.finish_reason) == ("the real answer", "stop")
    assert "".join(shown.pieces) == "the real answer"
    assert [r.get("stream") for r in fake.requests] == [True, True]


async def test_a_stream_cut_mid_answer_is_a_failed_call_not_a_finished_one(fake):
    fake.enqueue_stream("Half an ans", finish=False)
    shown = Shown()
    llm = client(fake)
    try:
        with pytest.raises(StreamCutError, match="without a finish reason"):
            await llm.stream(USER, on_text=shown)
    finally:
        await llm.close()
    # text was shown, so it is not asked again here: the agent keeps it with a note (tests/agent/test_loop.py)
    assert "".join(shown.pieces) == "Half an ans"
    assert len(fake.requests) == 1


async def test_two_cut_streams_then_one_request_without_streaming(fake):
    fake.enqueue_stream("", finish=False)
    fake.enqueue_stream("", finish=False)
    fake.enqueue_text("asked plainly")
    shown = Shown()
    llm = client(fake)
    try:
        response = await llm.stream(USER, on_text=shown)
    finally:
        await llm.close()
    assert response.content == "asked plainly"
    assert shown.pieces == ["asked plainly"]
    assert [r.get("stream") for r in fake.requests] == [True, True, None]
    assert "stream_options" not in fake.requests[2]


async def test_an_empty_200_stream_is_asked_plainly_where_the_overflow_shows(fake):
    fake.enqueue_empty_stream()  # llama-cpp-python: a streamed request over its window
    fake.enqueue_provider_error("vllm_overflow")  # the same request without streaming: the real error
    llm = client(fake)
    try:
        with pytest.raises(ContextOverflowError, match="maximum context length is 4096"):
            await llm.stream(USER, on_text=Shown())
    finally:
        await llm.close()
    assert [r.get("stream") for r in fake.requests] == [True, None]


async def test_an_overflow_inside_a_stream_is_classified_like_over_http(fake):
    fake.enqueue_stream("", error={"message": "request (3000 tokens) exceeds the available context size (2048 "
                                              "tokens), try increasing it", "type": "exceed_context_size_error",
                                   "code": 400})
    llm = client(fake)
    try:
        with pytest.raises(ContextOverflowError, match="exceeds the available context size"):
            await llm.stream(USER, on_text=Shown())
    finally:
        await llm.close()
    assert len(fake.requests) == 1  # an overflow is never sent again as it is


async def test_sglangs_overflow_inside_a_stream_is_an_overflow(fake):
    from tests.fakes.provider_errors import SGLANG_STREAM_OVERFLOW

    fake.enqueue_stream("", error=SGLANG_STREAM_OVERFLOW)
    llm = client(fake)
    try:
        with pytest.raises(ContextOverflowError, match=r"The input \(150 tokens\) is longer than the model's"):
            await llm.stream(USER, on_text=Shown())
    finally:
        await llm.close()
    assert len(fake.requests) == 1


async def test_a_server_error_inside_a_stream_is_retried(fake):
    fake.enqueue_stream("", error={"message": "the model is overloaded", "type": "server_error",
                                   "code": "server_error"})
    fake.enqueue_text("second time lucky")
    llm = client(fake)
    try:
        response = await llm.stream(USER, on_text=Shown())
    finally:
        await llm.close()
    assert response.content == "second time lucky"
    assert len(fake.requests) == 2


async def test_a_200_error_body_to_a_streamed_request_is_classified(fake):
    fake.enqueue_provider_error("lmstudio_overflow")  # status 400, JSON
    fake.enqueue_raw(200, '{"error":{"message":"Upstream error: overloaded","code":"server_error"}}')
    fake.enqueue_text("fine now")
    llm = client(fake)
    try:
        with pytest.raises(ContextOverflowError):
            await llm.stream(USER, on_text=Shown())
        assert (await llm.stream(USER, on_text=Shown())).content == "fine now"
    finally:
        await llm.close()
    assert len(fake.requests) == 3


async def test_a_base_url_without_v1_is_named_in_one_line(fake):
    fake.chat_prefix = "/v1/"
    llm = OpenAILLM(api_key="", base_url=fake.base_url.removesuffix("/v1"), model="m", retry_base_delay=0.01)
    try:
        with pytest.raises(EndpointNotFoundError) as info:
            await llm.stream(USER, on_text=Shown())
    finally:
        await llm.close()
    assert len(fake.requests) == 0 and len(fake.paths) == 1  # a 404 is never retried
    cfg = Config(open_ai_api_base=fake.base_url.removesuffix("/v1"))
    assert error_reply("s", info.value, cfg) == (
        f"The model endpoint {cfg.open_ai_api_base} answered 404 Not Found for /chat/completions: does "
        "open_ai_api_base in config.json end in /v1 (e.g. http://127.0.0.1:8080/v1)?")


async def test_an_unresolvable_host_is_named_in_one_line():
    base = "http://no-such-model-host.invalid:8080/v1"  # RFC 6761: never resolves, no real DNS answer
    llm = OpenAILLM(api_key="", base_url=base, model="m", retry_base_delay=0.01)
    try:
        with pytest.raises(EndpointUnresolvedError) as info:
            await llm.complete(USER)
    finally:
        await llm.close()
    assert error_reply("s", info.value, Config(open_ai_api_base=base)) == (
        f"The host name 'no-such-model-host.invalid' of the model endpoint {base} does not resolve: check "
        "open_ai_api_base in config.json for a typo, and the network.")


# --- model_max_parallel ---------------------------------------------------------------------------------


def test_local_endpoints_get_one_slot_and_remote_ones_none():
    for url in ("http://127.0.0.1:8080/v1", "http://localhost:11434/v1", "http://192.168.1.20:1234/v1",
                "http://10.0.0.5:8000/v1", "http://[::1]:8080/v1", "http://gpu-box.local:8000/v1"):
        assert is_local_endpoint(url), url
        assert automatic_parallel(url) == 1
    for url in ("https://api.openai.com/v1", "https://api.deepseek.com/v1", "http://8.8.8.8/v1"):
        assert not is_local_endpoint(url), url
        assert automatic_parallel(url) is None
    assert automatic_parallel("http://127.0.0.1:8080/v1", 4) == 4
    assert automatic_parallel("https://api.openai.com/v1", 2) == 2
    assert OpenAILLM(api_key="", base_url="http://127.0.0.1:1/v1", model="m").max_parallel == 1
    assert OpenAILLM(api_key="k", base_url="https://api.openai.com/v1", model="m").slots is None


async def test_a_summary_waits_for_the_one_slot_while_a_reply_streams(fake):
    fake.enqueue_stream("A reply that streams for a while.", delay=0.05, piece=4)
    fake.enqueue_text("- the summary")
    llm = client(fake)  # the fake is on 127.0.0.1: one slot by default
    shown = Shown()
    try:
        reply = asyncio.create_task(llm.stream(USER, on_text=shown))
        await shown.started.wait()  # the reply is streaming
        summary = await llm.complete([{"role": "user", "content": "summarise"}], temperature=0)
        assert reply.done()  # the summary's request went out only after the reply had finished
        assert (await reply).content == "A reply that streams for a while."
    finally:
        await llm.close()
    assert summary.content == "- the summary"
    assert fake.max_in_flight == 1
    assert [r.get("temperature") for r in fake.requests] == [None, 0]


async def test_without_a_limit_both_requests_run_at_once(fake):
    fake.enqueue_stream("A reply that streams for a while.", delay=0.05, piece=4)
    fake.enqueue_text("- the summary")
    llm = client(fake, max_parallel=2)
    shown = Shown()
    try:
        reply = asyncio.create_task(llm.stream(USER, on_text=shown))
        await shown.started.wait()
        await llm.complete([{"role": "user", "content": "summarise"}], temperature=0)
        assert not reply.done()
        await reply
    finally:
        await llm.close()
    assert fake.max_in_flight == 2


async def test_a_waiting_reply_goes_before_waiting_summaries():
    slots = ModelSlots(1)
    order: list[str] = []
    release = asyncio.Event()

    async def call(name: str, is_reply: bool) -> None:
        if is_reply:
            with urgent():
                async with slots.slot():
                    order.append(name)
        else:
            async with slots.slot():
                order.append(name)
                if name == "first":
                    await release.wait()

    first = asyncio.create_task(call("first", False))
    await asyncio.sleep(0)
    others = [asyncio.create_task(call("summary 1", False)), asyncio.create_task(call("summary 2", False))]
    await asyncio.sleep(0)
    reply = asyncio.create_task(call("reply", True))
    await asyncio.sleep(0)
    assert slots.waiting == 3
    release.set()
    await asyncio.gather(first, reply, *others)
    assert order == ["first", "reply", "summary 1", "summary 2"]
    assert (slots.busy, slots.waiting) == (0, 0)


async def test_a_cancelled_waiter_gives_its_slot_on():
    slots = ModelSlots(1)
    hold = asyncio.Event()

    async def holder() -> None:
        async with slots.slot():
            await hold.wait()

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    waiter = asyncio.create_task(holder())
    await asyncio.sleep(0)
    waiter.cancel()
    hold.set()
    await first
    with pytest.raises(asyncio.CancelledError):
        await waiter
    async with slots.slot():
        assert slots.busy == 1
    assert slots.busy == 0


async def test_a_summary_started_by_a_trim_waits_for_the_reply_being_prepared():
    slots = ModelSlots(1)
    order: list[str] = []

    async def summary() -> None:  # started by the trim, before the reply's call: the slot is free
        async with slots.slot():
            order.append("summary")

    with slots.reply_coming():
        task = asyncio.create_task(summary())
        await asyncio.sleep(0.01)
        assert order == [] and slots.waiting == 1  # a free slot is kept for the coming reply
        with urgent():
            async with slots.slot():
                order.append("reply")
        await asyncio.sleep(0.01)
        assert order == ["reply"]  # still preparing (a tool round may follow): the summary waits
    await task
    assert order == ["reply", "summary"]
    assert (slots.busy, slots.waiting, slots.preparing) == (0, 0, 0)

"""Tests for agent/loop.py: the tool loop, persistence, step limit, tool errors, caps, overflow recovery."""

from __future__ import annotations

import asyncio

import pytest

from agent.call import STREAM_BROKEN_NOTE
from agent.loop import CLEARED_REPLY, Agent
from agent.request import FINAL_ANSWER_PROMPT
from agent.sessions import LoggingDropSink, SessionManager
from agent.tools.base import ToolRegistry, tool
from agent.turn import AgentTurn
from config.settings import Config, ConfigHolder
from core.errors import ContextOverflowError, TransientLLMError
from core.records import SessionInfo
from store.store import Store
from tests.fakes.fake_llm import FakeLLM

INFO = SessionInfo(session_id="terminal:local", channel="terminal", chat_id="local", user_id="local")


class Sink(LoggingDropSink):
    """Records drops."""

    def __init__(self):
        self.drops = []

    async def submit(self, session_id, reason, from_seq, through_seq):
        self.drops.append((session_id, reason, from_seq, through_seq))


@tool
def echo_tool(ctx, text: str) -> str:
    """Return the text."""
    return text


@tool
def broken(ctx) -> str:
    """Always fails."""
    raise RuntimeError("the disk is on fire")


@tool
def huge(ctx) -> str:
    """Return 60,000 characters."""
    return "x" * 60_000


@pytest.fixture
async def parts(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    await store.open()
    yield store
    await store.close()


async def make(store, llm, **settings):
    holder = ConfigHolder(Config(data_dir="/nonexistent", **settings))
    sink = Sink()
    agent = Agent(llm=llm, tools=ToolRegistry([echo_tool, broken, huge]), store=store, config=holder, sink=sink)
    sessions = SessionManager(store, holder, sink)
    state = await sessions.get(INFO)
    return agent, state, sink


async def turn(agent, state, text):
    async with state.lock:
        await state.add_user({"role": "user", "content": text})
        return await agent.run_turn(state)


async def test_tool_round_trip_is_persisted_in_order(parts):
    llm = FakeLLM().enqueue_tools(("echo_tool", {"text": "pong"})).enqueue("done")
    agent, state, _ = await make(parts, llm)
    result = await turn(agent, state, "ping")
    assert result.text == "done" and result.steps == 2 and result.tool_calls == 1
    stored = [m.message for m in await parts.sessions.load_messages(INFO.session_id)]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[2] == {"role": "tool", "tool_call_id": stored[1]["tool_calls"][0]["id"], "content": "pong"}
    # the second request carried the tool call and its result
    assert [m["role"] for m in llm.history[1].messages] == ["system", "user", "assistant", "tool"]


async def test_a_failing_tool_returns_its_error_and_the_turn_goes_on(parts):
    llm = FakeLLM().enqueue_tools(("broken", {})).enqueue("sorry about that")
    agent, state, _ = await make(parts, llm)
    result = await turn(agent, state, "try it")
    assert result.text == "sorry about that"
    assert llm.history[1].messages[-1]["content"] == "Error: RuntimeError: the disk is on fire"


async def test_unknown_tool_and_bad_arguments_are_reported(parts):
    from core.llm import LLMResponse, ToolCall

    bad = LLMResponse(content=None, tool_calls=(ToolCall("c1", "nope", "{}"), ToolCall("c2", "echo_tool", "{oops")))
    llm = FakeLLM().enqueue(bad).enqueue("ok")
    agent, state, _ = await make(parts, llm)
    await turn(agent, state, "x")
    results = [m["content"] for m in llm.history[1].messages if m["role"] == "tool"]
    assert results[0].startswith("Error: LookupError: unknown tool 'nope'")
    assert results[1].startswith("Error: ValueError: tool arguments are not valid JSON")


async def test_tool_results_are_capped_at_50000_characters(parts):
    llm = FakeLLM().enqueue_tools(("huge", {})).enqueue("ok")
    agent, state, _ = await make(parts, llm)
    await turn(agent, state, "x")
    stored = [m.message for m in await parts.sessions.load_messages(INFO.session_id)]
    content = stored[2]["content"]
    assert content.startswith("x" * 50_000)
    assert content[50_000:] == "\n\n[Tool result truncated: showing 50,000 of 60,000 characters]"


async def test_step_limit_makes_one_final_call_without_tools(parts):
    llm = FakeLLM()
    for _ in range(3):
        llm.enqueue_tools(("echo_tool", {"text": "again"}))
    llm.enqueue("final answer")
    agent, state, _ = await make(parts, llm, agent_max_steps=3)
    result = await turn(agent, state, "loop forever")
    assert result.text == "final answer"
    assert len(llm.history) == 4
    assert all(r.tools for r in llm.history[:3])
    last = llm.history[3]
    assert last.tools is None
    assert last.messages[-1] == {"role": "system", "content": FINAL_ANSWER_PROMPT}
    stored = [m.message for m in await parts.sessions.load_messages(INFO.session_id)]
    # the final-answer prompt is never stored, and the only user message is the user's
    assert [m["content"] for m in stored if m["role"] == "user"] == ["loop forever"]
    assert all(m.get("content") != FINAL_ANSWER_PROMPT for m in stored)
    assert stored[-1] == {"role": "assistant", "content": "final answer"}


def overflow():
    # no window named: the fixed stages of DESIGN 2.3 (an error that names one: see the test after these)
    return ContextOverflowError("prompt is too long: 210631 tokens > 200000 maximum", status=400,
                                code="context_length_exceeded")


async def test_overflow_recovery_stages_then_clear(parts):
    llm = FakeLLM()
    agent, state, sink = await make(parts, llm)
    for i in range(8):
        await turn(agent, state, f"message {i}")
    before = len(await parts.sessions.load_messages(INFO.session_id))
    for _ in range(4):
        llm.enqueue(overflow())
    result = await turn(agent, state, "one more")
    assert result.cleared and result.text == CLEARED_REPLY
    assert result.outcome == "cleared (too long)"
    # the first call plus the stages 5, 2 and 1 turns
    kept_turns = [len(r.user_texts()) for r in llm.history[-4:]]
    assert kept_turns == [9, 5, 2, 1]
    assert sink.drops[-1][1] == "overflow"
    record = await parts.sessions.get(INFO.session_id)
    assert record.context_start_seq == record.last_seq + 1
    # rows are never deleted
    assert len(await parts.sessions.load_messages(INFO.session_id)) == before + 1
    result = await turn(agent, state, "fresh start")
    assert llm.history[-1].user_texts() == ["fresh start"]


async def test_overflow_recovery_succeeds_at_the_second_stage(parts):
    llm = FakeLLM()
    agent, state, _ = await make(parts, llm)
    for i in range(8):
        await turn(agent, state, f"message {i}")
    llm.enqueue(overflow()).enqueue(overflow())
    result = await turn(agent, state, "last")
    assert result.text == "echo: last"
    assert [len(r.user_texts()) for r in llm.history[-3:]] == [9, 5, 2]
    assert not result.cleared
    assert result.outcome == "ok"


async def test_an_overflow_error_that_names_the_window_teaches_it(parts):
    from agent.window import OVERFLOW, TABLE, Window

    llm = FakeLLM()
    agent, state, _ = await make(parts, llm, model="smollm2")  # a model the table does not know
    assert agent.windows.get("smollm2").tokens == 128_000
    llm.enqueue(ContextOverflowError("This model's maximum context length is 2048 tokens. However, you requested "
                                     "5000 tokens", status=400))
    await turn(agent, state, "a long question")
    assert agent.windows.get("smollm2") == Window(2048, OVERFLOW)
    assert llm.history[-1].user_texts() == ["a long question"]  # fitted to the window, answered at once
    assert len(llm.history) == 2
    from agent.context import history_budget

    tools = agent.prompt.tools_tokens(agent.model(), agent.tools.schemas())  # the tools' schemas go with every request
    assert tools > 100
    assert agent.budget(state, "").max_tokens == history_budget(50_000, 2048, tools) == 1844 - tools
    assert llm.history[-1].max_tokens <= 2048
    # a window configured larger is fitted to as well: the server knows its window (issue 40)
    agent, state, _ = await make(parts, llm, model="smollm2", model_context_window=4096)
    llm.enqueue(ContextOverflowError("This model's maximum context length is 2048 tokens", status=400))
    await turn(agent, state, "again")
    assert agent.windows.get("smollm2").tokens == 2048
    assert llm.history[-1].max_tokens <= 2048
    assert agent.windows.get("gpt-4o").source == TABLE


# --- answers of real models: reasoning, empty answers, length, broken tool arguments, the answer cap ---------

from agent.loop import (  # noqa: E402
    EMPTY_REPLY,
    FILTERED_REPLY,
    LENGTH_NOTE,
    REASONING_ONLY_REPLY,
)
from core.llm import LLMResponse, ToolCall  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402


@pytest.mark.parametrize(("response", "shown", "outcome"), [
    (LLMResponse(content="", finish_reason="stop"), EMPTY_REPLY, "empty"),
    (LLMResponse(content=None, reasoning_content="hmm", finish_reason="stop"), REASONING_ONLY_REPLY,
     "empty (reasoning only)"),
    (LLMResponse(content=None, finish_reason="content_filter"), FILTERED_REPLY, "filtered"),
    (LLMResponse(content="half an answ", finish_reason="length"), f"half an answ\n\n{LENGTH_NOTE}",
     "cut (length limit)"),
    (LLMResponse(content="All there.", finish_reason="stop"), "All there.", "ok"),
])
async def test_no_silence_and_length_note(parts, response, shown, outcome):
    llm = FakeLLM().enqueue(response)
    agent, state, _ = await make(parts, llm)
    await state.add_user({"role": "user", "content": "hi"})
    result = await agent.run_turn(state)
    assert (result.text, result.outcome) == (shown, outcome)  # the log line never says "ok" for a notice


async def test_a_final_answer_callback_stores_the_answer_and_keeps_the_reply_as_shown(parts):
    llm = FakeLLM().enqueue_tools(("echo_tool", {"text": "pong"})).enqueue(
        LLMResponse(content="half an answ", finish_reason="length"))
    agent, state, _ = await make(parts, llm)
    recorded = await parts.journal.record_incoming("terminal", "m-1", INFO.session_id, {}, None)
    assert recorded is not None
    inbox_id = recorded[0]
    finals: list[str] = []

    async def keep(message: dict, text: str) -> int:  # as the dispatcher's: the answer and the reply together
        finals.append(text)
        return await state.add_answer(message, inbox_id, text)

    async with state.lock:
        await state.add_user({"role": "user", "content": "hi"}, inbox_id)
        result = await agent.run_turn(state, AgentTurn(final=keep))
    assert result.text == f"half an answ\n\n{LENGTH_NOTE}" and finals == [result.text]
    # kept as the user sees it (with the note), stored as the model wrote it; the message stays pending
    assert await parts.journal.pending_replies() == {inbox_id: result.text}
    stored = [m.message for m in await parts.sessions.load_messages(INFO.session_id)]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[-1]["content"] == "half an answ"
    assert [m.seq for m in state.messages] == [1, 2, 3, 4]
    # without a final-answer callback the agent stores the answer itself, and nothing is kept
    llm.enqueue("plain")
    async with state.lock:
        await state.add_user({"role": "user", "content": "again"})
        assert (await agent.run_turn(state)).text == "plain"
    assert finals == [f"half an answ\n\n{LENGTH_NOTE}"]
    assert await parts.journal.pending_replies() == {inbox_id: result.text}


async def test_every_request_caps_the_answer_within_the_window(parts):
    llm = FakeLLM()
    agent, state, _ = await make(parts, llm, agent_max_output_tokens=0, model="gpt-4o")
    await state.add_user({"role": "user", "content": "hi"})
    await agent.run_turn(state)
    assert llm.history[-1].max_tokens == 4096
    small = FakeLLM()
    agent, state, _ = await make(parts, small, agent_max_output_tokens=50_000, model="m", model_context_window=20_000,
                                 character_desc="persona " * 1000)
    await state.add_user({"role": "user", "content": "hello"})
    await agent.run_turn(state)
    cap = small.history[-1].max_tokens
    assert 18_000 < cap < 20_000 - 1000  # the window minus the persona, the message and the tool schemas


async def test_invalid_tool_arguments_get_an_error_result_and_stay_valid_json(parts):
    bad = LLMResponse(content=None, tool_calls=(
        ToolCall(id="c1", name="echo_tool", arguments="{}", error="the arguments were not valid JSON: {text:"),))
    llm = FakeLLM().enqueue(bad).enqueue("done")
    agent, state, _ = await make(parts, llm)
    await state.add_user({"role": "user", "content": "go"})
    assert (await agent.run_turn(state)).text == "done"
    sent = llm.history[-1].messages
    assert sent[-2]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert sent[-1]["content"].startswith("Error: the arguments were not valid JSON")


async def test_reasoning_kept_on_tool_calls_sent_back_never_shown():
    """Through the real SDK: DeepSeek-style reasoning_content on a tool-call turn goes back to the provider;
    <think> text is never shown; arguments given as an object are accepted; a missing id gets one."""
    from agent.llm import OpenAILLM

    with FakeOpenAIServer() as srv:
        srv.enqueue_response({"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": [{
            "index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None, "reasoning_content": "I should echo.",
                "tool_calls": [{"type": "function", "function": {"name": "echo_tool",
                                                                  "arguments": {"text": "hi"}}}]}}]})
        srv.enqueue_text("<think>the user wants hi</think>\n\nhi back")
        llm = OpenAILLM(api_key="k", base_url=srv.base_url, model="m")
        store = Store("sqlite://")
        await store.open()
        try:
            agent, state, _ = await make(store, llm)
            await state.add_user({"role": "user", "content": "say hi"})
            result = await agent.run_turn(state)
        finally:
            await llm.close()
            await store.close()
        second = srv.requests[1]["messages"]
    assert result.text == "hi back"
    call_msg = second[-2]
    assert call_msg["reasoning_content"] == "I should echo."
    assert call_msg["tool_calls"][0]["function"]["arguments"] == '{"text": "hi"}'
    assert call_msg["tool_calls"][0]["id"].startswith("call_")
    assert second[-1] == {"role": "tool", "tool_call_id": call_msg["tool_calls"][0]["id"], "content": "hi"}
    assert "reasoning_content" not in state.messages[-1].message
    assert state.messages[-1].message["content"] == "hi back"


class StreamingFakeLLM(FakeLLM):
    """FakeLLM that also streams: each answer's text in 4-character pieces; an error after ``break_after``."""

    break_after: int | None = None

    async def stream(self, messages, *, tools=None, model=None, temperature=None, max_tokens=None, on_text=None):
        response = await self.complete(messages, tools=tools, model=model, temperature=temperature,
                                       max_tokens=max_tokens)
        text = response.content or ""
        for i in range(0, len(text), 4):
            if self.break_after is not None and i >= self.break_after:
                raise TransientLLMError("the connection broke")
            await on_text(text[i:i + 4])
        return response


class Pieces:
    """An AnswerSink that records what it was given."""

    def __init__(self):
        self.events = []

    async def text(self, piece):
        self.events.append(piece)

    async def discard(self):
        self.events.append("<discard>")


async def test_a_streamed_turn_shows_only_the_answer_and_a_broken_stream_keeps_the_text(parts):
    llm = StreamingFakeLLM()
    llm.enqueue(LLMResponse(content="Let me see.", tool_calls=(ToolCall("c1", "echo_tool", '{"text": "x"}'),)))
    llm.enqueue("The answer.")
    agent, state, _ = await make(parts, llm)
    pieces = Pieces()
    async with state.lock:
        await state.add_user({"role": "user", "content": "q"})
        result = await agent.run_turn(state, AgentTurn(sink=pieces))
    assert (result.text, result.outcome) == ("The answer.", "ok")
    assert "".join(pieces.events) == "Let me see.<discard>The answer."

    llm.break_after = 8
    llm.enqueue("Half of this answer never arrives.")
    pieces = Pieces()
    async with state.lock:
        await state.add_user({"role": "user", "content": "again"})
        result = await agent.run_turn(state, AgentTurn(sink=pieces))
    assert "".join(pieces.events) == "Half of "
    assert result.text == f"Half of\n\n{STREAM_BROKEN_NOTE}"
    assert result.outcome == "cut (the stream broke)"
    stored = await parts.sessions.load_messages(INFO.session_id)
    assert stored[-1].message == {"role": "assistant", "content": result.text}


async def test_no_sink_means_no_stream(parts):
    llm = StreamingFakeLLM()
    llm.break_after = 0  # streaming would fail at once
    agent, state, _ = await make(parts, llm)
    assert (await turn(agent, state, "hi")).text == "echo: hi"


async def test_memory_flush_saves_notes_before_a_trim_and_answers_nobody(parts, tmp_path):
    from agent.tools.memory_tools import memory_write

    holder = ConfigHolder(Config(data_dir=str(tmp_path), agent_max_context_turns=2, memory_flush=True))
    sink = Sink()
    llm = FakeLLM().enqueue("a1").enqueue("a2")
    llm.enqueue_tools(("memory_write", {"text": "Alice's cat is called Tom."})).enqueue("a3")
    agent = Agent(llm=llm, tools=ToolRegistry([memory_write]), store=parts, config=holder, sink=sink)
    state = await SessionManager(parts, holder, sink).get(INFO)
    for text in ("my cat is called Tom", "I live in Lisbon"):
        await turn(agent, state, text)
    result = await turn(agent, state, "third")
    assert result.text == "a3"  # the flush's tool call is not the answer
    notes = (tmp_path / "memory" / "terminal_local" / "MEMORY.md").read_text(encoding="utf-8")
    assert notes == "- Alice's cat is called Tom.\n"
    flush = llm.history[2]
    assert [t["function"]["name"] for t in flush.tools] == ["memory_write"]
    assert "my cat is called Tom" in flush.messages[-1]["content"]
    assert sink.drops, "the trim went ahead after the flush"


async def test_no_flush_without_memory_flush(parts, tmp_path):
    holder = ConfigHolder(Config(data_dir=str(tmp_path), agent_max_context_turns=2))
    llm = FakeLLM().enqueue("a1").enqueue("a2").enqueue("a3")
    agent = Agent(llm=llm, tools=ToolRegistry([echo_tool]), store=parts, config=holder, sink=Sink())
    state = await SessionManager(parts, holder, Sink()).get(INFO)
    for text in ("one", "two", "three"):
        await turn(agent, state, text)
    assert len(llm.history) == 3


class SlowStreamingLLM(StreamingFakeLLM):
    """Streams each answer in 4-character pieces, ``gap`` seconds apart."""

    gap: float = 0.0

    async def stream(self, messages, *, tools=None, model=None, temperature=None, max_tokens=None, on_text=None):
        response = await self.complete(messages, tools=tools, model=model, temperature=temperature,
                                       max_tokens=max_tokens)
        text = response.content or ""
        for i in range(0, len(text), 4):
            await asyncio.sleep(self.gap)
            await on_text(text[i:i + 4])
        return response


async def test_a_long_streamed_answer_is_not_silence_but_a_silent_model_ends_the_turn(parts):
    llm = SlowStreamingLLM()
    llm.gap = 0.1
    llm.enqueue("A slow local model writes this answer piece by piece.")  # 14 pieces: about 1.4 s
    agent, state, _ = await make(parts, llm)
    agent.turn_deadline = 0.5
    async with state.lock:
        await state.add_user({"role": "user", "content": "q"})
        result = await agent.run_turn(state, AgentTurn(sink=Pieces()))
    assert (result.text, result.outcome) == ("A slow local model writes this answer piece by piece.", "ok")
    llm.gap = 0.8  # silent longer than the deadline before the first piece
    llm.enqueue("Never shown.")
    async with state.lock:
        await state.add_user({"role": "user", "content": "again"})
        with pytest.raises(TransientLLMError, match="deadline"):
            await agent.run_turn(state, AgentTurn(sink=Pieces()))


async def test_a_refused_long_message_is_cut_to_fit_the_window_the_error_named(parts):
    llm = FakeLLM()
    agent, state, _ = await make(parts, llm, model="smollm2")
    llm.enqueue(ContextOverflowError("This model's maximum context length is 800 tokens. However, you requested "
                                     "3300 tokens (3204 in the messages, 96 in the completion).", status=400))
    llm.enqueue("the model's answer")
    result = await turn(agent, state, "港口委员会讨论了新的渡轮时刻表。" * 200)  # 3,200 characters, ~3,000 tokens
    assert (result.text, result.outcome) == ("the model's answer", "ok")
    (sent,) = llm.history[-1].user_texts()
    assert "[Message truncated: kept" in sent and len(sent) < 800  # below the usual floor of 1,000 characters
    assert "overflow recovery: fitted to the window the server named" in result.actions

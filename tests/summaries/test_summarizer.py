"""Tests for summaries/summarizer.py: files, injection, ordering, at-most-once, fallback, privacy, journal."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import time_machine
from sqlalchemy import select

from agent.context import injection_text
from agent.loop import Agent
from agent.sessions import LiveSessions, SessionManager
from agent.tools.base import ToolContext, ToolRegistry, tool
from agent.tools.memory_tools import memory_get, memory_search
from config.settings import Config, ConfigHolder
from core.errors import NotConfiguredError, TransientLLMError
from core.records import SessionInfo
from core.retry import SUMMARY_CALL
from memory.daily import DailyMemory
from store.models import SummaryJobRow
from store.store import Store
from summaries.summarizer import Summarizer
from summaries.text import SUMMARY_REQUEST, SUMMARY_SYSTEM_PROMPT
from tests.fakes.fake_llm import FakeLLM

ZONE = ZoneInfo("Asia/Shanghai")
A = SessionInfo(session_id="telegram:111", channel="telegram", chat_id="111", user_id="111")
B = SessionInfo(session_id="telegram:222", channel="telegram", chat_id="222", user_id="222")
NOON = datetime(2026, 3, 1, 14, 5, tzinfo=ZONE)
#: Message texts without facts (no numbers, no names), so the summary check keeps nothing.
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven"]


def day_file(tmp_path: Path, session: SessionInfo, day: str = "2026-03-01") -> Path:
    return tmp_path / "memory" / session.session_id.replace(":", "_") / f"{day}.md"


class World:
    """A real store, daily memory, session manager and summariser over one tmp folder."""

    def __init__(self, tmp_path: Path, summary_llm: FakeLLM, **settings) -> None:
        self.tmp_path = tmp_path
        self.config = ConfigHolder(Config(data_dir=str(tmp_path), timezone="Asia/Shanghai", **settings))
        self.store = Store(f"sqlite:///{tmp_path / 'chatbot.db'}")
        self.daily = DailyMemory(tmp_path / "memory", ZONE)
        self.llm = summary_llm
        live = LiveSessions(self.store)
        self.summarizer = Summarizer(store=self.store, llm=summary_llm, config=self.config, sessions=live,
                                     daily=self.daily, retry=SUMMARY_CALL.but(first=0.0))
        self.sessions = SessionManager(self.store, self.config, self.summarizer, live=live)

    async def open(self) -> World:
        await self.store.open()
        return self

    async def close(self) -> None:
        await self.summarizer.drain(2)
        await self.store.close()

    async def seed(self, session: SessionInfo, *texts: str) -> list[int]:
        """Store alternating user/assistant messages; return their seqs."""
        await self.store.sessions.ensure(session)
        roles = ["user", "assistant"]
        return await self.store.sessions.append(session.session_id,
                                       [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)])

    def agent(self, chat_llm: FakeLLM, tools: ToolRegistry | None = None) -> Agent:
        return Agent(llm=chat_llm, tools=tools or ToolRegistry(), store=self.store, config=self.config,
                     sink=self.summarizer)

    async def job_rows(self) -> list[tuple[str, str, int]]:
        columns = (SummaryJobRow.reason, SummaryJobRow.status, SummaryJobRow.attempts)
        rows = await self.store.run(lambda conn: conn.execute(select(*columns).order_by(SummaryJobRow.id)).all())
        return [tuple(r) for r in rows]


@pytest.fixture
async def world(tmp_path: Path):
    w = await World(tmp_path, FakeLLM()).open()
    yield w
    await w.close()


async def turn(agent: Agent, state, text: str):
    async with state.lock:
        await state.add_user({"role": "user", "content": text})
        return await agent.run_turn(state)


# --- files and headers ---------------------------------------------------------------------------

@pytest.mark.parametrize(("reason", "header", "injected"), [
    ("trim", "Trimmed Context", True),
    ("restore", "Trimmed Context", True),
    ("overflow", "Context Overflow Recovery", True),
    ("compact", "Compacted", True),
    ("clear", "Cleared Context", False),
])
async def test_job_writes_exact_section_and_injects_except_for_clear(world, reason, header, injected):
    await world.seed(A, "We ship on Friday, agreed?", "Agreed: Friday.", "Alice owns the release", "Noted.")
    world.llm.enqueue("- Ship on Friday\n- Alice owns the release")
    with time_machine.travel(NOON, tick=False):
        await world.summarizer.submit(A.session_id, reason, 1, 4)
        assert world.summarizer.pending() == 1  # queued, not run: submit returned at once
        assert await world.summarizer.drain(2)
    assert day_file(world.tmp_path, A).read_text(encoding="utf-8") == (
        f"# Daily Memory: 2026-03-01\n\n## {header} (14:05)\n\n- Ship on Friday\n- Alice owns the release\n")
    record = await world.store.sessions.get(A.session_id)
    assert record.summarized_through_seq == 4
    if injected:
        assert (record.summary, record.summary_turns) == ("- Ship on Friday\n- Alice owns the release", 2)
    else:
        assert (record.summary, record.summary_turns) == (None, 0)
    assert await world.job_rows() == [(reason, "done", 1)]
    assert world.summarizer.pending() == 0


async def test_none_writes_nothing_and_injects_nothing_but_advances(world):
    await world.seed(A, "hi", "hello!")
    world.llm.enqueue("None.")
    assert await world.summarizer.summarize_now(A.session_id, "trim", 1, 2) is None
    assert not (world.tmp_path / "memory").exists()
    record = await world.store.sessions.get(A.session_id)
    assert (record.summary, record.summarized_through_seq) == (None, 2)
    assert await world.job_rows() == [("trim", "done", 1)]


async def test_summarize_now_returns_the_summary(world):
    await world.seed(A, "the budget is 500", "ok, 500")
    world.llm.enqueue("- Budget: 500")
    assert await world.summarizer.summarize_now(A.session_id, "compact", 1, 2) == "- Budget: 500"
    assert (await world.store.sessions.get(A.session_id)).summary == "- Budget: 500"


# --- the request -----------------------------------------------------------------------------------

@tool
def web_fetch(ctx, url: str) -> str:
    """Fetch."""
    return "x" * 2_500


async def test_the_summary_call_has_no_tools_temperature_0_summary_model_and_exact_text(tmp_path):
    w = await World(tmp_path, FakeLLM(), model="big-model", summary_model="cheap-model").open()
    try:
        await w.store.sessions.ensure(A)
        await w.store.sessions.append(A.session_id, [
            {"role": "user", "content": "read the page"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "web_fetch", "arguments": '{"url":"u"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "x" * 2_500},
            {"role": "assistant", "content": "It is all x."},
        ])
        await w.summarizer.summarize_now(A.session_id, "trim", 1, 4)
        (request,) = w.llm.history
        assert request.tools is None and request.temperature == 0 and request.model == "cheap-model"
        assert request.messages == [
            {"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
            {"role": "user", "content": (
                f"{SUMMARY_REQUEST}\n\nConversation:\nUser: read the page\n"
                'Assistant called tool web_fetch({"url": "u"})\n'
                f"Tool result (web_fetch): {'x' * 2_000} [… 500 more characters]\n"
                "Assistant: It is all x.")},
        ]
        w.config.replace(w.config().model_copy(update={"summary_model": ""}))
        await w.seed(A, "more", "yes")
        await w.summarizer.summarize_now(A.session_id, "trim", 5, 6)
        assert w.llm.history[-1].model == "big-model"
    finally:
        await w.close()


def test_prompt_asks_for_bullets_and_none():
    assert '"- "' in SUMMARY_SYSTEM_PROMPT and "answer exactly: none" in SUMMARY_SYSTEM_PROMPT
    for keep in ("decisions", "conclusions", "open questions", "to-dos", "constraints", "names"):
        assert keep in SUMMARY_SYSTEM_PROMPT
    assert "Drop greetings" in SUMMARY_SYSTEM_PROMPT and "chit-chat" in SUMMARY_SYSTEM_PROMPT


# --- at most once, no text dedup ------------------------------------------------------------------

async def test_a_repeated_ok_is_summarised_each_time(world):
    await world.seed(A, "ok", "fine")
    world.llm.enqueue("- User said ok (1)").enqueue("- User said ok (2)")
    with time_machine.travel(NOON, tick=False):
        await world.summarizer.submit(A.session_id, "trim", 1, 2)
        assert await world.summarizer.drain(2)
        await world.seed(A, "ok", "fine")
        await world.summarizer.submit(A.session_id, "trim", 3, 4)
        assert await world.summarizer.drain(2)
    assert len(world.llm.history) == 2
    # the earlier summary is not sent again: each section holds what is new in its turns
    assert world.llm.history[1].messages[1]["content"] == (
        f"{SUMMARY_REQUEST}\n\nConversation:\nUser: ok\nAssistant: fine")
    assert day_file(world.tmp_path, A).read_text(encoding="utf-8") == (
        "# Daily Memory: 2026-03-01\n\n## Trimmed Context (14:05)\n\n- User said ok (1)\n"
        "\n## Trimmed Context (14:05)\n\n- User said ok (2)\n")
    record = await world.store.sessions.get(A.session_id)
    # the rolling summary holds both, the file each once
    assert (record.summary, record.summary_turns, record.summarized_through_seq) == (
        "- User said ok (1)\n- User said ok (2)", 2, 4)


async def test_each_message_is_summarised_at_most_once(world):
    await world.seed(A, "alpha", "r", "beta", "r", "gamma", "r")
    world.llm.enqueue("- first").enqueue("- second")
    await world.summarizer.submit(A.session_id, "trim", 1, 4)
    await world.summarizer.submit(A.session_id, "overflow", 1, 6)  # overlaps the first
    await world.summarizer.submit(A.session_id, "trim", 3, 6)  # nothing new: skipped
    assert await world.summarizer.drain(2)
    assert len(world.llm.history) == 2
    assert world.llm.history[1].messages[1]["content"].endswith("Conversation:\nUser: gamma\nAssistant: r")
    assert await world.job_rows() == [("trim", "done", 1), ("overflow", "done", 1), ("trim", "done", 0)]
    record = await world.store.sessions.get(A.session_id)
    assert (record.summary, record.summary_turns, record.summarized_through_seq) == ("- first\n- second", 3, 6)


# --- fallback -------------------------------------------------------------------------------------

async def test_fallback_after_retries_is_written_and_injected_exactly(world):
    await world.seed(A, "What is the plan?\nDetails follow", "We ship on Friday.\nThen we rest.", "ok",
                     "x" * 300)
    for _ in range(3):
        world.llm.enqueue(TransientLLMError("model is down", status=503))
    with time_machine.travel(NOON, tick=False):
        assert await world.summarizer.summarize_now(A.session_id, "trim", 1, 4) == (
            "- (fallback) What is the plan? Details follow → We ship on Friday.\n"
            f"- (fallback) ok → {'x' * 200} [… 100 more characters]")
    assert day_file(world.tmp_path, A).read_text(encoding="utf-8") == (
        "# Daily Memory: 2026-03-01\n\n## Trimmed Context (14:05)\n\n"
        "- (fallback) What is the plan? Details follow → We ship on Friday.\n"
        f"- (fallback) ok → {'x' * 200} [… 100 more characters]\n")
    assert len(world.llm.history) == 3  # one try and the two retries of SUMMARY_CALL
    assert await world.job_rows() == [("trim", "done", 3)]
    record = await world.store.sessions.get(A.session_id)
    assert record.summary.startswith("- (fallback) What is the plan?") and record.summary_turns == 2


async def test_fallback_rolls_after_an_earlier_summary_and_permanent_errors_are_not_retried(world):
    await world.seed(A, "a", "b")
    world.llm.enqueue("- earlier point")
    await world.summarizer.summarize_now(A.session_id, "trim", 1, 2)
    (world.tmp_path / "memory").rename(world.tmp_path / "old-memory")
    await world.seed(A, "c", "d")
    world.llm.enqueue(NotConfiguredError("no model"))
    with time_machine.travel(NOON, tick=False):
        await world.summarizer.summarize_now(A.session_id, "trim", 3, 4)
    assert len(world.llm.history) == 2
    record = await world.store.sessions.get(A.session_id)
    assert (record.summary, record.summary_turns) == ("- earlier point\n- (fallback) c → d", 2)
    # the memory file gets only the new lines (the earlier summary was written when it was made)
    assert day_file(world.tmp_path, A).read_text(encoding="utf-8") == (
        "# Daily Memory: 2026-03-01\n\n## Trimmed Context (14:05)\n\n- (fallback) c → d\n")


# --- injection into the context -------------------------------------------------------------------

async def test_injection_end_to_end_and_after_restart(tmp_path):
    w = await World(tmp_path, FakeLLM(), agent_max_context_turns=4).open()
    chat = FakeLLM()
    agent = w.agent(chat)
    state = await w.sessions.get(A)
    w.llm.enqueue("- Alice likes green tea")
    for i in range(5):  # the fifth turn drops the two oldest: seqs 1-4
        await turn(agent, state, f"message {WORDS[i]}")
    assert await w.summarizer.drain(2)
    assert (state.summary, state.summary_turns, state.summarized_through_seq) == ("- Alice likes green tea", 2, 4)
    await turn(agent, state, "message five")
    expected = injection_text("- Alice likes green tea", 2, "message two")
    assert expected.startswith("[System: Previous conversation summary \u2014 2 turns were compacted]\n\n"
                               "- Alice likes green tea\n\nThe recent conversation continues below.\n\n---\n\n")
    assert chat.history[-1].messages[1] == {"role": "user", "content": expected}
    assert [m for m in chat.history[-1].user_texts()][1:] == ["message three", "message four", "message five"]
    # stored messages never carry the injection
    stored = [m.message for m in await w.store.sessions.load_messages(A.session_id)]
    assert [m["content"] for m in stored if m["role"] == "user"] == [f"message {w}" for w in WORDS[:6]]
    await w.close()

    # restart: a new store and session manager over the same database
    w2 = await World(tmp_path, FakeLLM().enqueue("none"), agent_max_context_turns=4).open()
    try:
        chat2 = FakeLLM()
        state2 = await w2.sessions.get(A)
        assert (state2.summary, state2.summary_turns) == ("- Alice likes green tea", 2)
        await turn(w2.agent(chat2), state2, "message six")
        first_user = chat2.history[-1].messages[1]
        assert first_user == {"role": "user", "content": injection_text("- Alice likes green tea", 2, "message three")}
        assert await w2.summarizer.drain(2)  # the restore job for message two answered "none"
        assert state2.summary == "- Alice likes green tea" and state2.summarized_through_seq == 6
    finally:
        await w2.close()


@tool
async def slow_tool(ctx) -> str:
    """Take a moment."""
    await asyncio.sleep(0.05)
    return "tool done"


async def test_a_summary_completing_during_a_running_turn_loses_nothing(tmp_path):
    w = await World(tmp_path, FakeLLM(latency=0.05), agent_max_context_turns=2).open()
    try:
        chat = FakeLLM()
        agent = w.agent(chat, ToolRegistry([slow_tool]))
        state = await w.sessions.get(A)
        await turn(agent, state, "one")
        await turn(agent, state, "two")
        # the third turn drops turn "one" at its first model call; that call and the tool take longer
        # than the summary, which lands while the turn is still running
        chat.latency = 0.2
        chat.enqueue_tools(("slow_tool", {})).enqueue("three done")
        w.llm.enqueue("- summary of one")
        result = await turn(agent, state, "three")
        assert result.text == "three done"
        first_call, second_call = chat.history[-2:]
        assert first_call.messages[1] == {"role": "user", "content": "two"}  # no summary yet
        assert second_call.messages[1] == {"role": "user", "content": injection_text("- summary of one", 1, "two")}
        assert [m["role"] for m in second_call.messages] == ["system", "user", "assistant", "user", "assistant",
                                                             "tool"]
        stored = await w.store.sessions.load_messages(A.session_id)
        assert [s.seq for s in stored] == list(range(1, 9))
        assert [(m.message["role"], m.message.get("content")) for m in stored] == [
            ("user", "one"), ("assistant", "echo: one"), ("user", "two"), ("assistant", "echo: two"),
            ("user", "three"), ("assistant", None), ("tool", "tool done"), ("assistant", "three done")]
        record = await w.store.sessions.get(A.session_id)
        assert (record.summary, record.summarized_through_seq, record.context_start_seq) == ("- summary of one", 2, 3)
    finally:
        await w.close()


async def test_clear_writes_memory_only_and_keeps_the_summary_reset(world, caplog):
    caplog.set_level(logging.INFO, logger="summaries.summarizer")
    with time_machine.travel(NOON, tick=False):
        await clear_scenario(world)
    jobs = [r.getMessage() for r in caplog.records if r.getMessage().startswith("summary job")]
    assert [j.split(" ms")[0].rsplit(", ", 1)[0] for j in jobs] == [
        "summary job 1 session telegram:111 trim seqs 1-2: 1 turn, summarised",
        # queued before the clear: it reaches the memory file, but it never injects
        "summary job 2 session telegram:111 trim seqs 3-4: 1 turn, summarised, memory only",
        "summary job 3 session telegram:111 clear seqs 5-6: 1 turn, summarised",
    ]
    assert not any("budget" in r.getMessage() for r in caplog.records)  # no message bodies in the log
    assert day_file(world.tmp_path, A).read_text(encoding="utf-8") == (
        "# Daily Memory: 2026-03-01\n\n## Trimmed Context (14:05)\n\n- earlier\n"
        "\n## Trimmed Context (14:05)\n\n- budget 500\n"
        "\n## Cleared Context (14:05)\n\n- colour blue\n")


async def clear_scenario(world: World) -> None:
    agent = world.agent(FakeLLM())
    state = await world.sessions.get(A)
    await world.seed(A, "plan: Friday", "ok Friday")
    world.llm.enqueue("- earlier")
    await world.summarizer.summarize_now(A.session_id, "trim", 1, 2)
    assert state.summary == "- earlier"
    await world.seed(A, "budget 500", "noted", "colour blue", "noted")
    # a trim job is still running when the user clears the context
    world.llm.latency = 0.1
    world.llm.enqueue("- budget 500").enqueue("- colour blue")
    await world.summarizer.submit(A.session_id, "trim", 3, 4)
    await asyncio.sleep(0.02)
    await agent.clear(state)
    await world.summarizer.submit(A.session_id, "clear", 5, 6)
    assert await world.summarizer.drain(2)
    assert (state.summary, state.summary_turns, state.summarized_through_seq) == (None, 0, 6)
    record = await world.store.sessions.get(A.session_id)
    assert (record.summary, record.summary_turns, record.summarized_through_seq) == (None, 0, 6)
    # no request carries an earlier summary: each says what is new in its turns
    assert not any("Earlier summary" in r.messages[1]["content"] for r in world.llm.history)


# --- privacy --------------------------------------------------------------------------------------

async def test_one_sessions_memory_is_never_visible_to_another(world):
    agent = world.agent(FakeLLM())
    a, b = await world.sessions.get(A), await world.sessions.get(B)
    await turn(agent, a, "the vault code is 4711")
    await turn(agent, b, "hello from Bob")
    world.llm.enqueue("- The vault code is 4711")
    await world.summarizer.summarize_now(A.session_id, "compact", 1, 2)
    await turn(agent, b, "what is the vault code?")
    assert a.summary == "- The vault code is 4711" and b.summary is None
    assert all("4711" not in str(m) for m in agent.llm.history[-1].messages)
    assert not world.daily.session_dir(B.session_id).exists()
    cfg = world.config()
    ctx_a = ToolContext(session_id=A.session_id, config=cfg, data_dir=world.tmp_path)
    ctx_b = ToolContext(session_id=B.session_id, config=cfg, data_dir=world.tmp_path)
    assert "4711" in await memory_search.call(ctx_a, {"query": "vault"})
    assert await memory_search.call(ctx_b, {"query": "vault"}) == "No memory matches for 'vault'."
    assert "4711" in await memory_get.call(ctx_a, {})
    assert await memory_get.call(ctx_b, {}) == f"No memory file for {world.daily.today()}."


# --- scheduling -----------------------------------------------------------------------------------

class GaugeLLM(FakeLLM):
    """Records how many summary calls run at once, overall and per session (named in the transcript)."""

    def __init__(self) -> None:
        super().__init__(latency=0.05)
        self.now: dict[str, int] = {}
        self.peak = 0
        self.peak_per_session = 0
        self.order: list[str] = []

    async def complete(self, messages, *, tools=None, model=None, temperature=None, max_tokens=None,
                       retry=None):
        text = messages[1]["content"].rsplit("User: ", 1)[1]
        session = text.split()[0]
        self.order.append(text.split("\n")[0])
        self.now[session] = self.now.get(session, 0) + 1
        self.peak = max(self.peak, sum(self.now.values()))
        self.peak_per_session = max(self.peak_per_session, self.now[session])
        try:
            return await super().complete(messages, tools=tools, model=model, temperature=temperature)
        finally:
            self.now[session] -= 1


async def test_jobs_run_in_order_per_session_and_concurrently_up_to_the_bound(tmp_path):
    w = await World(tmp_path, GaugeLLM()).open()
    try:
        sessions = [SessionInfo(session_id=f"telegram:{n}", channel="telegram", chat_id=str(n)) for n in range(6)]
        for s in sessions:
            await w.seed(s, f"s{s.chat_id} first", "r", f"s{s.chat_id} second", "r")
        for s in sessions:
            await w.summarizer.submit(s.session_id, "trim", 1, 2)
            await w.summarizer.submit(s.session_id, "trim", 3, 4)
        assert w.summarizer.pending() == 12
        assert await w.summarizer.drain(5)
        assert w.llm.peak == 4 and w.llm.peak_per_session == 1
        for s in sessions:
            mine = [o for o in w.llm.order if o.startswith(f"s{s.chat_id} ")]
            assert mine == [f"s{s.chat_id} first", f"s{s.chat_id} second"]
    finally:
        await w.close()


async def test_start_runs_jobs_left_pending_by_the_last_process(world):
    await world.seed(A, "remember the milk", "will do")
    await world.store.jobs.add(A.session_id, "trim", 1, 2)  # journalled, never run
    world.llm.enqueue("- Buy milk")
    await world.summarizer.start()
    await world.summarizer.start()  # idempotent: the job is queued once
    assert world.summarizer.pending() == 1
    assert await world.summarizer.drain(2)
    assert await world.job_rows() == [("trim", "done", 1)]
    assert (await world.store.sessions.get(A.session_id)).summary == "- Buy milk"


async def test_drain_gives_up_after_grace_and_the_job_stays_pending(tmp_path):
    w = await World(tmp_path, FakeLLM(latency=5.0)).open()
    await w.seed(A, "remember the milk", "will do")
    await w.summarizer.submit(A.session_id, "trim", 1, 2)
    assert await w.summarizer.drain(0.1) is False
    assert w.summarizer.pending() == 0
    assert [(j.session_id, j.reason, j.from_seq, j.through_seq) for j in await w.store.jobs.pending()] == [
        (A.session_id, "trim", 1, 2)]
    await w.store.close()
    # the next process resumes it
    w2 = await World(tmp_path, FakeLLM().enqueue("- Buy milk")).open()
    try:
        await w2.summarizer.start()
        assert await w2.summarizer.drain(2)
        assert await w2.store.jobs.pending() == []
        assert (await w2.store.sessions.get(A.session_id)).summary == "- Buy milk"
    finally:
        await w2.close()


async def test_a_trim_queued_before_a_clear_does_not_inject_after_restart(tmp_path):
    w = await World(tmp_path, FakeLLM()).open()
    await w.seed(A, "a", "b", "c", "d")
    await w.store.jobs.add(A.session_id, "trim", 1, 2)
    await w.store.jobs.add(A.session_id, "clear", 3, 4)
    w.llm.enqueue("- from the trim").enqueue("- from the clear")
    try:
        await w.summarizer.start()
        assert await w.summarizer.drain(2)
        record = await w.store.sessions.get(A.session_id)
        assert (record.summary, record.summarized_through_seq) == (None, 4)
    finally:
        await w.close()


# --- date rollover --------------------------------------------------------------------------------

class ClockLLM(FakeLLM):
    """Moves the clock while the model "thinks"."""

    def __init__(self, traveller, to: datetime) -> None:
        super().__init__()
        self.traveller, self.to = traveller, to

    async def complete(self, messages, **kwargs):
        self.traveller.move_to(self.to)
        return await super().complete(messages, **kwargs)


async def test_a_job_finishing_after_midnight_goes_to_the_next_days_file(tmp_path):
    with time_machine.travel(datetime(2026, 3, 1, 23, 59, 30, tzinfo=ZONE), tick=False) as traveller:
        w = await World(tmp_path, ClockLLM(traveller, datetime(2026, 3, 2, 0, 1, tzinfo=ZONE))).open()
        try:
            await w.seed(A, "late plan", "sure")
            w.llm.enqueue("- late plan")
            await w.summarizer.submit(A.session_id, "trim", 1, 2)
            assert await w.summarizer.drain(2)
        finally:
            await w.close()
    assert not day_file(tmp_path, A, "2026-03-01").exists()
    assert day_file(tmp_path, A, "2026-03-02").read_text(encoding="utf-8") == (
        "# Daily Memory: 2026-03-02\n\n## Trimmed Context (00:01)\n\n- late plan\n")


async def test_unknown_reason_is_rejected(world):
    with pytest.raises(ValueError, match="unknown summary reason 'trimm'"):
        await world.summarizer.submit(A.session_id, "trimm", 1, 2)
    assert await world.job_rows() == []


async def test_jobs_cancelled_by_drain_run_before_the_sessions_next_job(world):
    await world.seed(A, "a", "b", "c", "d")
    await world.summarizer.submit(A.session_id, "trim", 1, 2)
    assert await world.summarizer.drain(0) is False
    assert world.summarizer.pending() == 0
    assert len(await world.store.jobs.pending()) == 1
    world.llm.enqueue("- a and b").enqueue("- c and d")
    await world.summarizer.submit(A.session_id, "trim", 3, 4)
    assert world.summarizer.pending() == 2  # the cancelled job runs first, in submission order
    assert await world.summarizer.drain(2)
    assert await world.store.jobs.pending() == []
    assert world.llm.history[0].messages[1]["content"].endswith("User: a\nAssistant: b")
    assert (await world.store.sessions.get(A.session_id)).summary == "- a and b\n- c and d"


async def test_jobs_left_by_a_dead_process_are_adopted_once_they_are_old_enough(world):
    await world.seed(A, "a", "b")
    await world.store.jobs.add(A.session_id, "trim", 1, 2)  # journalled by a process that died
    assert await world.summarizer.adopt_orphans(older_than=3600) == 0  # too recent: its process may be alive
    world.llm.enqueue("- a and b")
    assert await world.summarizer.adopt_orphans(older_than=0) == 1
    assert await world.summarizer.adopt_orphans(older_than=0) == 0  # queued (or run) here already
    assert await world.summarizer.drain(2)
    assert await world.store.jobs.pending() == []
    assert (await world.store.sessions.get(A.session_id)).summary == "- a and b"


# --- the memory_written hook -----------------------------------------------------------------------

@pytest.mark.parametrize(("reason", "kinds"), [("trim", ["summary", "injected"]), ("clear", ["summary"])])
async def test_written_summaries_and_injections_are_announced(world, reason, kinds):
    events: list[tuple] = []

    async def on_written(session_id, kind, text, path):
        events.append((session_id, kind, text, path))

    world.daily.on_written = world.summarizer.on_written = on_written
    await world.seed(A, "the budget is 500", "ok, 500")
    world.llm.enqueue("- Budget: 500")
    with time_machine.travel(NOON, tick=False):
        await world.summarizer.submit(A.session_id, reason, 1, 2)
        assert await world.summarizer.drain(2)
    expected = {"summary": (A.session_id, "summary", "- Budget: 500", day_file(world.tmp_path, A)),
                "injected": (A.session_id, "injected", "- Budget: 500", None)}
    assert events == [expected[k] for k in kinds]


async def test_a_none_summary_announces_nothing(world):
    events: list[tuple] = []
    world.daily.on_written = world.summarizer.on_written = lambda *args: events.append(args)
    await world.seed(A, "hi", "hello!")
    world.llm.enqueue("none")
    assert await world.summarizer.summarize_now(A.session_id, "trim", 1, 2) is None
    assert events == []

"""Tests for summaries/summarizer.py's promise: facts survive bad summaries, every request fits the summary model's
window, sections never repeat, and a cleared context starts empty (incl. the overflow-clear race)."""

from __future__ import annotations

import asyncio
import logging

import pytest
import time_machine

from core.errors import ContextOverflowError
from core.llm import LLMResponse
from summaries.parts import rough_tokens
from summaries.text import MERGE_REQUEST, SUMMARY_SYSTEM_PROMPT
from tests.fakes.fake_llm import FakeLLM
from tests.summaries.test_summarizer import NOON, A, B, World, day_file, turn

ENGLISH = [
    "Hi! My name is Alice Moreau and I live in Lisbon.",
    "My cat is called Tom and he is 7 years old.",
    "My sister Clara arrives on 2026-12-03 at 14:30.",
    "Please remember my budget is 450 EUR, mail me at alice@example.org.",
]
CHINESE = [
    "我叫王小明，住在杭州。",
    "我的猫叫「豆豆」，今年3岁。",
    "我的预算是800元，下周三10月15日去北京。",
]


async def seed_turns(world: World, texts: list[str]) -> int:
    """Store each text as a user message with a short reply; return the last seq."""
    seqs = await world.seed(A, *[x for t in texts for x in (t, "Noted.")])
    return seqs[-1]


@pytest.fixture
async def world(tmp_path):
    w = await World(tmp_path, FakeLLM()).open()
    yield w
    await w.close()


async def test_a_summary_that_drops_facts_gets_the_users_words_back_in_both_languages(world, caplog):
    caplog.set_level(logging.INFO, logger="summaries.summarizer")
    last = await seed_turns(world, ENGLISH + CHINESE)
    # The model keeps the English name and city and the Chinese name, and loses the rest.
    world.llm.enqueue("- Alice Moreau lives in Lisbon\n- 王小明住在杭州")
    with time_machine.travel(NOON, tick=False):
        await world.summarizer.summarize_now(A.session_id, "trim", 1, last)
    text = day_file(world.tmp_path, A).read_text(encoding="utf-8")
    section = text.split("## Trimmed Context (14:05)\n\n", 1)[1]
    assert section == (
        "- Alice Moreau lives in Lisbon\n"
        "- 王小明住在杭州\n"
        "- (kept) My cat is called Tom and he is 7 years old.\n"
        "- (kept) My sister Clara arrives on 2026-12-03 at 14:30.\n"
        "- (kept) Please remember my budget is 450 EUR, mail me at alice@example.org.\n"
        "- (kept) 我的猫叫「豆豆」，今年3岁。\n"
        "- (kept) 我的预算是800元，下周三10月15日去北京。\n")
    record = await world.store.sessions.get(A.session_id)
    assert record.summary == section.rstrip("\n")  # the injected summary keeps them too
    checked = world.summarizer.checks[A.session_id]
    assert (checked.kept, checked.fallback) == (5, False)
    assert 0 < checked.found < checked.total
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("summary check"))
    assert line == (f"summary check, job 1 (session {A.session_id}): the summary kept {checked.found} of "
                    f"{checked.total} facts ({checked.share:.0%}); 5 line(s) kept verbatim")
    assert "Lisbon" not in line and "豆豆" not in line  # no message bodies in the log


async def test_an_invented_summary_keeps_every_users_sentence_with_a_fact(world):
    last = await seed_turns(world, ENGLISH[:2])
    world.llm.enqueue("- I'm going to the party tomorrow")
    summary = await world.summarizer.summarize_now(A.session_id, "trim", 1, last)
    assert summary == ("- I'm going to the party tomorrow\n"
                       "- (kept) My name is Alice Moreau and I live in Lisbon.\n"
                       "- (kept) My cat is called Tom and he is 7 years old.")
    assert world.summarizer.checks[A.session_id].found == 0


async def test_none_with_facts_still_writes_the_kept_lines(world):
    last = await seed_turns(world, ["ok", "The door code is 4711."])
    world.llm.enqueue("none")
    assert await world.summarizer.summarize_now(A.session_id, "trim", 1, last) == "- (kept) The door code is 4711."


async def test_a_summary_keeping_everything_adds_nothing(world):
    last = await seed_turns(world, ["My cat is called Tom and he is 7 years old."])
    world.llm.enqueue("- The user's cat Tom is 7 years old")
    assert await world.summarizer.summarize_now(A.session_id, "trim", 1, last) == "- The user's cat Tom is 7 years old"
    checked = world.summarizer.checks[A.session_id]
    assert (checked.share, checked.kept) == (1.0, 0)


async def test_no_bullet_is_written_twice_across_sections(world):
    await seed_turns(world, ["We chose the blue plan."])
    world.llm.enqueue("- Blue plan chosen")
    with time_machine.travel(NOON, tick=False):
        await world.summarizer.summarize_now(A.session_id, "trim", 1, 2)
        await world.seed(A, "And the red cup.", "Noted.")
        # a model that repeats the earlier bullet: the section keeps only what is new
        world.llm.enqueue("- Blue plan chosen\n- Red cup chosen")
        await world.summarizer.summarize_now(A.session_id, "trim", 3, 4)
    assert day_file(world.tmp_path, A).read_text(encoding="utf-8") == (
        "# Daily Memory: 2026-03-01\n\n## Trimmed Context (14:05)\n\n- Blue plan chosen\n"
        "\n## Trimmed Context (14:05)\n\n- Red cup chosen\n")
    assert (await world.store.sessions.get(A.session_id)).summary == "- Blue plan chosen\n- Red cup chosen"


async def test_the_rolling_summary_is_capped_to_a_tenth_of_the_main_window_newest_kept(tmp_path):
    w = await World(tmp_path, FakeLLM(), model="local", model_context_window=1000).open()
    w.summarizer.window = lambda model: 1000  # the cap is 100 tokens
    try:
        for i in range(6):
            await w.seed(A, f"step {'x' * 3}", "ok")
            w.llm.enqueue(f"- {'word ' * 20}{i}")
            await w.summarizer.summarize_now(A.session_id, "trim", 2 * i + 1, 2 * i + 2)
        summary = (await w.store.sessions.get(A.session_id)).summary
        assert sum(rough_tokens(line) + 1 for line in summary.splitlines()) <= 100
        assert summary.splitlines()[-1].endswith(" 5")
        assert len(summary.splitlines()) < 6
    finally:
        await w.close()


class WindowModel(FakeLLM):
    """A summary model with a window: a request larger than it is rejected as a provider would."""

    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = window
        self.sizes: list[tuple[int, int]] = []

    async def complete(self, messages, *, tools=None, model=None, temperature=None, max_tokens=None,
                       retry=None):
        size = sum(rough_tokens(m["content"]) for m in messages) + 16
        self.sizes.append((size, max_tokens))
        if size + (max_tokens or 0) > self.window:
            raise ContextOverflowError(f"request ({size} tokens) exceeds the available context size "
                                       f"({self.window} tokens)", status=400)
        merging = MERGE_REQUEST in messages[1]["content"]
        users = [line[6:] for line in messages[1]["content"].splitlines() if line.startswith("User: ")]
        if merging:
            return LLMResponse(content="\n".join(line for line in messages[1]["content"].splitlines()
                                                 if line.startswith("- ")))
        return LLMResponse(content="\n".join(f"- said {u.split()[0]}" for u in users) or "none")


async def test_every_summary_request_fits_a_small_window_with_its_answer_cap(tmp_path):
    model = WindowModel(window=1024)
    w = await World(tmp_path, model).open()
    w.summarizer.window = lambda name: 1024
    try:
        texts = [f"m{i:02d} " + "harbour project costs and dates " * 12 for i in range(40)]
        last = await seed_turns(w, texts)
        summary = await w.summarizer.summarize_now(A.session_id, "trim", 1, last)
        assert model.sizes and all(size + cap <= 1024 for size, cap in model.sizes)
        assert len(model.sizes) > 2  # parts, then merges
        assert [line for line in summary.splitlines() if line.startswith("- said")] == \
            [f"- said m{i:02d}" for i in range(40)]
        assert (await w.job_rows()) == [("trim", "done", len(model.sizes))]
    finally:
        await w.close()


async def test_an_overflow_from_the_summariser_splits_further_and_never_repeats_a_request(tmp_path):
    model = WindowModel(window=2048)
    w = await World(tmp_path, model).open()
    w.summarizer.window = lambda name: 8000  # the configured window is wrong: the server's is a quarter
    try:
        last = await seed_turns(w, [f"m{i:02d} " + "a long line about the budget " * 30 for i in range(20)])
        seen: list[str] = []
        original = model.complete

        async def recording(messages, **kw):
            seen.append(messages[1]["content"])
            return await original(messages, **kw)

        model.complete = recording
        summary = await w.summarizer.summarize_now(A.session_id, "trim", 1, last)
        assert "(fallback)" not in summary
        assert len(seen) == len(set(seen))  # the same request is never sent twice
        assert [line for line in summary.splitlines() if line.startswith("- said")] == \
            [f"- said m{i:02d}" for i in range(20)]
    finally:
        await w.close()


async def test_an_overflow_that_clears_the_context_keeps_the_late_summary_out_of_it(tmp_path):
    """DESIGN §2.3 step 4: the overflow job finishes after the clear; it goes to memory only."""
    w = await World(tmp_path, FakeLLM(latency=0.2)).open()
    try:
        chat = FakeLLM()
        agent = w.agent(chat)
        state = await w.sessions.get(A)
        await turn(agent, state, "my name is Alice")
        for _ in range(4):  # the first try and the three overflow stages
            chat.enqueue(ContextOverflowError("maximum context length exceeded", status=400))
        w.llm.enqueue("- The user is Alice")
        with time_machine.travel(NOON, tick=False):
            result = await turn(agent, state, "a message that is far too long")
            assert result.cleared
            assert w.summarizer.pending() == 1  # the overflow job is still running
            assert await w.summarizer.drain(5)
        assert (state.summary, state.messages) == (None, [])
        record = await w.store.sessions.get(A.session_id)
        assert (record.summary, record.summarized_through_seq) == (None, 3)
        assert day_file(w.tmp_path, A).read_text(encoding="utf-8") == (
            "# Daily Memory: 2026-03-01\n\n## Context Overflow Recovery (14:05)\n\n- The user is Alice\n")
        # the next turn starts from an empty context
        await turn(agent, state, "hello again")
        assert chat.history[-1].messages[1:] == [{"role": "user", "content": "hello again"}]
    finally:
        await w.close()


async def test_a_clear_during_the_injection_write_resets_the_stored_summary(tmp_path):
    w = await World(tmp_path, FakeLLM()).open()
    try:
        state = await w.sessions.get(A)
        await w.seed(A, "plan", "ok")
        w.llm.enqueue("- a plan")
        store_set = w.store.sessions.set_summary

        async def slow_set(*args, **kw):
            await store_set(*args, **kw)
            if args[1] is not None:  # the injection's write: the context is cleared meanwhile
                w.summarizer.note_cleared(A.session_id)
                await state.clear()

        w.store.sessions.set_summary = slow_set
        await w.summarizer.summarize_now(A.session_id, "trim", 1, 2)
        assert (await w.store.sessions.get(A.session_id)).summary is None
        assert state.summary is None
    finally:
        await w.close()


async def test_settled_is_done_when_the_sessions_queued_jobs_are(world):
    assert world.summarizer.settled(A.session_id) is None
    await world.seed(A, "a", "b")
    world.llm.latency = 0.05
    await world.summarizer.submit(A.session_id, "trim", 1, 2)
    settled = world.summarizer.settled(A.session_id)
    assert settled is not None and not settled.done()
    await asyncio.wait_for(settled, 2)
    assert world.summarizer.settled(A.session_id) is None


def test_the_prompt_no_longer_mentions_an_earlier_summary():
    assert "earlier summary" not in SUMMARY_SYSTEM_PROMPT.lower()


# --- the first reply after a restart or an eviction sees every turn after the boundary -----------------

FIRST = ["My name is Alice Moreau.", "My cat is called Tom.", "I live in Lisbon.", "We meet at 14:30.",
         "one more thing", "and another", "the last one"]


async def restart_world(tmp_path, summary_llm: FakeLLM) -> World:
    """A new process over the same folder whose first message arrived while it was down."""
    w = await World(tmp_path, summary_llm, agent_max_context_turns=20).open()
    await w.store.journal.record_incoming("telegram", "new-1", A.session_id, {}, {"role": "user",
                                                                                  "content": "who am I?"})
    return w


async def first_reply(w: World, chat: FakeLLM, wait: float = 5.0):
    """What run_agent does for a message stored at intake: load, add it, run the turn."""
    agent = w.agent(chat)
    agent.first_reply_wait = wait
    state = await w.sessions.get(A)
    (new,) = await w.store.sessions.load_messages(A.session_id, 15, 15)
    async with state.lock:
        await state.resume(new.seq, new.message)
        await agent.run_turn(state)
    return state


async def test_the_first_reply_after_a_restart_waits_for_the_summary_of_the_skipped_turns(tmp_path):
    w = await World(tmp_path, FakeLLM()).open()
    await seed_turns(w, FIRST)  # seqs 1-14, no summary yet
    await w.close()
    w = await restart_world(tmp_path, FakeLLM(latency=0.3).enqueue("- Alice Moreau, cat Tom, Lisbon, 14:30"))
    try:
        chat = FakeLLM()
        await first_reply(w, chat)
        # the last 3 turns before the new message, and the summary of the 4 before them, which it waited for
        sent = chat.history[0].messages
        assert sent[1]["content"].startswith("[System: Previous conversation summary — 4 turns were compacted]\n\n"
                                             "- Alice Moreau, cat Tom, Lisbon, 14:30\n\n")
        assert sent[1]["content"].endswith("---\n\none more thing")
        assert [m["content"] for m in sent[2:]] == ["Noted.", "and another", "Noted.", "the last one", "Noted.",
                                                   "who am I?"]
    finally:
        await w.close()


async def test_the_first_reply_waits_only_so_long_then_answers_and_the_summary_follows(tmp_path, caplog):
    w = await World(tmp_path, FakeLLM()).open()
    await seed_turns(w, FIRST)
    await w.close()
    w = await restart_world(tmp_path, FakeLLM(latency=0.5).enqueue("- late"))
    try:
        chat = FakeLLM()
        state = await first_reply(w, chat, wait=0.05)
        assert chat.history[0].messages[1] == {"role": "user", "content": "one more thing"}
        assert "is not ready after" in caplog.text
        assert await w.summarizer.drain(5)
        assert state.summary.startswith("- late")
    finally:
        await w.close()


async def test_the_first_reply_after_an_eviction_sees_the_skipped_turns_summary(tmp_path, monkeypatch):
    import agent.sessions as session_module

    w = await World(tmp_path, FakeLLM(latency=0.2), agent_max_context_turns=20).open()
    try:
        chat = FakeLLM()
        agent = w.agent(chat)
        state = await w.sessions.get(A)
        for text in FIRST:
            await turn(agent, state, text)
        # the context sits idle and is dropped from memory
        monkeypatch.setattr(session_module, "SWEEP_INTERVAL", 0.0)
        w.sessions.max_idle = 0.0
        await asyncio.sleep(0.01)
        await w.sessions.get(B)
        assert w.sessions.peek(A.session_id) is None
        w.llm.enqueue("- Alice Moreau, cat Tom, Lisbon, 14:30")
        await w.store.journal.record_incoming("telegram", "new-1", A.session_id, {},
                                              {"role": "user", "content": "who am I?"})
        await first_reply(w, chat)
        sent = chat.history[-1].messages
        assert sent[1]["content"].startswith("[System: Previous conversation summary — 4 turns were compacted]\n\n"
                                             "- Alice Moreau, cat Tom, Lisbon, 14:30\n\n")
        assert sent[-1] == {"role": "user", "content": "who am I?"}
    finally:
        await w.close()

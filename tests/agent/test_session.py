"""Tests for agent/sessions.py and agent/session.py: restart recovery (counts, text only, summary
re-injection), eviction, and the session operations behind /context clear and /compact. Real store, on SQLite
and PostgreSQL."""

from __future__ import annotations

import pytest

from agent.sessions import CompactResult, LoggingDropSink, SessionManager
from config.settings import Config, ConfigHolder
from core.records import SessionInfo

A = SessionInfo(session_id="telegram:1", channel="telegram", chat_id="1", user_id="1")
B = SessionInfo(session_id="telegram:2", channel="telegram", chat_id="2", user_id="2")
CALL = [{"id": "c1", "type": "function", "function": {"name": "web_fetch", "arguments": "{}"}}]


class Sink(LoggingDropSink):
    """Records what leaves the context; summarises now to a fixed text."""

    def __init__(self) -> None:
        self.submitted: list[tuple[str, str, int, int]] = []

    async def submit(self, session_id: str, reason: str, from_seq: int, through_seq: int) -> None:
        self.submitted.append((session_id, reason, from_seq, through_seq))


def tool_turn(i: int) -> list[dict]:
    """One turn of four messages: question, tool call, tool result, answer."""
    return [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": None, "tool_calls": CALL},
            {"role": "tool", "tool_call_id": "c1", "content": f"result {i}"},
            {"role": "assistant", "content": f"a{i}"}]


async def seed(store, info: SessionInfo, turns: int) -> None:
    await store.sessions.ensure(info)
    await store.sessions.append(info.session_id, [m for i in range(1, turns + 1) for m in tool_turn(i)])


def manager(tmp_path, store, sink=None, **kw) -> SessionManager:
    settings = {k: kw.pop(k) for k in list(kw) if k.startswith("agent_")}
    return SessionManager(store, ConfigHolder(Config(data_dir=str(tmp_path), **settings)), sink or Sink(), **kw)


@pytest.mark.parametrize(("max_turns", "restored"), [(20, 3), (24, 4)])
async def test_restore_brings_back_the_last_turns_as_text_only(tmp_path, store, max_turns, restored):
    await seed(store, A, 6)  # seqs 1-24, turn i at 4i-3 .. 4i
    sink = Sink()
    state = await manager(tmp_path, store, sink, agent_max_context_turns=max_turns).get(A)
    first = 6 - restored + 1
    assert [(m.seq, m.message) for m in state.messages] == [
        pair for i in range(first, 7) for pair in ((4 * i - 3, {"role": "user", "content": f"q{i}"}),
                                                   (4 * i, {"role": "assistant", "content": f"a{i}"}))]
    assert state.context_start_seq == 4 * first - 3
    assert (await store.sessions.get(A.session_id)).context_start_seq == 4 * first - 3
    # the older turns after the boundary go to the summariser
    assert sink.submitted == [(A.session_id, "restore", 1, 4 * first - 4)]


async def test_restore_reinjects_the_summary_and_skips_what_was_summarised(tmp_path, store):
    await seed(store, A, 6)
    await store.sessions.set_summary(A.session_id, "- earlier", 2, through_seq=8)
    sink = Sink()
    state = await manager(tmp_path, store, sink).get(A)
    assert (state.summary, state.summary_turns, state.summarized_through_seq) == ("- earlier", 2, 8)
    assert sink.submitted == [(A.session_id, "restore", 9, 12)]  # turns 3 (9-12) only; 4-6 are restored


async def test_a_short_or_new_session_sends_nothing_to_the_summariser(tmp_path, store):
    await seed(store, A, 2)
    sink = Sink()
    sessions = manager(tmp_path, store, sink)
    assert [m.seq for m in (await sessions.get(A)).messages] == [1, 4, 5, 8]
    assert (await sessions.get(B)).messages == []
    assert sink.submitted == []


async def test_least_recently_used_unlocked_contexts_are_evicted(tmp_path, store):
    sessions = manager(tmp_path, store, max_cached=1)
    a = await sessions.get(A)
    async with a.lock:  # a running turn keeps its context
        await sessions.get(B)
        assert A.session_id in sessions and B.session_id in sessions
    await sessions.get(A)  # now B is the least recently used
    c = SessionInfo(session_id="telegram:3", channel="telegram", chat_id="3")
    await sessions.get(c)
    assert sessions.peek(B.session_id) is None and A.session_id not in sessions
    assert await sessions.get(A) is not a  # rebuilt from the store
    sessions.forget(A.session_id)
    assert sessions.peek(A.session_id) is None


async def test_clear_hands_unsummarised_turns_to_the_sink_and_empties_the_context(tmp_path, store):
    await seed(store, A, 2)
    await store.sessions.set_summary(A.session_id, "- s", 1, through_seq=4)
    sink = Sink()
    sessions = manager(tmp_path, store, sink)
    assert await sessions.clear(A) == 1
    assert sink.submitted == [(A.session_id, "clear", 5, 8)]
    state = sessions.peek(A.session_id)
    assert (state.messages, state.context_start_seq, state.summary) == ([], 9, None)
    record = await store.sessions.get(A.session_id)
    assert (record.context_start_seq, record.summary) == (9, None)
    assert await sessions.clear(A) == 0  # nothing new


async def test_compact_keeps_the_last_turn(tmp_path, store):
    await seed(store, A, 3)
    sink = Sink()
    sessions = manager(tmp_path, store, sink)
    assert await sessions.compact(A) == CompactResult(turns=2, background=True)  # no summarize_now
    assert sink.submitted == [(A.session_id, "compact", 1, 8)]
    assert [m.seq for m in sessions.peek(A.session_id).messages] == [9, 12]
    assert (await store.sessions.get(A.session_id)).context_start_seq == 9
    assert await sessions.compact(A) == CompactResult(turns=0)


# --- the new message is not one of the restored turns; the first reply sees everything -------------------

async def arrive(store, info: SessionInfo, text: str, n: int) -> int:
    """A message stored at intake and still waiting for its answer (its inbox row pending); its seq."""
    _inbox, seq = await store.journal.record_incoming(info.channel, f"m{n}", info.session_id, {"text": text},
                                              {"role": "user", "content": text})
    return seq


@pytest.mark.parametrize(("max_turns", "restored"), [(20, 3), (24, 4), (30, 5)])
async def test_restore_counts_the_turns_before_the_new_message(tmp_path, store, max_turns, restored):
    await seed(store, A, 8)  # seqs 1-32
    new = await arrive(store, A, "the new message", 1)
    later = await arrive(store, A, "sent right after", 2)
    assert (new, later) == (33, 34)
    sink = Sink()
    state = await manager(tmp_path, store, sink, agent_max_context_turns=max_turns).get(A)
    first = 8 - restored + 1
    # exactly `restored` turns, all before the new message; the waiting messages are added by their turns
    assert [m.message["content"] for m in state.messages] == [x for i in range(first, 9) for x in (f"q{i}", f"a{i}")]
    assert state.context_start_seq == 4 * first - 3
    assert sink.submitted == [(A.session_id, "restore", 1, 4 * first - 4)]


async def test_restore_with_only_the_new_message_restores_nothing_and_starts_at_it(tmp_path, store):
    await store.sessions.ensure(A)
    new = await arrive(store, A, "first ever", 1)
    sink = Sink()
    state = await manager(tmp_path, store, sink).get(A)
    assert (state.messages, state.context_start_seq, sink.submitted) == ([], new, [])


"""Tests of agent/context.py: every rule of DESIGN §2.1 and §2.3 with exact numbers."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from agent.context import (
    BACKGROUND_HEADER,
    MISSING_RESULT,
    Budget,
    PrepareResult,
    cut_text,
    fit_background,
    history_budget,
    injection_text,
    overflow_trim,
    prepare_context,
    render_messages,
    repair_pairing,
)
from agent.tokens import TokenCounter
from core.turns import CtxMessage, group_turns

BIG = 10**9


class CharCounter(TokenCounter):
    """A TokenCounter with one token per character, which records how often it counts a message."""

    def __init__(self) -> None:
        self.model = "fake"
        self.encoding_name = "chars"
        self.exact = True
        self._encoding = None
        self.calls = 0

    def count_text(self, text: str) -> int:
        return len(text)

    def count_message(self, message: dict[str, Any]) -> int:
        self.calls += 1
        return super().count_message(message)


# Message builders. Sizes with CharCounter: user/assistant text of n chars = n + 4 tokens.
def user(seq: int, text: str) -> CtxMessage:
    return CtxMessage(seq, {"role": "user", "content": text})


def reply(seq: int, text: str) -> CtxMessage:
    return CtxMessage(seq, {"role": "assistant", "content": text})


def call(seq: int, *ids: str, arguments: str = "{}") -> CtxMessage:
    calls = [{"id": i, "type": "function", "function": {"name": "search", "arguments": arguments}} for i in ids]
    return CtxMessage(seq, {"role": "assistant", "content": None, "tool_calls": calls})


def result(seq: int, call_id: str, content: str) -> CtxMessage:
    return CtxMessage(seq, {"role": "tool", "tool_call_id": call_id, "content": content})


def tool_turn(seq: int, result_chars: int = 1000, text_chars: int = 100) -> list[CtxMessage]:
    """A turn with one tool round: user, call, result, final reply (4 messages, seqs seq..seq+3)."""
    cid = f"c{seq}"
    return [
        user(seq, "u" * text_chars),
        call(seq + 1, cid),
        result(seq + 2, cid, "r" * result_chars),
        reply(seq + 3, "a" * text_chars),
    ]


def text_turn(seq: int, chars: int = 46) -> list[CtxMessage]:
    """A text-only turn: user and reply, each chars + 4 tokens."""
    return [user(seq, "u" * chars), reply(seq + 1, "a" * chars)]


def history_of_tool_turns(n_hist: int, current_chars: int = 100) -> list[CtxMessage]:
    """n_hist tool turns (1230 tokens each with CharCounter) then a current turn of one user message."""
    msgs: list[CtxMessage] = []
    for i in range(n_hist):
        msgs += tool_turn(10 * (i + 1))
    msgs.append(user(1000, "q" * current_chars))
    return msgs


def seqs(r: PrepareResult) -> list[int]:
    return [m.seq for m in r.messages]


def snapshot(msgs: list[CtxMessage]) -> list[tuple[int, int, bool, dict[str, Any]]]:
    return [(m.seq, id(m.message), m.truncated, copy.deepcopy(m.message)) for m in msgs]


def assert_pairing_ok(messages: list[dict[str, Any]]) -> None:
    """Every tool call is directly followed by its results, and no tool result is orphaned."""
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m["role"] != "tool", f"orphan tool result at {i}"
        i += 1
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = {c["id"] for c in m["tool_calls"]}
            got = set()
            while i < len(messages) and messages[i]["role"] == "tool":
                got.add(messages[i]["tool_call_id"])
                i += 1
            assert got == ids


def test_tool_turn_size() -> None:
    counter = CharCounter()
    assert sum(counter.count_message(m.message) for m in tool_turn(10)) == 104 + 15 + 1007 + 104 == 1230


# ---------------------------------------------------------------- turns


# ---------------------------------------------------------------- step 1: historical tool results


def test_historical_tool_result_20000_kept_20001_cut() -> None:
    long_content = "h" * 16_000 + "m" + "t" * 4_000  # 20,001 characters
    msgs = [
        user(1, "look"),
        call(2, "a", "b"),
        result(3, "a", "x" * 20_000),
        result(4, "b", long_content),
        reply(5, "done"),
        user(6, "again"),
        call(7, "c"),
        result(8, "c", "y" * 20_001),  # the current turn: untouched
    ]
    before = snapshot(msgs)
    counter = CharCounter()
    r = prepare_context(msgs, Budget(max_turns=20, max_tokens=BIG), counter)
    assert seqs(r) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert r.messages[2] is msgs[2]  # exactly 20,000: untouched
    cut = r.messages[3]
    assert cut is not msgs[3] and cut.truncated and cut.seq == 4
    assert cut.message["content"] == (
        "h" * 16_000 + "\n\n[Tool result truncated: kept 20,000 of 20,001 characters]\n\n" + "t" * 4_000
    )
    assert cut.message["tool_call_id"] == "b"
    assert r.messages[7] is msgs[7]
    assert r.messages[7].message["content"] == "y" * 20_001
    assert r.actions == ["truncated 1 tool result"]
    assert r.dropped == []
    assert r.tokens == sum(counter.count_message(m.message) for m in r.messages)
    assert snapshot(msgs) == before  # the stored originals are never changed
    assert msgs[3].message["content"] == long_content


def test_historical_truncation_is_idempotent() -> None:
    msgs = [user(1, "q"), call(2, "a"), result(3, "a", "z" * 30_000), reply(4, "ok"), user(5, "next")]
    counter = CharCounter()
    first = prepare_context(msgs, Budget(20, BIG), counter)
    cut = first.messages[2]
    second = prepare_context(first.messages, Budget(20, BIG), counter)
    assert second.messages[2] is cut
    assert second.actions == []


def test_tool_result_becomes_historical_when_next_turn_starts() -> None:
    current = [user(1, "q"), call(2, "a"), result(3, "a", "z" * 25_000)]
    counter = CharCounter()
    r1 = prepare_context(current, Budget(20, BIG), counter)
    assert r1.messages[2].message["content"] == "z" * 25_000
    r2 = prepare_context([*r1.messages, reply(4, "ok"), user(5, "next")], Budget(20, BIG), counter)
    content = r2.messages[2].message["content"]
    assert content.startswith("z" * 16_000 + "\n\n[Tool result truncated: kept 20,000 of 25,000 characters]")


# ---------------------------------------------------------------- step 2: turn budget


def test_turn_budget_at_limit_keeps_everything() -> None:
    msgs = [m for i in range(4) for m in text_turn(10 * (i + 1))]
    r = prepare_context(msgs, Budget(max_turns=4, max_tokens=BIG), CharCounter())
    assert seqs(r) == [10, 11, 20, 21, 30, 31, 40, 41]
    assert r.dropped == [] and r.actions == []


def test_turn_budget_one_over_drops_half() -> None:
    msgs = [m for i in range(5) for m in text_turn(10 * (i + 1))]
    r = prepare_context(msgs, Budget(max_turns=4, max_tokens=BIG), CharCounter())
    assert seqs(r) == [30, 31, 40, 41, 50, 51]  # 5 // 2 = 2 dropped
    assert [t.first_seq for t in r.dropped] == [10, 20]
    assert r.actions == ["dropped 2 turns (turn budget)"]


def test_turn_budget_drops_half_only_once() -> None:
    msgs = [m for i in range(9) for m in text_turn(10 * (i + 1))]
    r = prepare_context(msgs, Budget(max_turns=4, max_tokens=BIG), CharCounter())
    assert len(group_turns(r.messages)) == 5  # 9 // 2 = 4 dropped, 5 left although 5 > 4
    assert [t.first_seq for t in r.dropped] == [10, 20, 30, 40]


# ---------------------------------------------------------------- step 3: token budget


def test_four_turns_compressed_to_text() -> None:
    msgs = history_of_tool_turns(3)  # 3 * 1230 + 104 = 3794 tokens
    r = prepare_context(msgs, Budget(20, 1000), CharCounter())
    assert seqs(r) == [10, 13, 20, 23, 30, 33, 1000]  # first user text + last reply, original seqs
    assert r.messages[0] is msgs[0] and r.messages[1] is msgs[3]
    assert r.dropped == []  # compressed turns are not dropped
    assert r.actions == ["compressed 3 turns to text"]
    assert r.tokens == 3 * 208 + 104 == 728


def test_compression_keeps_the_current_turn_chain() -> None:
    msgs = history_of_tool_turns(2) + [call(1001, "cur"), result(1002, "cur", "r" * 500)]
    r = prepare_context(msgs, Budget(20, 1500), CharCounter())
    assert seqs(r) == [10, 13, 20, 23, 1000, 1001, 1002]
    assert r.messages[-1] is msgs[-1]


def test_three_compressed_turns_that_do_not_fit_drop_oldest_one_at_a_time() -> None:
    msgs = history_of_tool_turns(3)  # compressed: 3 * 208 + 104 = 728
    r = prepare_context(msgs, Budget(20, 400), CharCounter())
    assert seqs(r) == [30, 33, 1000]  # 728 -> 520 -> 312
    assert r.tokens == 312
    assert [t.first_seq for t in r.dropped] == [10, 20]
    # dropped turns go to the summariser whole, with their tool chains
    assert [[m.seq for m in t.messages] for t in r.dropped] == [[10, 11, 12, 13], [20, 21, 22, 23]]
    assert r.actions == ["compressed 3 turns to text", "dropped 2 turns (token budget)"]


def test_drop_down_to_the_current_turn() -> None:
    msgs = history_of_tool_turns(3)
    r = prepare_context(msgs, Budget(20, 150), CharCounter())
    assert seqs(r) == [1000]
    assert len(r.dropped) == 3
    assert r.tokens == 104


def test_five_turns_drop_half_without_compressing() -> None:
    msgs = history_of_tool_turns(4)  # 4 * 1230 + 104 = 5024
    r = prepare_context(msgs, Budget(20, 3000), CharCounter())
    assert [t.first_seq for t in r.dropped] == [10, 20]  # 5 // 2
    assert seqs(r) == [30, 31, 32, 33, 40, 41, 42, 43, 1000]  # tool chains intact
    assert r.actions == ["dropped 2 turns (token budget)"]
    assert r.tokens == 2 * 1230 + 104


def test_five_turns_halved_then_compressed() -> None:
    msgs = history_of_tool_turns(4)
    r = prepare_context(msgs, Budget(20, 1000), CharCounter())
    assert [t.first_seq for t in r.dropped] == [10, 20]
    assert seqs(r) == [30, 33, 40, 43, 1000]
    assert r.actions == ["dropped 2 turns (token budget)", "compressed 2 turns to text"]


def test_repeated_halving_until_it_fits() -> None:
    msgs = [m for i in range(15) for m in text_turn(10 * (i + 1))] + [user(1000, "q" * 96)]  # 16 turns x 100
    r = prepare_context(msgs, Budget(100, 450), CharCounter())  # 1600 -> 800 -> 400
    assert len(r.dropped) == 12
    assert [t.first_seq for t in r.dropped] == [10 * (i + 1) for i in range(12)]
    assert seqs(r) == [130, 131, 140, 141, 150, 151, 1000]
    assert r.actions == ["dropped 12 turns (token budget)"]
    assert r.tokens == 400


def test_text_only_turns_that_cannot_compress_are_dropped() -> None:
    # 16 -> 8 -> 4 turns (400 tokens); compressing text-only turns does not shrink, so drop one at a time.
    msgs = [m for i in range(15) for m in text_turn(10 * (i + 1))] + [user(1000, "q" * 96)]
    r = prepare_context(msgs, Budget(100, 250), CharCounter())
    assert len(r.dropped) == 14
    assert seqs(r) == [150, 151, 1000]
    assert r.tokens == 200
    assert r.actions == ["dropped 14 turns (token budget)"]


def test_turn_and_token_budgets_combined_return_dropped_oldest_first() -> None:
    msgs = [m for i in range(7) for m in text_turn(10 * (i + 1))] + [user(1000, "q" * 96)]  # 8 turns x 100
    r = prepare_context(msgs, Budget(max_turns=6, max_tokens=250), CharCounter())
    # turn budget drops 4, token budget: 4 turns (400), drop one at a time -> 2 turns (200)
    assert [t.first_seq for t in r.dropped] == [10, 20, 30, 40, 50, 60]
    assert r.actions == ["dropped 4 turns (turn budget)", "dropped 2 turns (token budget)"]
    assert seqs(r) == [70, 71, 1000]


def test_tool_chain_never_split() -> None:
    msgs: list[CtxMessage] = []
    for i in range(6):
        s = 100 * (i + 1)
        msgs += [
            user(s, "u" * 50),
            call(s + 1, f"a{s}", f"b{s}"),
            result(s + 2, f"a{s}", "r" * 300),
            result(s + 3, f"b{s}", "r" * 300),
            call(s + 4, f"c{s}"),
            result(s + 5, f"c{s}", "r" * 300),
            reply(s + 6, "done"),
        ]
    msgs += [user(1000, "now"), call(1001, "x", "y"), result(1002, "x", "1"), result(1003, "y", "2")]
    for max_tokens in (5000, 3000, 1500, 600, 200, 50):
        r = prepare_context(msgs, Budget(20, max_tokens), CharCounter())
        assert_pairing_ok([m.message for m in r.messages])
        assert seqs(r)[-4:] == [1000, 1001, 1002, 1003]  # the current turn is never dropped
        for t in r.dropped:
            assert t.messages[0].message["role"] == "user"
            assert_pairing_ok([m.message for m in t.messages])


def test_current_user_text_cut_as_last_resort() -> None:
    text = "H" * 25_000 + "T" * 25_000
    msgs = [*tool_turn(10), user(1000, text)]
    counter = CharCounter()
    r = prepare_context(msgs, Budget(20, 5000), counter)
    assert [t.first_seq for t in r.dropped] == [10]
    assert len(r.messages) == 1 and r.messages[0].seq == 1000
    content = r.messages[0].message["content"]
    match = re.search(r"\n\n\[Message truncated: kept ([\d,]+) of 50,000 characters\]\n\n", content)
    assert match is not None
    kept = int(match.group(1).replace(",", ""))
    assert 1_000 <= kept < 5_000
    assert content.startswith("H" * (kept - kept // 5)) and content.endswith("T" * (kept // 5))
    assert r.tokens == counter.count_message(r.messages[0].message) <= 5000
    assert r.actions[-1] == f"cut the current user message to {kept:,} of 50,000 characters"
    assert msgs[-1].message["content"] == text


def test_current_user_text_cut_has_a_floor() -> None:
    msgs = [user(1, "x" * 50_000)]
    r = prepare_context(msgs, Budget(20, 300), CharCounter())
    assert "[Message truncated: kept 1,000 of 50,000 characters]" in r.messages[0].message["content"]
    assert r.tokens > 300
    assert r.actions[-1].startswith("the current turn alone exceeds the budget")


def test_current_user_text_not_cut_when_its_tool_chain_alone_is_too_big() -> None:
    msgs = [user(1, "q" * 5_000), call(2, "a"), result(3, "a", "r" * 50_000)]
    r = prepare_context(msgs, Budget(20, 10_000), CharCounter())
    assert r.messages == msgs and all(a is b for a, b in zip(r.messages, msgs, strict=True))
    assert r.actions == ["the current turn alone exceeds the budget (55024 > 10000 tokens)"]


def test_no_input_mutation() -> None:
    msgs = history_of_tool_turns(6)
    msgs[2] = result(12, "c10", "big" * 10_000)
    msgs.append(user(2000, "x" * 9_000))
    before = snapshot(msgs)
    ids = [id(m) for m in msgs]
    r = prepare_context(msgs, Budget(3, 2000), CharCounter())
    overflow_trim(msgs, 2, CharCounter(), char_limit=100)
    render_messages("sys", msgs, "summary", 3)
    assert snapshot(msgs) == before
    assert [id(m) for m in msgs] == ids
    assert r.dropped and r.actions


def test_token_cache_is_used() -> None:
    msgs = history_of_tool_turns(3)
    counter = CharCounter()
    first = prepare_context(msgs, Budget(20, BIG), counter)
    assert counter.calls == len(msgs) == 13
    assert all(m.tokens is not None for m in msgs)
    prepare_context(msgs, Budget(20, BIG), counter)
    prepare_context(first.messages, Budget(20, BIG), counter)
    assert counter.calls == 13


def test_token_cache_counts_only_new_messages_after_compression() -> None:
    msgs = history_of_tool_turns(3)
    counter = CharCounter()
    r = prepare_context(msgs, Budget(20, 1000), counter)
    assert counter.calls == 13  # compressed turns reuse their user and reply messages and counts
    prepare_context(r.messages, Budget(20, 1000), counter)
    assert counter.calls == 13


def test_fast_path_returns_new_list_of_same_messages() -> None:
    msgs = [m for i in range(500) for m in text_turn(10 * (i + 1))]
    r = prepare_context(msgs, Budget(500, BIG), CharCounter())
    assert r.messages == msgs and r.messages is not msgs
    assert all(a is b for a, b in zip(r.messages, msgs, strict=True))
    assert r.dropped == [] and r.actions == [] and r.tokens == 1000 * 50


def test_empty_context() -> None:
    r = prepare_context([], Budget(20, 1000), CharCounter())
    assert (r.messages, r.dropped, r.actions, r.tokens) == ([], [], [], 0)


# ---------------------------------------------------------------- budgets and texts


def test_history_budget() -> None:
    assert history_budget(50_000, 128_000, 2_000) == 48_000
    assert history_budget(50_000, 8_192, 1_000) == 8_192 - 819 - 1_000
    assert history_budget(50_000, 8_192, 100_000) == 256


def test_cut_text() -> None:
    assert cut_text("abc", 3) == "abc"
    text = "a" * 80 + "b" * 20 + "c" * 20 + "d" * 20  # 140 characters
    assert cut_text(text, 100) == "a" * 80 + "\n\n[Text truncated: kept 100 of 140 characters]\n\n" + "d" * 20
    head_only = "a" * 80 + "b" * 20 + "\n\n[Text truncated: kept 100 of 140 characters]"
    assert cut_text(text, 100, keep_tail=False) == head_only


def test_injection_text_exact() -> None:
    assert injection_text("- decided X", 7, "hello") == (
        "[System: Previous conversation summary \u2014 7 turns were compacted]\n\n- decided X\n\n"
        "The recent conversation continues below.\n\n---\n\nhello"
    )


# ---------------------------------------------------------------- pairing repair


def test_repair_pairing_removes_orphan_and_adds_missing_result() -> None:
    messages = [
        {"role": "assistant", "content": "leading"},
        {"role": "tool", "tool_call_id": "zz", "content": "leading orphan"},
        {"role": "user", "content": "q"},
        {"role": "tool", "tool_call_id": "nope", "content": "orphan"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "function": {"name": "f"}},
                                                              {"id": "b", "function": {"name": "f"}}]},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "tool", "tool_call_id": "x", "content": "stray"},
        {"role": "user", "content": "interrupted"},
        {"role": "tool", "tool_call_id": "a", "content": "late"},  # after a user message: orphan
        {"role": "assistant", "content": "answer"},
    ]
    before = copy.deepcopy(messages)
    out = repair_pairing(messages)
    assert messages == before
    assert out == [
        messages[2],
        messages[4],
        messages[5],
        {"role": "tool", "tool_call_id": "a", "content": MISSING_RESULT},
        messages[7],
        messages[9],
    ]
    assert out[0] is messages[2]
    assert MISSING_RESULT == "[No result: the tool call was interrupted]"


def test_repair_pairing_duplicates_and_empty_tool_calls() -> None:
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "function": {"name": "f"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "a", "content": "again"},
        {"role": "assistant", "content": "hi", "tool_calls": []},
    ]
    assert repair_pairing(messages) == [messages[0], messages[1], messages[2], {"role": "assistant", "content": "hi"}]
    assert "tool_calls" in messages[4]


def test_repair_pairing_keeps_a_valid_history_as_is() -> None:
    messages = [m.message for m in history_of_tool_turns(3)]
    out = repair_pairing(messages)
    assert out == messages and all(a is b for a, b in zip(out, messages, strict=True))


# ---------------------------------------------------------------- render


def test_render_messages_injects_summary_into_first_user_message() -> None:
    msgs = [reply(1, "stray"), user(2, "hello"), reply(3, "hi"), user(4, "more")]
    out = render_messages("SYS", msgs, "- earlier", 4)
    assert out == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": injection_text("- earlier", 4, "hello")},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "more"},
    ]
    assert msgs[1].message == {"role": "user", "content": "hello"}


def test_render_messages_without_summary() -> None:
    msgs = [user(1, "q"), call(2, "a")]
    out = render_messages("SYS", msgs, None, 0)
    assert out == [
        {"role": "system", "content": "SYS"},
        msgs[0].message,
        msgs[1].message,
        {"role": "tool", "tool_call_id": "a", "content": MISSING_RESULT},
    ]


def test_render_messages_injects_into_text_part() -> None:
    parts = [{"type": "image_url", "image_url": {"url": "u"}}, {"type": "text", "text": "what is this"}]
    out = render_messages("S", [CtxMessage(1, {"role": "user", "content": parts})], "sum", 2)
    assert out[1]["content"] == [parts[0], {"type": "text", "text": injection_text("sum", 2, "what is this")}]
    assert parts[1]["text"] == "what is this"


# ---------------------------------------------------------------- overflow trim


def overflow_history() -> list[CtxMessage]:
    msgs: list[CtxMessage] = []
    for i in range(7):
        msgs += text_turn(10 * (i + 1))
    msgs += [
        user(100, "U" * 10_001),
        call(101, "k", arguments=json.dumps({"text": "A" * 12_000})),
        result(102, "k", "R" * 15_000),
        reply(103, "ok"),
        user(200, "U" * 10_000),
        call(201, "m", "n"),
        result(202, "m", "R" * 10_000),
    ]
    return msgs


def test_overflow_trim_keeps_five_turns_and_cuts_to_10000() -> None:
    msgs = overflow_history()  # 9 turns
    counter = CharCounter()
    r = overflow_trim(msgs, 5, counter)
    assert [t.first_seq for t in r.dropped] == [10, 20, 30, 40]
    assert [m.seq for m in r.messages] == [50, 51, 60, 61, 70, 71, 100, 101, 102, 103, 200, 201, 202, 0]
    by_seq = {m.seq: m for m in r.messages}
    assert by_seq[100].message["content"].count("U") == 10_000
    assert "[Message truncated: kept 10,000 of 10,001 characters]" in by_seq[100].message["content"]
    args = json.loads(by_seq[101].message["tool_calls"][0]["function"]["arguments"])
    assert set(args) == {"truncated"}
    assert "[Arguments truncated: kept 10,000 of 12,0" in args["truncated"]
    assert by_seq[102].message["content"].count("R") == 10_000
    assert "[Tool result truncated: kept 10,000 of 15,000 characters]" in by_seq[102].message["content"]
    assert by_seq[102].truncated
    assert by_seq[200] is msgs[-3]  # exactly 10,000: untouched
    assert by_seq[202] is msgs[-1]
    assert r.messages[-1].message == {"role": "tool", "tool_call_id": "n", "content": MISSING_RESULT}
    assert_pairing_ok([m.message for m in r.messages])
    assert r.tokens == sum(counter.count_message(m.message) for m in r.messages)
    assert r.actions == [
        "dropped 4 turns (overflow)",
        "cut 3 messages to 10,000 characters",
        "repaired tool-call pairing",
    ]


@pytest.mark.parametrize(("keep", "first_kept"), [(2, 100), (1, 200)])
def test_overflow_trim_two_turns_and_current_alone(keep: int, first_kept: int) -> None:
    msgs = overflow_history()
    r = overflow_trim(msgs, keep, CharCounter())
    assert r.messages[0].seq == first_kept
    assert len(r.dropped) == 9 - keep
    assert r.dropped[-1].last_seq < first_kept


def test_overflow_trim_with_fewer_turns_than_kept() -> None:
    msgs = text_turn(1)
    r = overflow_trim(msgs, 5, CharCounter())
    assert r.messages == msgs and r.dropped == [] and r.actions == []


# --- group background (DESIGN §1.3) -----------------------------------------------------------------
def test_fit_background_keeps_the_newest_lines_that_fit_oldest_first() -> None:
    counter = TokenCounter("gpt-4o-mini")
    lines = [f"[12:0{i} Alice] message number {i}" for i in range(8)]
    block, tokens = fit_background(lines, 10_000, counter)
    assert block == "\n".join([BACKGROUND_HEADER, *lines])
    every = tokens
    block, tokens = fit_background(lines, every - 1, counter)  # one token short: the oldest line goes
    assert block == "\n".join([BACKGROUND_HEADER, *lines[1:]])
    assert tokens < every
    assert fit_background(lines, 5, counter) == ("", 0)
    assert fit_background([], 10_000, counter) == ("", 0)


def test_render_puts_the_background_before_the_current_user_text_only() -> None:
    msgs = [CtxMessage(1, {"role": "user", "content": "[Bob] earlier"}),
            CtxMessage(2, {"role": "assistant", "content": "ok"}),
            CtxMessage(3, {"role": "user", "content": "[Bob] now"})]
    out = render_messages("sys", msgs, "a summary", 1, "BLOCK")
    assert out[1]["content"].startswith("[System: Previous conversation summary")
    assert out[1]["content"].endswith("[Bob] earlier")
    assert out[3] == {"role": "user", "content": "BLOCK\n\n---\n\n[Bob] now"}
    assert msgs[2].message == {"role": "user", "content": "[Bob] now"}  # the stored turn is untouched


def test_the_tools_schemas_are_counted_once_while_the_same_tools_are_offered() -> None:
    """Each turn offers a new list of schemas (a tool's ``schema()`` is a new dict each call): the same tools keep
    their count (Prompt compares the schemas' parameters objects instead of writing the list as JSON again), a tool
    whose parameters changed (an MCP server's new schema) is counted again, and fewer tools count less."""
    from agent.prompt import Prompt
    from agent.tools.base import Tool
    from agent.window import ModelWindows
    from config.settings import Config

    class CountingCounter(TokenCounter):
        texts: list[str] = []

        def count_text(self, text: str) -> int:
            self.texts.append(text)
            return super().count_text(text)

    counter = CountingCounter("gpt-4o-mini")
    cfg = Config()
    prompt = Prompt(config=lambda: cfg, counter=lambda model: counter, windows=ModelWindows(lambda: cfg))

    def fn(ctx: Any, city: str) -> str:
        return city

    tools = [Tool("weather", "The weather in a city.", {"type": "object", "properties": {"city": {"type": "string"}}},
                  fn), Tool("time", "The time now.", {"type": "object", "properties": {}}, fn)]
    first = prompt.tools_tokens("m", [t.schema() for t in tools])
    assert first > 10 and len(counter.texts) == 1
    assert prompt.tools_tokens("m", [t.schema() for t in tools]) == first and len(counter.texts) == 1
    changed = [tools[0], Tool("time", "The time now.", {"type": "object", "properties": {"zone": {"type": "string"}}},
                              fn)]
    more = prompt.tools_tokens("m", [t.schema() for t in changed])
    assert more > first and len(counter.texts) == 2
    assert prompt.tools_tokens("m", [t.schema() for t in tools[:1]]) < first  # fewer tools
    assert prompt.tools_tokens("m", [t.schema() for t in tools]) == first  # counted before: from the cache
    assert prompt.tools_tokens("m", None) == 0

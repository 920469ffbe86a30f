"""Tests for summaries/text.py: the transcript, "none", the rule-based fallback and its roll-forward."""

from __future__ import annotations

import json

import pytest

from summaries.text import (
    FALLBACK_MAX_TURNS,
    MERGE_REQUEST,
    SUMMARY_REQUEST,
    SUMMARY_SYSTEM_PROMPT,
    build_request,
    cap_transcript,
    clip,
    count_turns,
    fallback_summary,
    is_none,
    new_lines,
    part_request,
    roll_summary,
    transcript,
    transcript_entries,
    user_texts,
)

CALL = {"id": "c1", "type": "function",
        "function": {"name": "web_fetch", "arguments": json.dumps({"url": "https://example.com/prices"}, indent=2)}}
CONVERSATION = [
    {"role": "assistant", "content": "a greeting before anyone spoke"},
    {"role": "user", "content": "what does it cost?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "Blue plan: 5 EUR a month"},
    {"role": "assistant", "content": "The blue plan costs 5 EUR a month.\nAnything else?"},
    {"role": "user", "content": [{"type": "text", "text": "no,\n thanks"}]},
]


def test_transcript_is_exact():
    assert transcript(CONVERSATION) == (
        "Assistant: a greeting before anyone spoke\n"
        "User: what does it cost?\n"
        'Assistant called tool web_fetch({"url": "https://example.com/prices"})\n'
        "Tool result (web_fetch): Blue plan: 5 EUR a month\n"
        "Assistant: The blue plan costs 5 EUR a month.\nAnything else?\n"
        "User: no,\n thanks")


def test_entries_are_one_per_message_and_the_transcript_joins_them():
    entries = transcript_entries(CONVERSATION)
    assert entries == [
        "Assistant: a greeting before anyone spoke",
        "User: what does it cost?",
        'Assistant called tool web_fetch({"url": "https://example.com/prices"})',
        "Tool result (web_fetch): Blue plan: 5 EUR a month",
        "Assistant: The blue plan costs 5 EUR a month.\nAnything else?",
        "User: no,\n thanks",
    ]
    assert transcript(CONVERSATION) == "\n".join(entries)
    assert user_texts(CONVERSATION) == ["what does it cost?", "no,\n thanks"]


def test_requests_carry_no_earlier_summary_and_merges_say_so():
    assert build_request(CONVERSATION[1:2]) == [
        {"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
        {"role": "user", "content": f"{SUMMARY_REQUEST}\n\nConversation:\nUser: what does it cost?"},
    ]
    assert part_request("- a\n- b", merging=True)[1]["content"] == f"{MERGE_REQUEST}\n\nPart summaries:\n- a\n- b"
    assert "Earlier summary" not in SUMMARY_SYSTEM_PROMPT and "earlier summary" not in SUMMARY_SYSTEM_PROMPT


def test_long_texts_are_clipped_and_the_transcript_capped():
    assert clip("abcdef", 4) == "abcd [… 2 more characters]"
    assert clip("abcd", 4) == "abcd"
    capped = cap_transcript("x" * 90 + "y" * 10, limit=30)
    assert capped == "x" * 20 + "\n[… 70 characters of the conversation left out …]\n" + "y" * 10


@pytest.mark.parametrize(("text", "none"), [("none", True), ("None.", True), (" NONE ", True), ("**none**", True),
                                            ("- none of the above", False), ("nonetheless", False), ("", False)])
def test_is_none(text, none):
    assert is_none(text) is none


def test_turns_are_counted_by_the_shared_rule():
    assert count_turns(CONVERSATION) == 2
    assert count_turns([{"role": "assistant", "content": "hi"}]) == 0


def test_fallback_has_one_line_per_turn_with_the_first_line_of_its_answer():
    assert fallback_summary(CONVERSATION) == (
        "- (fallback) what does it cost? → The blue plan costs 5 EUR a month.\n"
        "- (fallback) no, thanks")


def test_fallback_of_nothing_is_empty_and_of_many_turns_lists_the_latest():
    assert fallback_summary([]) == ""
    assert fallback_summary([{"role": "assistant", "content": "only me"}]) == ""
    many = [{"role": "user", "content": f"q{i}"} for i in range(FALLBACK_MAX_TURNS + 2)]
    lines = fallback_summary(many).splitlines()
    assert lines[0] == "- (fallback) [2 earlier turns not listed]"
    assert lines[1] == "- (fallback) q2"  # no stored answer: the user's words alone, never "(no reply)"
    assert len(lines) == FALLBACK_MAX_TURNS + 1


def test_the_rolling_summary_appends_and_keeps_the_newest_lines_within_the_cap():
    def words(text: str) -> int:
        return len(text.split())

    assert roll_summary(None, "- a b", 100, words) == "- a b"
    assert roll_summary("- one\n- two", "- three", 100, words) == "- one\n- two\n- three"
    # each line costs its words plus one: 3 + 3 + 3 > 7, so the oldest line leaves
    assert roll_summary("- one\n- two", "- three", 7, words) == "- two\n- three"
    # the newest line stays even when it alone is over the cap
    assert roll_summary("- one", "- a b c d e f", 2, words) == "- a b c d e f"


def test_new_lines_leave_out_what_the_earlier_summary_holds():
    assert new_lines(None, "- a\n- b") == "- a\n- b"
    assert new_lines("- Alice lives in Lisbon\n- b", "- alice lives in  Lisbon\n* c\n- b") == "* c"

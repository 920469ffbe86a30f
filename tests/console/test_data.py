"""console/data.py: what the conversation pages read, on SQLite and on PostgreSQL alike (DESIGN §10: any
process on a shared database serves the same data)."""

from __future__ import annotations

from console import data
from core.records import SessionInfo
from store.store import Store

ALICE = SessionInfo(session_id="telegram:1", channel="telegram", chat_id="1", user_id="1", title="Alice")
TEAM = SessionInfo(session_id="telegram:group:-5", channel="telegram", chat_id="-5", is_group=True, title="Bee Team")


def turn(text: str, answer: str) -> list[dict]:
    return [{"role": "user", "content": text},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "current_time", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
            {"role": "assistant", "content": answer}]


async def test_sessions_are_listed_and_searched_with_their_turns(store: Store) -> None:
    await store.sessions.ensure(ALICE)
    await store.sessions.ensure(TEAM)
    await store.sessions.append(ALICE.session_id, turn("I live in Lyon", "Noted") + turn("It is noon", "Yes"))
    await store.sessions.append(TEAM.session_id, turn("hello team", "hi"))
    rows = await store.sessions.listing("")
    assert {(r.session_id, r.turns, r.is_group) for r in rows} == {(ALICE.session_id, 2, False),
                                                                     (TEAM.session_id, 1, True)}
    assert [r.session_id for r in await store.sessions.listing("bee")] == [TEAM.session_id]  # the title
    assert [r.session_id for r in await store.sessions.listing("TELEGRAM:1")] == [ALICE.session_id]
    assert await store.sessions.listing("wechat") == []
    contexts = await store.sessions.context_messages(rows)
    assert [m["role"] for _, m in contexts[ALICE.session_id]] == ["user", "assistant", "tool", "assistant"] * 2
    assert [seq for seq, _ in contexts[ALICE.session_id]] == list(range(1, 9))
    await store.sessions.set_context_start(ALICE.session_id, 5)
    assert [seq for seq, _ in (await store.sessions.context_messages(rows))[ALICE.session_id]] == [5, 6, 7, 8]
    assert await store.sessions.context_messages([]) == {}


async def test_the_transcript_by_turn_marks_the_boundary_and_checks_the_summary(store: Store) -> None:
    await store.sessions.ensure(ALICE)
    await store.sessions.append(ALICE.session_id, turn("I live in Lyon and my cat is Tom", "Noted")
                       + turn("I work as a nurse at 7:30", "OK") + turn("What is my cat called?", "Tom"))
    await store.sessions.set_context_start(ALICE.session_id, 9)
    summary = "- The user lives in Lyon.\n- (kept) I work as a nurse at 7:30"
    await store.sessions.set_summary(ALICE.session_id, summary, turns=2, through_seq=8)
    row = await store.sessions.row(ALICE.session_id)
    assert row is not None and row["summary"] == summary and row["context_start_seq"] == 9
    assert await store.sessions.row("telegram:404") is None
    messages = await store.sessions.last_messages(ALICE.session_id, data.TRANSCRIPT_LIMIT)
    assert [seq for seq, _, _ in messages] == list(range(1, 13))
    turns = data.transcript(messages, row["context_start_seq"])
    assert [t.in_context for t in turns] == [False, False, True]
    assert [m.role for m in turns[0].messages] == ["user", "assistant", "tool", "assistant"]
    assert turns[0].messages[1].tools == ["current_time"]
    check = data.summary_check(row["summary"], row["summary_turns"], row["context_start_seq"], messages)
    assert check is not None and check.kept_lines == 1
    assert 0 < check.found < check.total  # the model's own line kept Lyon, not the nurse's hours
    last = await store.sessions.last_messages(ALICE.session_id, 4)
    assert [seq for seq, _, _ in last] == [9, 10, 11, 12]


def test_a_long_message_is_shown_cut_with_its_length() -> None:
    from datetime import UTC, datetime

    shown = data.shown(3, {"role": "tool", "content": "x" * (data.SHOWN_CHARS + 10)}, datetime.now(UTC))
    assert len(shown.text) == data.SHOWN_CHARS and shown.cut == data.SHOWN_CHARS + 10
    assert data.summary_check(None, 0, 1, []) is None

"""The memory flush before a trim, and memory_write's notes (size cap, duplicates, atomic writes)."""

from __future__ import annotations

import logging
from datetime import UTC
from pathlib import Path

import pytest

from agent.flush import FLUSH_PROMPT, MEMORY_WRITE_SCHEMA, flush_before_trim, transcript
from core.errors import LLMError
from core.llm import LLMResponse, ToolCall, Usage
from core.turns import CtxMessage
from memory.daily import DailyMemory
from memory.notes import NOTE_MAX_CHARS, NOTES_MAX_CHARS, append_note
from tests.fakes.fake_llm import FakeLLM

SID = "telegram:1"

DROPPED = [
    CtxMessage(1, {"role": "user", "content": "My cat is called Tom."}),
    CtxMessage(2, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "current_time", "arguments": "{}"}}]}),
    CtxMessage(3, {"role": "tool", "tool_call_id": "c1", "content": "12:00"}),
    CtxMessage(4, {"role": "assistant", "content": [{"type": "text", "text": "Nice name!"}]}),
]


class Notes:
    """A write_note that keeps what it was given."""

    def __init__(self) -> None:
        self.saved: list[str] = []

    async def __call__(self, text: str) -> str:
        if text in self.saved:
            return "Already in MEMORY.md; nothing written."
        self.saved.append(text)
        return "Saved to MEMORY.md."


def test_transcript_keeps_user_and_assistant_text_and_cuts_the_head() -> None:
    assert transcript(DROPPED) == "user: My cat is called Tom.\n\nassistant: Nice name!"
    assert transcript([m.message for m in DROPPED], max_chars=10) == "Nice name!"


async def test_flush_saves_notes_without_answering_and_logs_its_cost(caplog: pytest.LogCaptureFixture) -> None:
    llm = FakeLLM()
    llm.enqueue(LLMResponse(content=None, usage=Usage(120, 30), tool_calls=(
        ToolCall("a", "memory_write", '{"text": "The user\'s cat is called Tom."}'),
        ToolCall("b", "memory_write", '{"text": "The user\'s cat is called Tom."}'),
        ToolCall("c", "memory_write", '{"note": "wrong argument"}'),
        ToolCall("d", "web_fetch", '{"url": "http://x"}'))))
    notes = Notes()
    with caplog.at_level(logging.INFO, logger="agent.flush"):
        usage = await flush_before_trim(llm, DROPPED, notes, model="m", system="persona", session_id=SID)
    assert usage == Usage(120, 30)
    assert notes.saved == ["The user's cat is called Tom."]
    (request,) = llm.history
    assert request.tools == [MEMORY_WRITE_SCHEMA] and request.model == "m" and request.temperature == 0
    assert request.messages == [
        {"role": "system", "content": "persona\n\n" + FLUSH_PROMPT},
        {"role": "user", "content": "Conversation about to leave the context:\n\n"
                                    "user: My cat is called Tom.\n\nassistant: Nice name!"}]
    logged = [r.getMessage() for r in caplog.records if r.name == "agent.flush"]
    assert any(m.startswith(f"session {SID}: memory flush saved 1 of 4 notes in ") and
               m.endswith("(prompt 120, completion 30 tokens)") for m in logged), logged


async def test_flush_failure_or_nothing_to_flush_is_harmless() -> None:
    llm = FakeLLM()
    llm.enqueue(LLMError("provider down"))
    notes = Notes()
    assert await flush_before_trim(llm, DROPPED, notes) == Usage()
    assert await flush_before_trim(llm, [CtxMessage(5, {"role": "tool", "content": "x"})], notes) == Usage()
    assert llm.calls == 1 and notes.saved == []


async def test_append_note_caps_dedups_and_writes_atomically(tmp_path: Path) -> None:
    memory = DailyMemory(tmp_path, UTC)
    first = await append_note(memory, SID, "  Alice's budget\nis 2000 EUR. ")
    assert (first.status, first.note) == ("saved", "Alice's budget is 2000 EUR.")
    path = memory.session_dir(SID) / "MEMORY.md"
    assert path.read_text() == "- Alice's budget is 2000 EUR.\n"
    assert first.message() == f"Saved to MEMORY.md (30 of {NOTES_MAX_CHARS:,} characters used)."
    assert (await append_note(memory, SID, "alice's BUDGET is 2000   eur.")).status == "duplicate"
    assert (await append_note(memory, SID, " \n ")).status == "empty"
    assert (await append_note(memory, SID, "x" * (NOTE_MAX_CHARS + 1))).status == "too_long"
    path.write_text("# Notes by the operator\nno newline at the end")
    assert (await append_note(memory, SID, "Bob likes trains.")).status == "saved"
    assert path.read_text() == "# Notes by the operator\nno newline at the end\n- Bob likes trains.\n"
    assert [p.name for p in path.parent.iterdir()] == ["MEMORY.md"]  # no temporary file left behind
    path.write_text("x" * (NOTES_MAX_CHARS - 10) + "\n")
    full = await append_note(memory, SID, "one more fact")
    assert full.status == "full" and path.stat().st_size == NOTES_MAX_CHARS - 9
    assert "is full" in full.message()


async def test_append_note_refuses_a_symlinked_notes_file(tmp_path: Path) -> None:
    memory = DailyMemory(tmp_path / "memory", UTC)
    outside = tmp_path / "outside.md"
    outside.write_text("")
    memory.session_dir(SID).mkdir(parents=True)
    (memory.session_dir(SID) / "MEMORY.md").symlink_to(outside)
    with pytest.raises(ValueError, match="symbolic link"):
        await append_note(memory, SID, "secret")
    assert outside.read_text() == ""

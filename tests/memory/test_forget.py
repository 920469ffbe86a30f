"""Forgetting a session: every row with its session id, then its memory folder; other sessions untouched."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

from core.records import SessionInfo
from memory.daily import DailyMemory
from memory.forget import ForgetReport, forget_session
from memory.index import MemoryIndex
from store.sessions import session_tables

A, B = "telegram:1", "telegram:2"


def test_session_tables_end_with_sessions() -> None:
    names = [t.name for t in session_tables()]
    assert names[-1] == "sessions" and {"messages", "inbox", "summary_jobs", "memory_chunks"} <= set(names)


async def test_forget_deletes_rows_and_files_of_one_session(store, tmp_path: Path) -> None:
    memory = DailyMemory(tmp_path / "memory", UTC)
    index = MemoryIndex(store, None, memory)
    for sid in (A, B):
        await store.sessions.ensure(SessionInfo(session_id=sid, channel="telegram", chat_id=sid[-1]))
        said = {"role": "user", "content": "hi"}
        await store.journal.record_incoming("telegram", f"m-{sid}", sid, {"text": "hi"}, said)
        await store.sessions.append(sid, [{"role": "assistant", "content": "hello"}])
        await store.jobs.add(sid, "trim", 1, 2)
        await memory.append(sid, "trim", "- a fact")
        await index.add(sid, "summary", "- a fact\n- another", f"{memory.today()}.md")
    (memory.session_dir(A) / "MEMORY.md").write_text("- note\n")
    report = await forget_session(store, memory, A)
    # usage rows stay (store/sessions.py KEPT_TABLES); reminders go with their session (DESIGN §12)
    assert report.rows == {"memory_chunks": 2, "summary_jobs": 1, "messages": 2, "inbox": 1, "reminders": 0,
                           "message_vectors": 0, "sessions": 1}
    assert report.files == sorted([f"{memory.today()}.md", "MEMORY.md"])
    assert report.describe() == ("Deleted for good: 2 stored messages, 1 daily memory file, the long-term notes "
                                 "(MEMORY.md), 2 search index entries, 2 other records.")
    assert not memory.session_dir(A).exists()
    assert await store.sessions.get(A) is None and await store.sessions.load_messages(A) == []
    assert [m.message["content"] for m in await store.sessions.load_messages(B)] == ["hi", "hello"]
    assert (await index.stamp(B))[0] == 2 and memory.read(B, memory.today()) is not None
    again = await forget_session(store, memory, A)
    assert again.describe() == ("Deleted for good: 0 stored messages, 0 daily memory files, no long-term notes, "
                                "0 search index entries.")


def test_report_singulars() -> None:
    report = ForgetReport(rows={"messages": 1, "memory_chunks": 1}, files=["2026-01-01.md"])
    assert report.describe() == ("Deleted for good: 1 stored message, 1 daily memory file, no long-term notes, "
                                 "1 search index entry.")

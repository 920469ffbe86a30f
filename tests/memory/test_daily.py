"""Tests for memory/daily.py: exact file layout, privacy, locking, date rollover, search and notes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import time_machine

from core.files import session_dir_name
from memory import daily
from memory.daily import REASON_HEADERS, DailyMemory, MemoryHit

SHANGHAI = ZoneInfo("Asia/Shanghai")
SID = "telegram:12345"


@pytest.fixture
def mem(tmp_path: Path) -> DailyMemory:
    return DailyMemory(tmp_path / "memory", SHANGHAI)


def at(y: int, mo: int, d: int, h: int, mi: int) -> datetime:
    return datetime(y, mo, d, h, mi, tzinfo=SHANGHAI)


# --- naming and privacy --------------------------------------------------------------------------

def test_session_dir_name_replaces_every_unsafe_character() -> None:
    assert session_dir_name("telegram:group:-100:42") == "telegram_group_-100_42"
    assert session_dir_name("wechat:张三") == "wechat___"
    assert session_dir_name("a/b\\c d.e_f-g") == "a_b_c_d.e_f-g"


def test_session_dir_is_inside_root(mem: DailyMemory, tmp_path: Path) -> None:
    assert mem.session_dir("telegram:group:-100:42") == tmp_path / "memory" / "telegram_group_-100_42"
    assert mem.session_dir("../../etc") == tmp_path / "memory" / ".._.._etc"
    assert mem.session_dir("/etc/passwd") == tmp_path / "memory" / "_etc_passwd"


@pytest.mark.parametrize("bad", ["", ".", ".."])
def test_session_dir_rejects_ids_naming_the_root_or_its_parent(mem: DailyMemory, bad: str) -> None:
    with pytest.raises(ValueError, match="memory folder"):
        mem.session_dir(bad)


# --- exact layout --------------------------------------------------------------------------------

async def test_first_append_creates_file_with_exact_content(mem: DailyMemory, tmp_path: Path) -> None:
    path = await mem.append(SID, "trim", "- a\n- b", when=at(2026, 3, 1, 14, 5))
    assert path == tmp_path / "memory" / "telegram_12345" / "2026-03-01.md"
    assert path.read_text(encoding="utf-8") == "# Daily Memory: 2026-03-01\n\n## Trimmed Context (14:05)\n\n- a\n- b\n"


async def test_second_append_adds_a_section_and_strips_body(mem: DailyMemory) -> None:
    await mem.append(SID, "trim", "- a\n- b\n", when=at(2026, 3, 1, 14, 5))
    path = await mem.append(SID, "compact", "\n\n  - c   \n- d\n\n\n", when=at(2026, 3, 1, 15, 40))
    assert path.read_text(encoding="utf-8") == (
        "# Daily Memory: 2026-03-01\n\n## Trimmed Context (14:05)\n\n- a\n- b\n"
        "\n## Compacted (15:40)\n\n- c\n- d\n"
    )


@pytest.mark.parametrize(("reason", "header"), [
    ("trim", "## Trimmed Context (09:07)"),
    ("restore", "## Trimmed Context (09:07)"),
    ("overflow", "## Context Overflow Recovery (09:07)"),
    ("clear", "## Cleared Context (09:07)"),
    ("compact", "## Compacted (09:07)"),
])
async def test_every_reason_header(mem: DailyMemory, reason: str, header: str) -> None:
    path = await mem.append(SID, reason, "- x", when=at(2026, 3, 1, 9, 7))
    assert path.read_text(encoding="utf-8") == f"# Daily Memory: 2026-03-01\n\n{header}\n\n- x\n"


def test_reason_headers_table() -> None:
    assert REASON_HEADERS == {"trim": "Trimmed Context", "restore": "Trimmed Context",
                              "overflow": "Context Overflow Recovery", "clear": "Cleared Context",
                              "compact": "Compacted"}


async def test_unknown_reason_and_empty_body_are_rejected(mem: DailyMemory) -> None:
    with pytest.raises(ValueError, match="unknown memory reason 'nap'"):
        await mem.append(SID, "nap", "- x")
    with pytest.raises(ValueError, match="empty"):
        await mem.append(SID, "trim", " \n\n ")
    with pytest.raises(ValueError, match="timezone-aware"):
        await mem.append(SID, "trim", "- x", when=datetime(2026, 3, 1, 9, 0))  # noqa: DTZ001
    assert not (mem.root / "telegram_12345").exists()


async def test_when_is_converted_to_the_zone(mem: DailyMemory) -> None:
    # 2026-03-01 17:30 UTC is 2026-03-02 01:30 in Shanghai.
    path = await mem.append(SID, "clear", "- late", when=datetime(2026, 3, 1, 17, 30, tzinfo=UTC))
    assert path.name == "2026-03-02.md"
    assert "## Cleared Context (01:30)\n" in path.read_text(encoding="utf-8")


async def test_sessions_write_to_separate_folders(mem: DailyMemory) -> None:
    a = await mem.append("telegram:1", "trim", "- secret of A", when=at(2026, 3, 1, 10, 0))
    b = await mem.append("telegram:2", "trim", "- note of B", when=at(2026, 3, 1, 10, 0))
    assert a.parent != b.parent
    assert "secret" not in b.read_text(encoding="utf-8")
    assert mem.search("telegram:2", "secret") == []
    assert mem.read("telegram:2", "2026-03-01") == (
        "# Daily Memory: 2026-03-01\n\n## Trimmed Context (10:00)\n\n- note of B\n")


# --- concurrency and dates -----------------------------------------------------------------------

async def test_fifty_concurrent_appends_never_interleave(mem: DailyMemory) -> None:
    bodies = ["\n".join(f"- item {i} line {j} " + "x" * 200 for j in range(20)) for i in range(50)]
    await asyncio.gather(*(mem.append(SID, "trim", body, when=at(2026, 3, 1, 12, 0)) for body in bodies))
    text = mem.read(SID, "2026-03-01")
    assert text is not None
    assert text.count("# Daily Memory: 2026-03-01\n") == 1
    sections = text.split("\n## Trimmed Context (12:00)\n\n")
    assert sections[0] == "# Daily Memory: 2026-03-01\n"
    assert len(sections) == 51
    assert sorted(sections[1:]) == sorted(body + "\n" for body in bodies)


async def test_append_waits_for_the_file_lock_and_drops_idle_locks(mem: DailyMemory) -> None:
    path = mem.session_dir(SID) / "2026-03-01.md"
    async with daily.FILE_LOCKS.hold(path.resolve()):
        task = asyncio.create_task(mem.append(SID, "trim", "- waits", when=at(2026, 3, 1, 12, 0)))
        await asyncio.sleep(0.05)
        assert not task.done()
        assert not path.exists()
    assert await task == path
    assert path.read_text(encoding="utf-8").endswith("- waits\n")
    assert daily.FILE_LOCKS._locks == {}
    assert daily.FILE_LOCKS._users == {}


async def test_date_rollover_around_midnight_in_zone(mem: DailyMemory) -> None:
    with time_machine.travel(at(2026, 3, 1, 23, 59), tick=False):
        first = await mem.append(SID, "trim", "- before midnight")
    with time_machine.travel(at(2026, 3, 2, 0, 1), tick=False):
        second = await mem.append(SID, "overflow", "- after midnight")
        assert mem.today() == "2026-03-02"
    assert first.name == "2026-03-01.md"
    assert second.name == "2026-03-02.md"
    assert first.read_text(encoding="utf-8") == (
        "# Daily Memory: 2026-03-01\n\n## Trimmed Context (23:59)\n\n- before midnight\n")
    assert second.read_text(encoding="utf-8") == (
        "# Daily Memory: 2026-03-02\n\n## Context Overflow Recovery (00:01)\n\n- after midnight\n")


async def test_date_uses_zone_not_utc(tmp_path: Path) -> None:
    # 16:30 UTC on 1 March: still 1 March in UTC, already 2 March 00:30 in Shanghai.
    with time_machine.travel(datetime(2026, 3, 1, 16, 30, tzinfo=UTC), tick=False):
        sh = await DailyMemory(tmp_path, SHANGHAI).append(SID, "trim", "- x")
        utc = await DailyMemory(tmp_path / "u", timezone(timedelta(0))).append(SID, "trim", "- x")
    assert sh.name == "2026-03-02.md"
    assert utc.name == "2026-03-01.md"


# --- read ----------------------------------------------------------------------------------------

async def test_read_missing_day_is_none(mem: DailyMemory) -> None:
    assert mem.read(SID, "2026-03-01") is None


@pytest.mark.parametrize("bad", ["../x", "2026-3-1", "2026-02-30", "2026-03-01.md", "../../telegram_2/2026-03-01",
                                 "2026-03-01/../x", "", "20260301", " 2026-03-01"])
def test_read_rejects_bad_dates(mem: DailyMemory, bad: str) -> None:
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        mem.read(SID, bad)


# --- search --------------------------------------------------------------------------------------

async def test_search_case_insensitive_cjk_and_terms(mem: DailyMemory) -> None:
    body = "- Alice set the budget to 500\n- 预算是五百元\n- Bob is away"
    await mem.append(SID, "trim", body, when=at(2026, 3, 1, 9, 0))
    await mem.append(SID, "compact", "- alice prefers tea", when=at(2026, 3, 2, 9, 0))
    assert mem.search(SID, "ALICE") == [
        MemoryHit(file="2026-03-02.md", date="2026-03-02", line_no=5, line="- alice prefers tea"),
        MemoryHit(file="2026-03-01.md", date="2026-03-01", line_no=5, line="- Alice set the budget to 500"),
    ]
    assert mem.search(SID, "Alice budget") == [
        MemoryHit(file="2026-03-01.md", date="2026-03-01", line_no=5, line="- Alice set the budget to 500"),
    ]
    assert mem.search(SID, "alice coffee") == []
    assert mem.search(SID, "预算") == [
        MemoryHit(file="2026-03-01.md", date="2026-03-01", line_no=6, line="- 预算是五百元"),
    ]
    assert mem.search(SID, "   ") == []


async def test_search_includes_memory_md_after_daily_files_and_respects_limit(mem: DailyMemory) -> None:
    for day in (1, 3, 2):
        await mem.append(SID, "trim", "- tea talk", when=at(2026, 3, day, 9, 0))
    (mem.session_dir(SID) / "MEMORY.md").write_text("# Notes\n\nLikes TEA.\n", encoding="utf-8")
    hits = mem.search(SID, "tea")
    assert [(h.file, h.line_no) for h in hits] == [
        ("2026-03-03.md", 5), ("2026-03-02.md", 5), ("2026-03-01.md", 5), ("MEMORY.md", 3)]
    assert hits[-1].date == ""
    assert [h.file for h in mem.search(SID, "tea", limit=2)] == ["2026-03-03.md", "2026-03-02.md"]


def test_search_of_unknown_session_is_empty(mem: DailyMemory) -> None:
    assert mem.search("telegram:none", "x") == []


# --- long-term notes -----------------------------------------------------------------------------

def test_long_term_notes_absent_or_blank(mem: DailyMemory) -> None:
    assert mem.long_term_notes(SID) is None
    mem.session_dir(SID).mkdir(parents=True)
    (mem.session_dir(SID) / "MEMORY.md").write_text("\n  \n", encoding="utf-8")
    assert mem.long_term_notes(SID) is None


def test_long_term_notes_follow_edits_of_the_file(mem: DailyMemory, tmp_path: Path) -> None:
    assert mem.long_term_notes(SID) is None  # no folder yet
    folder = mem.session_dir(SID)
    folder.mkdir(parents=True)
    path = folder / "MEMORY.md"
    path.write_text("- likes tea\n", encoding="utf-8")
    assert mem.long_term_notes(SID) == "- likes tea"  # created after a miss
    assert mem.long_term_notes(SID, max_chars=5) == "- lik\n[MEMORY.md cut: showing 1 of 1 lines, 5 of 11 characters]"
    path.write_text("- likes coffee now\n", encoding="utf-8")
    assert mem.long_term_notes(SID) == "- likes coffee now"  # edited
    outside = tmp_path / "secret.md"
    outside.write_text("not for the model", encoding="utf-8")
    path.unlink()
    path.symlink_to(outside)
    assert mem.long_term_notes(SID) is None  # a symlink is never followed
    path.unlink()
    assert mem.long_term_notes(SID) is None  # deleted


def test_long_term_notes_small_file_returned_whole(mem: DailyMemory) -> None:
    mem.session_dir(SID).mkdir(parents=True)
    (mem.session_dir(SID) / "MEMORY.md").write_text("- likes tea\n- lives in Lyon\n", encoding="utf-8")
    assert mem.long_term_notes(SID) == "- likes tea\n- lives in Lyon"


def test_long_term_notes_capped_at_200_lines(mem: DailyMemory) -> None:
    mem.session_dir(SID).mkdir(parents=True)
    lines = [f"line {i}" for i in range(1, 251)]
    (mem.session_dir(SID) / "MEMORY.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    notes = mem.long_term_notes(SID)
    assert notes is not None
    body, notice = notes.rsplit("\n", 1)
    assert body == "\n".join(lines[:200])
    total = len("\n".join(lines))
    assert notice == f"[MEMORY.md cut: showing 200 of 250 lines, {len(body):,} of {total:,} characters]"


def test_long_term_notes_capped_at_8000_chars_on_a_line_boundary(mem: DailyMemory) -> None:
    mem.session_dir(SID).mkdir(parents=True)
    lines = ["y" * 99 for _ in range(100)]  # 100 lines, 9,999 characters with newlines
    (mem.session_dir(SID) / "MEMORY.md").write_text("\n".join(lines), encoding="utf-8")
    notes = mem.long_term_notes(SID)
    assert notes is not None
    body, notice = notes.rsplit("\n", 1)
    assert body == "\n".join(lines[:80])  # 80 lines = 7,999 characters; 81 would be 8,099
    assert notice == "[MEMORY.md cut: showing 80 of 100 lines, 7,999 of 9,999 characters]"


def test_long_term_notes_single_long_line_cut_hard(mem: DailyMemory) -> None:
    mem.session_dir(SID).mkdir(parents=True)
    (mem.session_dir(SID) / "MEMORY.md").write_text("w" * 9000, encoding="utf-8")
    assert mem.long_term_notes(SID) == "w" * 8000 + "\n[MEMORY.md cut: showing 1 of 1 lines, 8,000 of 9,000 characters]"


def test_long_term_notes_exactly_at_limits_are_not_cut(mem: DailyMemory) -> None:
    mem.session_dir(SID).mkdir(parents=True)
    text = "\n".join(["z" * 39] * 200)  # 200 lines, 7,999 characters
    (mem.session_dir(SID) / "MEMORY.md").write_text(text, encoding="utf-8")
    assert mem.long_term_notes(SID) == text


# --- notes and the memory_written hook -------------------------------------------------------------

async def test_a_summary_section_is_announced_and_a_failing_listener_changes_nothing(tmp_path, caplog) -> None:
    events: list[tuple] = []

    async def listener(session_id, kind, text, path):
        events.append((session_id, kind, text, path))
        raise RuntimeError("indexer down")

    mem = DailyMemory(tmp_path / "memory", SHANGHAI, on_written=listener)
    path = await mem.append(SID, "trim", "- a\n- b", when=at(2026, 3, 1, 14, 5))
    assert path.read_text(encoding="utf-8") == "# Daily Memory: 2026-03-01\n\n## Trimmed Context (14:05)\n\n- a\n- b\n"
    assert events == [(SID, "summary", "- a\n- b", path)]
    assert "memory_written listener failed for session telegram:12345 (summary)" in caplog.text

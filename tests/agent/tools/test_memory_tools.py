"""Tests for agent/tools/memory_tools.py: results, messages, and strict per-session privacy."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import time_machine

from agent.tools.base import ToolContext
from agent.tools.memory_tools import MEMORY_TOOLS, memory_get, memory_search
from config.settings import Config
from memory.daily import DailyMemory

ZONE = ZoneInfo("Asia/Shanghai")
A = "telegram:111"
B = "telegram:222"


def ctx_for(session_id: str, data_dir: Path) -> ToolContext:
    return ToolContext(session_id=session_id, config=Config(timezone="Asia/Shanghai"), data_dir=data_dir)


@pytest.fixture
async def data_dir(tmp_path: Path) -> Path:
    mem = DailyMemory(tmp_path / "memory", ZONE)
    await mem.append(A, "trim", "- Alice set the budget to 500\n- 密码是 swordfish",
                     when=datetime(2026, 3, 1, 14, 5, tzinfo=ZONE))
    await mem.append(A, "compact", "- alice likes tea", when=datetime(2026, 3, 2, 9, 0, tzinfo=ZONE))
    await mem.append(B, "clear", "- Bob plans a trip", when=datetime(2026, 3, 1, 10, 0, tzinfo=ZONE))
    (mem.session_dir(A) / "MEMORY.md").write_text("Alice: prefers short answers\n", encoding="utf-8")
    return tmp_path


def test_schemas() -> None:
    assert [t.name for t in MEMORY_TOOLS] == ["memory_search", "memory_get", "memory_write"]
    assert memory_search.parameters == {
        "type": "object", "required": ["query"],
        "properties": {"query": {
            "type": "string", "description": 'words or a question, e.g. "Alice budget" or "what is my pet called?"'}}}
    assert memory_get.parameters["required"] == []
    assert memory_get.parameters["properties"]["date"]["type"] == "string"
    assert memory_search.description.startswith("Search this conversation's memory files")


async def test_search_returns_file_line_and_text(data_dir: Path) -> None:
    out = await memory_search.call(ctx_for(A, data_dir), {"query": "alice"})
    assert out == ("2026-03-02.md:5: - alice likes tea\n"
                   "2026-03-01.md:5: - Alice set the budget to 500\n"
                   "MEMORY.md:1: Alice: prefers short answers")
    out = await memory_search.call(ctx_for(A, data_dir), {"query": "Alice budget"})
    assert out == "2026-03-01.md:5: - Alice set the budget to 500"


async def test_search_no_match_and_empty_query(data_dir: Path) -> None:
    assert await memory_search.call(ctx_for(A, data_dir), {"query": "zebra"}) == "No memory matches for 'zebra'."
    assert await memory_search.call(ctx_for(A, data_dir), {"query": "  "}) == (
        "Give a non-empty query to search the memory files.")


async def test_search_caps_at_fifty_with_notice(tmp_path: Path) -> None:
    mem = DailyMemory(tmp_path / "memory", ZONE)
    await mem.append(A, "trim", "\n".join(f"- hit {i}" for i in range(60)),
                     when=datetime(2026, 3, 1, 9, 0, tzinfo=ZONE))
    lines = (await memory_search.call(ctx_for(A, tmp_path), {"query": "hit"})).splitlines()
    assert len(lines) == 51
    assert lines[0] == "2026-03-01.md:5: - hit 0"
    assert lines[49] == "2026-03-01.md:54: - hit 49"
    assert lines[50] == "[Showing the first 50 matches; use more words to narrow the search.]"


async def test_get_by_date_and_default_today(data_dir: Path) -> None:
    out = await memory_get.call(ctx_for(A, data_dir), {"date": "2026-03-01"})
    assert out == ("# Daily Memory: 2026-03-01\n\n## Trimmed Context (14:05)\n\n"
                   "- Alice set the budget to 500\n- 密码是 swordfish\n")
    # 01:30 UTC on 2 March is 09:30 in Shanghai, the same date: "today" is 2026-03-02 in the zone.
    with time_machine.travel(datetime(2026, 3, 2, 1, 30, tzinfo=ZoneInfo("UTC")), tick=False):
        today = await memory_get.call(ctx_for(A, data_dir), {})
    assert today == "# Daily Memory: 2026-03-02\n\n## Compacted (09:00)\n\n- alice likes tea\n"
    # 17:00 UTC on 1 March is already 2 March in Shanghai.
    with time_machine.travel(datetime(2026, 3, 1, 17, 0, tzinfo=ZoneInfo("UTC")), tick=False):
        assert await memory_get.call(ctx_for(A, data_dir), {"date": ""}) == today


async def test_get_missing_and_malformed(data_dir: Path) -> None:
    assert await memory_get.call(ctx_for(A, data_dir), {"date": "2026-01-01"}) == "No memory file for 2026-01-01."
    with time_machine.travel(datetime(2026, 3, 5, 12, 0, tzinfo=ZONE), tick=False):
        out = await memory_get.call(ctx_for(A, data_dir), {"date": "yesterday"})
    assert out == "Not a valid date: 'yesterday'. Use the form YYYY-MM-DD, e.g. 2026-03-05."


@pytest.mark.parametrize("crafted", [
    "../telegram_222/2026-03-01", "../x", "../../memory/telegram_222/2026-03-01.md", "2026-03-01/../../telegram_222",
    "/etc/passwd", "2026-03-01.md", "..", "telegram_222/2026-03-01",
])
async def test_session_b_never_sees_a(data_dir: Path, crafted: str) -> None:
    out = await memory_get.call(ctx_for(B, data_dir), {"date": crafted})
    assert out.startswith("Not a valid date:")
    assert "Alice" not in out and "swordfish" not in out


async def test_privacy_between_sessions(data_dir: Path) -> None:
    ctx_b = ctx_for(B, data_dir)
    for query in ("alice", "swordfish", "密码", "budget", "prefers"):
        assert await memory_search.call(ctx_b, {"query": query}) == f"No memory matches for {query!r}."
    assert await memory_get.call(ctx_b, {"date": "2026-03-02"}) == "No memory file for 2026-03-02."
    b_day = await memory_get.call(ctx_b, {"date": "2026-03-01"})
    assert b_day == "# Daily Memory: 2026-03-01\n\n## Cleared Context (10:00)\n\n- Bob plans a trip\n"
    assert await memory_search.call(ctx_for(A, data_dir), {"query": "bob"}) == "No memory matches for 'bob'."


async def test_crafted_session_id_cannot_escape(data_dir: Path) -> None:
    # A session id that looks like a path maps to its own folder, not to A's.
    ctx = ctx_for("../telegram_111", data_dir)
    assert await memory_search.call(ctx, {"query": "alice"}) == "No memory matches for 'alice'."
    assert await memory_get.call(ctx, {"date": "2026-03-01"}) == "No memory file for 2026-03-01."

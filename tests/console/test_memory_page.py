"""console/memory_page.py: which files the memory page may open, and what it lists."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from console.memory_page import PEOPLE_DIR, PERSON_MAX_CHARS, digest, note_path, scan
from memory.notes import NOTES_MAX_CHARS


@dataclass
class Memory:
    root: Path


@dataclass
class Parts:
    memory: Memory


def test_only_a_folder_directly_under_the_memory_root_is_opened(tmp_path: Path) -> None:
    parts = Parts(Memory(tmp_path))
    assert note_path(parts, "session", "telegram_1001") == (tmp_path / "telegram_1001" / "MEMORY.md", NOTES_MAX_CHARS)
    assert note_path(parts, "person", "telegram_7") == (tmp_path / PEOPLE_DIR / "telegram_7" / "PERSON.md",
                                                        PERSON_MAX_CHARS)
    for kind, folder in (("session", ".."), ("session", "."), ("session", "a/b"), ("session", "../etc"),
                         ("session", PEOPLE_DIR), ("person", ".."), ("other", "telegram_1"), ("session", "")):
        with pytest.raises(web.HTTPNotFound):
            note_path(parts, kind, folder)


def test_the_list_names_conversations_and_people(tmp_path: Path) -> None:
    (tmp_path / "telegram_1").mkdir()
    (tmp_path / "telegram_1" / "MEMORY.md").write_text("- a note\n", encoding="utf-8")
    (tmp_path / "telegram_1" / "2026-11-26.md").write_text("# Daily Memory: 2026-11-26\n", encoding="utf-8")
    (tmp_path / "old_chat").mkdir()
    (tmp_path / PEOPLE_DIR / "telegram_7").mkdir(parents=True)
    sessions, people = scan(Parts(Memory(tmp_path)), {"telegram_1": "telegram:1"})
    assert sessions == [{"folder": "old_chat", "session_id": "", "notes": None, "daily": 0},
                        {"folder": "telegram_1", "session_id": "telegram:1", "notes": 9, "daily": 1}]
    assert people == [{"folder": "telegram_7", "size": None}]
    assert digest(None) == "" and digest("a") != digest("b")

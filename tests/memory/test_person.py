"""Tests for memory/person.py: person notes (PERSON.md) by MEMORY.md's rules, and whose prompt they reach."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from core.records import SessionInfo
from memory.notes import NOTE_MAX_CHARS, NOTES_MAX_CHARS
from memory.person import PEOPLE_DIR, PERSON_FILE, PersonNotes, note_lines, prompt_person

ALICE = "telegram:7"


@pytest.fixture
def people(tmp_path: Path) -> PersonNotes:
    return PersonNotes(tmp_path / "memory" / PEOPLE_DIR)


async def test_notes_follow_the_rules_of_memory_md(people: PersonNotes, tmp_path: Path) -> None:
    saved = await people.add(ALICE, "  I am\nvegetarian. ")
    assert saved.status == "saved" and saved.message().startswith(f"Saved to {PERSON_FILE} (")
    path = tmp_path / "memory" / PEOPLE_DIR / "telegram_7" / PERSON_FILE
    assert path.read_text(encoding="utf-8") == "- I am vegetarian.\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # owner-only, as every file the bot writes
    assert (await people.add(ALICE, "i am VEGETARIAN.")).status == "duplicate"
    assert (await people.add(ALICE, "  ")).status == "empty"
    assert (await people.add(ALICE, "x" * (NOTE_MAX_CHARS + 1))).status == "too_long"
    for i in range(NOTES_MAX_CHARS // NOTE_MAX_CHARS + 1):
        await people.add(ALICE, f"{i} " + "y" * (NOTE_MAX_CHARS - 10))
    full = await people.add(ALICE, "one more " + "z" * (NOTE_MAX_CHARS - 20))
    assert full.status == "full" and full.message().startswith(f"Not saved: {PERSON_FILE} is full")
    assert len(path.read_text(encoding="utf-8")) <= NOTES_MAX_CHARS


async def test_remove_one_or_all_and_delete(people: PersonNotes) -> None:
    for note in ("I am vegetarian.", "My sister is Ann.", "I live in Lyon."):
        await people.add(ALICE, note)
    await people.add("telegram:8", "I play the cello.")
    assert await people.remove(ALICE, 2) == ["My sister is Ann."]
    assert people.notes(ALICE) == ["I am vegetarian.", "I live in Lyon."]
    assert await people.remove(ALICE, 3) == [] and await people.remove(ALICE, 0) == []
    assert await people.remove(ALICE, None) == ["I am vegetarian.", "I live in Lyon."]
    assert people.notes(ALICE) == [] and not people.path(ALICE).exists()
    await people.add(ALICE, "again")
    assert people.delete(ALICE) == 1 and not people.folder(ALICE).exists()
    assert people.notes("telegram:8") == ["I play the cello."]  # another person's stay


async def test_the_prompt_text_is_the_same_while_the_file_is_unchanged(people: PersonNotes) -> None:
    assert people.for_prompt(ALICE) is None
    await people.add(ALICE, "I am vegetarian.")
    first = people.for_prompt(ALICE)
    assert first == "- I am vegetarian." and people.for_prompt(ALICE) == first
    with people.path(ALICE).open("a", encoding="utf-8") as f:  # an operator's edit is seen at once
        f.write("- I live in Lyon, France.\n")
    assert people.for_prompt(ALICE) == "- I am vegetarian.\n- I live in Lyon, France."


def test_a_symlinked_file_is_never_read_nor_written(people: PersonNotes, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("- the operator's secret\n", encoding="utf-8")
    people.folder(ALICE).mkdir(parents=True)
    people.path(ALICE).symlink_to(secret)
    assert people.for_prompt(ALICE) is None and people.notes(ALICE) == []


def test_a_person_key_cannot_leave_the_people_folder(people: PersonNotes) -> None:
    assert people.folder("telegram:../../x").name == "telegram_.._.._x"
    with pytest.raises(ValueError):
        people.folder("..")


def test_whose_notes_a_session_prompt_holds() -> None:
    private = SessionInfo("telegram:7", "telegram", "7", user_id="7")
    member = SessionInfo("telegram:group:-5:7", "telegram", "-5", user_id="7", is_group=True)
    shared = SessionInfo("telegram:group:-5", "telegram", "-5", user_id="", is_group=True)
    assert prompt_person(private) == prompt_person(member) == ALICE
    assert prompt_person(shared) is None


def test_note_lines_skip_headings_and_blank_lines() -> None:
    assert note_lines("# About Alice\n\n- likes tea\nplain line\n-   \n") == ["likes tea", "plain line"]

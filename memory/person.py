"""Person notes (DESIGN §1.6): what one person asked the bot to remember about themself, in PERSON.md.

``<data_dir>/memory/people/<person dir>/PERSON.md``, ``<person dir>`` made from ``<channel>:<user id>`` by the
session-folder rule. The notes are written only from that person's private chat (``/me`` and the model's
``memory_write`` with scope ``person``), with the rules of MEMORY.md (:mod:`memory.notes`: one line
``- <note>``, size-capped, no duplicates, replaced atomically on the file's lock). They go into the system
prompt of the person's private chat and of their per-member group sessions, never into a shared group
session, where others read the answers (:func:`prompt_person`). They are kept out of the search index:
the system prompt already holds them.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

from core.files import atomic_write
from core.records import SessionInfo, is_shared_group
from memory.daily import FILE_LOCKS, FileCache, KeyFolders, cut_notes
from memory.notes import NOTES_MAX_CHARS, NoteResult, append_line, lock_key, read_note_file

logger = logging.getLogger(__name__)

PEOPLE_DIR = "people"
PERSON_FILE = "PERSON.md"
#: The largest PERSON.md, in characters (the same cap as MEMORY.md).
PERSON_MAX_CHARS = NOTES_MAX_CHARS
#: What the system prompt shows of PERSON.md at most.
PROMPT_MAX_LINES = 200


def person_of(channel: str, user_id: str) -> str:
    """The person key ``<channel>:<user id>``, as in ``admin_users``."""
    return f"{channel}:{user_id}"


def prompt_person(info: SessionInfo) -> str | None:
    """Whose person notes the session's system prompt holds: the owner of a private chat or of a per-member
    group session; None for a shared group session (where others read the answers) or an unknown owner."""
    if not info.user_id or is_shared_group(info):
        return None
    return person_of(info.channel, info.user_id)


def note_lines(text: str | None) -> list[str]:
    """The notes of a PERSON.md: each non-empty line that is not a heading, without its ``- ``."""
    if not text:
        return []
    notes = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            continue
        note = line[1:].strip() if line.startswith("-") else line
        if note:
            notes.append(note)
    return notes


class PersonNotes:
    """Every person's PERSON.md under ``root`` (``<data_dir>/memory/people``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._cache = FileCache()
        self._folders = KeyFolders(self.root, "person", "people folder")

    def folder(self, person: str) -> Path:
        """The person's folder; ``ValueError`` if the key would name anything outside the root."""
        return self._folders(person)

    def path(self, person: str) -> Path:
        """The person's PERSON.md."""
        return self.folder(person) / PERSON_FILE

    # --- reading -------------------------------------------------------------------------
    def text(self, person: str) -> str | None:
        """PERSON.md's text (None when there is none or it is a symbolic link); re-read only when it changed."""
        return self._cache.read(person, lambda: self.path(person))

    def notes(self, person: str) -> list[str]:
        """The person's notes, in file order."""
        return note_lines(self.text(person))

    def for_prompt(self, person: str, max_chars: int = PERSON_MAX_CHARS) -> str | None:
        """PERSON.md for the system prompt (the same text every turn while the file is unchanged), or None."""
        return cut_notes(self.text(person), PROMPT_MAX_LINES, max_chars, PERSON_FILE)

    # --- writing -------------------------------------------------------------------------
    async def add(self, person: str, text: str) -> NoteResult:
        """Append one note, by MEMORY.md's rules (empty, too long, duplicate and full are refused)."""
        result = await append_line(self.path(person), text)
        logger.info("person %s: note %s (%d characters)", person, result.status, len(result.note))
        return result

    async def remove(self, person: str, number: int | None) -> list[str]:
        """Delete note ``number`` (1-based), or every note for None; return what was deleted ([] if none)."""
        path = self.path(person)
        async with FILE_LOCKS.hold(lock_key(path)):
            return await asyncio.to_thread(self._remove, path, number)

    def _remove(self, path: Path, number: int | None) -> list[str]:
        if path.is_symlink():
            raise ValueError(f"{PERSON_FILE} is a symbolic link; refusing to write through it")
        try:
            old = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        notes = note_lines(old)
        if number is None:
            gone = notes
            keep: list[str] = []
        elif 1 <= number <= len(notes):
            gone = [notes[number - 1]]
            keep = notes[:number - 1] + notes[number:]
        else:
            return []
        if keep:
            atomic_write(path, "".join(f"- {n}\n" for n in keep), parents=True)
        else:
            path.unlink(missing_ok=True)
        return gone

    def delete(self, person: str) -> int:
        """Remove the person's folder and its notes (``/forget`` in their private chat); the notes deleted."""
        folder = self.folder(person)
        if folder.is_symlink():
            folder.unlink()
            return 0
        if not folder.is_dir():
            return 0
        count = len(note_lines(read_note_file(folder / PERSON_FILE)))
        shutil.rmtree(folder)
        self._cache.drop(person)
        logger.info("person %s: notes deleted (%d)", person, count)
        return count



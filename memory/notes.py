"""``memory_write``: durable notes appended to a session's MEMORY.md, capped, without duplicates, atomically.

The same rules write a person's PERSON.md (:mod:`memory.person`) through :func:`append_line`.

A note is one line ``- <text>`` (inner line breaks become spaces). A note the file already holds (same
words, any case or spacing) is not written again. The whole file is rewritten through a temporary file and
``os.replace``, so a crash leaves the old file or the new one, never half a note; writes to one file take
turns on the memory files' per-path lock. A saved note is announced through ``memory_written`` (indexers).
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from core.files import atomic_write
from memory.daily import FILE_LOCKS, LONG_TERM_FILE, DailyMemory, notify_written

logger = logging.getLogger(__name__)

#: Longest single note, in characters.
NOTE_MAX_CHARS = 1000
#: Largest MEMORY.md that memory_write still appends to (the system prompt shows at most 8,000 characters).
NOTES_MAX_CHARS = 8000
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class NoteResult:
    """What happened: ``saved``, ``duplicate``, ``empty``, ``too_long`` or ``full``; the note as written."""

    status: str
    path: Path
    note: str = ""
    size: int = 0

    def message(self) -> str:
        """A sentence for the model."""
        label = self.path.name
        if self.status == "saved":
            return f"Saved to {label} ({self.size:,} of {NOTES_MAX_CHARS:,} characters used)."
        if self.status == "duplicate":
            return f"Already in {label}; nothing written."
        if self.status == "empty":
            return "Nothing to save: the note is empty."
        if self.status == "too_long":
            return (f"Not saved: a note may have at most {NOTE_MAX_CHARS:,} characters; "
                    "shorten it to the essential fact.")
        return (f"Not saved: {label} is full ({self.size:,} of {NOTES_MAX_CHARS:,} characters). "
                "Tell the user; an operator can tidy the file.")


def _key(text: str) -> str:
    return _SPACE.sub(" ", text.removeprefix("- ").strip()).casefold()


def read_note_file(path: Path) -> str | None:
    """A notes file's text (MEMORY.md, PERSON.md), or None when it is missing or a symbolic link (never read
    through one)."""
    if path.is_symlink():
        return None
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return None


def lock_key(path: Path) -> Path:
    """The key of a memory file's lock in ``FILE_LOCKS``: its resolved path."""
    return path.resolve()


def _append(path: Path, note: str) -> NoteResult:
    if path.is_symlink():
        raise ValueError(f"{path.name} is a symbolic link; refusing to write through it")
    try:
        old = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        old = ""
    key = _key(note)
    if any(_key(line) == key for line in old.splitlines()):
        return NoteResult("duplicate", path, note, len(old))
    new = (old if not old or old.endswith("\n") else old + "\n") + f"- {note}\n"
    if len(new) > NOTES_MAX_CHARS:
        return NoteResult("full", path, note, len(old))
    atomic_write(path, new, parents=True)
    return NoteResult("saved", path, note, len(new))


async def append_line(path: Path, text: str) -> NoteResult:
    """Append ``text`` as one note ``- <text>`` to the notes file ``path``, unless empty, too long, known, or
    the file is full; on the file's lock."""
    note = _SPACE.sub(" ", text).strip()
    if not note:
        return NoteResult("empty", path)
    if len(note) > NOTE_MAX_CHARS:
        return NoteResult("too_long", path, note)
    async with FILE_LOCKS.hold(lock_key(path)):
        return await asyncio.to_thread(_append, path, note)


async def append_note(memory: DailyMemory, session_id: str, text: str) -> NoteResult:
    """Append ``text`` as one note to the session's MEMORY.md, unless empty, too long, known, or the file is full."""
    path = memory.session_dir(session_id) / LONG_TERM_FILE
    result = await append_line(path, text)
    note = result.note
    logger.info("session %s: memory_write %s (%d characters)", session_id, result.status, len(note))
    if result.status == "saved":
        await notify_written(memory.on_written, session_id, "note", result.note, path)
    return result

"""Daily memory files: one folder per session, one Markdown file per local date.

Layout (DESIGN 1.6)::

    <root>/<session dir>/YYYY-MM-DD.md
    <root>/<session dir>/MEMORY.md        long-term notes, written by people, read into the system prompt

A daily file is only ever appended to. Its exact bytes are::

    # Daily Memory: 2026-03-01\\n
    \\n
    ## Trimmed Context (14:05)\\n
    \\n
    - a\\n
    - b\\n
    \\n
    ## Compacted (15:40)\\n
    \\n
    - c\\n

that is, the title line once, then per append a blank line, the section header, a blank line and the
body lines (each right-stripped, surrounding blank lines removed, always ending with a newline).

Appends are serialised per file by one ``asyncio.Lock`` per path (DESIGN 9 item 11), and each section
goes to the file in a single ``write`` on a file opened in append mode. The date and the ``HH:MM`` are
taken in the configured zone at the moment of the append, so a summary written after midnight goes to
the next day's file.

Memory is private to its session (DESIGN 9 item 4): every method takes the session id and touches only
that session's folder, which is checked to lie directly inside the root.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import re
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import date as date_cls
from datetime import datetime, tzinfo
from pathlib import Path

from core.files import session_dir_name

logger = logging.getLogger(__name__)

#: Section header for each reason a summary was written.
REASON_HEADERS = {
    "trim": "Trimmed Context",
    "restore": "Trimmed Context",
    "overflow": "Context Overflow Recovery",
    "clear": "Cleared Context",
    "compact": "Compacted",
}
LONG_TERM_FILE = "MEMORY.md"

#: ``on_written(session_id, kind, text, path)``: told after something is written to a session's memory
#: (the ``memory_written`` plugin hook). ``kind`` is "summary", "note" or "injected" (``path`` None).
OnWritten = Callable[[str, str, str, Path | None], Awaitable[None] | None]

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DAILY_FILE = re.compile(r"(\d{4}-\d{2}-\d{2})\.md")


def valid_date(text: str) -> bool:
    """True for a real calendar date written ``YYYY-MM-DD`` (nothing else, no path parts)."""
    if not isinstance(text, str) or not _DATE.fullmatch(text):
        return False
    try:
        date_cls.fromisoformat(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class MemoryHit:
    """One matching line: file name, its date (``""`` for MEMORY.md), 1-based line number, the line."""

    file: str
    date: str
    line_no: int
    line: str


class _PathLocks:
    """One ``asyncio.Lock`` per file path, dropped once nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[Path, asyncio.Lock] = {}
        self._users: dict[Path, int] = {}

    @contextlib.asynccontextmanager
    async def hold(self, path: Path) -> AsyncIterator[None]:
        """Hold the lock of ``path`` for the duration of the ``async with`` block."""
        lock = self._locks.setdefault(path, asyncio.Lock())
        self._users[path] = self._users.get(path, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[path] -= 1
            if not self._users[path]:
                del self._users[path]
                del self._locks[path]


# Shared by every DailyMemory in the process, so two instances on the same folder still take turns.
#: One lock per memory file: appends to a file take turns (daily sections here, notes in memory/notes.py).
FILE_LOCKS = _PathLocks()


def _format_body(body: str) -> str:
    lines = [line.rstrip() for line in body.strip().splitlines()]
    return "\n".join(lines) + "\n"


def _write_append(path: Path, title: str, section: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8", newline="\n") as fh:
        # Position is at the end in append mode: 0 means the file is new (or was empty).
        fh.write((title if fh.tell() == 0 else "") + section)
        fh.flush()


async def notify_written(on_written: OnWritten | None, session_id: str, kind: str, text: str,
                         path: Path | None) -> None:
    """Tell ``on_written`` about a write; a listener that fails is logged and never fails the write."""
    if on_written is None:
        return
    try:
        result = on_written(session_id, kind, text, path)
        if inspect.isawaitable(result):
            await result
    except Exception:  # noqa: BLE001 - indexers are optional; the memory is written
        logger.exception("memory_written listener failed for session %s (%s)", session_id, kind)


class MemoryWritten:
    """The one place writes to memory are announced: the daily files, notes and the summariser are made with
    :meth:`notify` as their ``on_written``; listeners (the plugins' ``memory_written``) subscribe later."""

    def __init__(self) -> None:
        self._listeners: list[OnWritten] = []

    def subscribe(self, listener: OnWritten) -> None:
        """Tell ``listener`` about every later write."""
        self._listeners.append(listener)

    async def notify(self, session_id: str, kind: str, text: str, path: Path | None) -> None:
        """Tell every listener; one that fails is logged, and the write stands."""
        for listener in self._listeners:
            await notify_written(listener, session_id, kind, text, path)


MAX_CACHED_DIRS = 4096


class KeyFolders:
    """The folder of each key (a session id, a person) directly under ``root``, checked once per key.

    A key whose folder name would be empty, ``.`` or ``..``, or whose folder resolves outside the root (a
    link), raises ``ValueError``. The root's links are resolved once, and each key's folder once (the system
    prompt reads MEMORY.md and PERSON.md every turn; a realpath walk is a system call per path component).
    """

    def __init__(self, root: Path, key: str, folder: str) -> None:
        self.root = Path(root)
        #: what a key is and what the root is called, for the errors ("session id", "memory folder")
        self._key, self._folder = key, folder
        self._resolved_root: Path | None = None
        self._checked: dict[str, Path] = {}

    def __call__(self, key: str) -> Path:
        path = self._checked.get(key)
        if path is not None:
            return path
        name = session_dir_name(key)
        if name in ("", ".", ".."):
            raise ValueError(f"{self._key} {key!r} cannot name a {self._folder}")
        if self._resolved_root is None:
            self._resolved_root = self.root.resolve()
        path = self.root / name
        if path.resolve().parent != self._resolved_root:
            raise ValueError(f"{self._key} {key!r} escapes the {self._folder}")
        if len(self._checked) >= MAX_CACHED_DIRS:
            self._checked.clear()
        self._checked[key] = path
        return path


class DailyMemory:
    """Per-session daily memory files under ``root`` (``<data_dir>/memory``), dated in ``zone``."""

    def __init__(self, root: Path, zone: tzinfo, on_written: OnWritten | None = None) -> None:
        self.root = Path(root)
        self.zone = zone
        #: told after each appended summary section and note; may be set after construction
        self.on_written = on_written
        self._dirs = KeyFolders(self.root, "session id", "memory folder")
        #: per session: MEMORY.md, read again when it changed
        self._notes = FileCache()

    # --- paths ------------------------------------------------------------------------------
    def session_dir(self, session_id: str) -> Path:
        """This session's folder; raise ``ValueError`` if the id would name anything outside the root."""
        return self._dirs(session_id)

    def file_for(self, session_id: str, date: str) -> Path:
        """The daily file of ``date`` (``YYYY-MM-DD``, validated) for this session."""
        if not valid_date(date):
            raise ValueError(f"not a date in the form YYYY-MM-DD: {date!r}")
        return self.session_dir(session_id) / f"{date}.md"

    def today(self) -> str:
        """Today's date in the configured zone, ``YYYY-MM-DD``."""
        return datetime.now(self.zone).strftime("%Y-%m-%d")

    # --- writing ----------------------------------------------------------------------------
    async def append(self, session_id: str, reason: str, body: str, when: datetime | None = None) -> Path:
        """Append a summary section for ``reason`` to the day's file (dated at call time) and return its path."""
        header = REASON_HEADERS.get(reason)
        if header is None:
            raise ValueError(f"unknown memory reason {reason!r}; expected one of {', '.join(REASON_HEADERS)}")
        if not body.strip():
            raise ValueError("nothing to append: the summary body is empty")
        if when is None:
            when = datetime.now(self.zone)
        elif when.tzinfo is None:
            raise ValueError("when must be timezone-aware")
        local = when.astimezone(self.zone)
        day = local.strftime("%Y-%m-%d")
        path = self.file_for(session_id, day)
        title = f"# Daily Memory: {day}\n"
        section = f"\n## {header} ({local:%H:%M})\n\n{_format_body(body)}"
        async with FILE_LOCKS.hold(path.resolve()):
            await asyncio.to_thread(_write_append, path, title, section)
        logger.debug("memory: appended %s section to %s", reason, path)
        await notify_written(self.on_written, session_id, "summary", body, path)
        return path

    # --- reading ----------------------------------------------------------------------------
    def read(self, session_id: str, date: str) -> str | None:
        """The daily file of ``date`` (``YYYY-MM-DD``) for this session, or None if there is none."""
        path = self.file_for(session_id, date)
        return _read_text(path)

    def search(self, session_id: str, query: str, limit: int = 50) -> list[MemoryHit]:
        """Lines of this session's memory files containing every whitespace-separated term (any case)."""
        terms = [t.casefold() for t in query.split()]
        if not terms or limit <= 0:
            return []
        hits: list[MemoryHit] = []
        for path, date in self._files(session_id):
            text = _read_text(path)
            if text is None:
                continue
            for number, line in enumerate(text.splitlines(), start=1):
                folded = line.casefold()
                if all(t in folded for t in terms):
                    hits.append(MemoryHit(file=path.name, date=date, line_no=number, line=line.strip()))
                    if len(hits) >= limit:
                        return hits
        return hits

    def _files(self, session_id: str) -> list[tuple[Path, str]]:
        """Daily files newest first, then the other ``*.md`` files (MEMORY.md) by name."""
        folder = self.session_dir(session_id)
        if not folder.is_dir() or folder.is_symlink():
            return []
        dated: list[tuple[Path, str]] = []
        other: list[tuple[Path, str]] = []
        for path in folder.glob("*.md"):
            if path.is_symlink() or not path.is_file():
                continue
            match = _DAILY_FILE.fullmatch(path.name)
            if match and valid_date(match.group(1)):
                dated.append((path, match.group(1)))
            else:
                other.append((path, ""))
        dated.sort(key=lambda item: item[1], reverse=True)
        other.sort(key=lambda item: item[0].name)
        return dated + other

    def long_term_notes(self, session_id: str, max_lines: int = 200, max_chars: int = 8000) -> str | None:
        """This session's MEMORY.md for the system prompt, cut to ``max_lines`` and ``max_chars``, or None.

        Asked before every model call: the file is read again only when its modification time or size
        changed, so most calls cost one ``lstat``.
        """
        text = self._notes.read(session_id, lambda: self.session_dir(session_id) / LONG_TERM_FILE)
        return cut_notes(text, max_lines, max_chars)


class FileCache:
    """Small files read again only when their modification time or size changed: most reads cost one ``lstat``.
    A symbolic link reads as no file (it is never followed out of the memory folder)."""

    def __init__(self) -> None:
        #: per key: the file's path, its (mtime, size) when last read, and the text read
        self._entries: dict[str, tuple[str, tuple[int, int] | None, str | None]] = {}

    def read(self, key: str, path_of: Callable[[], Path]) -> str | None:
        """The text of the file ``path_of()`` (asked once per key), or None when there is none."""
        cached = self._entries.get(key)
        if cached is None:
            path, stamp, text = str(path_of()), None, None
        else:
            path, stamp, text = cached
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            new_stamp = None
        else:
            new_stamp = None if stat.S_ISLNK(st.st_mode) else (st.st_mtime_ns, st.st_size)
        if cached is None or new_stamp != stamp:
            text = _read_text(Path(path)) if new_stamp is not None else None
            if len(self._entries) >= MAX_CACHED_DIRS:
                self._entries.clear()
            self._entries[key] = (path, new_stamp, text)
        return text

    def drop(self, key: str) -> None:
        """Forget what is cached for ``key``."""
        self._entries.pop(key, None)


def cut_notes(text: str | None, max_lines: int, max_chars: int, label: str = LONG_TERM_FILE) -> str | None:
    """A notes file's text cut to ``max_lines`` and ``max_chars`` with a notice, or None when empty."""
    if text is None or not text.strip():
        return None
    text = text.strip("\n")
    lines = text.splitlines()
    total_lines, total_chars = len(lines), len(text)
    kept = "\n".join(lines[:max_lines])
    if len(kept) > max_chars:
        # Cut at the last whole line that fits; a single over-long line is cut hard.
        head = kept[:max_chars + 1]
        kept = head[:head.rfind("\n")] if "\n" in head else kept[:max_chars]
    if kept == text:
        return text
    shown = len(kept.splitlines())
    return (kept + f"\n[{label} cut: showing {shown} of {total_lines} lines, "
            f"{len(kept):,} of {total_chars:,} characters]")


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None

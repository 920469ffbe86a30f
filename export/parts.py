"""The sections of an export: each feature that stores something for a session adds an :class:`ExportPart`.

A part is a name (its key in ``export.json``), a title (its heading in ``export.md``) and an async
``collect(request)`` returning a :class:`Section`: a JSON value and its Markdown, files to copy into the zip,
or for a long list (the history), ``pages``: an async iterator of lists of records (a database page each)
with ``row``, which turns one record into its ``(JSON item, Markdown text)``; the writer calls ``row`` in a
worker thread, a page at a time, so a long list is neither held in memory nor encoded on the event loop.
Parts run in registration order; one that fails is recorded in the export as failed, and the others still
go in.

The built-in parts: ``history`` (every stored message, trimmed and cleared ones included, with date and
role), ``summary`` (the summary injected into the context), ``memory_files`` (the daily files), ``notes``
(MEMORY.md), ``images`` (the photos' files), ``reminders`` and ``person_notes`` (the speaker's PERSON.md, in
their private chat only). Other features add theirs with :meth:`ExportParts.register`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.records import SessionInfo
from media.files import session_media_files
from memory.daily import LONG_TERM_FILE, session_dir_name, valid_date
from memory.person import PERSON_FILE, note_lines
from store.exports import PAGE, message_page, session_row
from store.reminders import session_reminders

if TYPE_CHECKING:
    from dispatcher.commands import Services

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ExportRequest:
    """What is exported: the session, whose person notes go in (None: none), the app's parts, the zone."""

    session: SessionInfo
    #: ``<channel>:<user id>`` of the speaker whose person notes go in; None in a group chat
    person: str | None
    services: Services
    zone: tzinfo


Pages = Callable[[], AsyncIterator[list[Any]]]


@dataclass
class Section:
    """One part's content: ``data`` (JSON) and ``markdown``, or ``pages`` and ``row`` for a streamed list;
    ``files`` are ``(name in the zip, path on disk)`` pairs copied into the zip as they are."""

    data: Any = None
    markdown: str = ""
    files: list[tuple[str, Path]] = field(default_factory=list)
    #: a long list: its records, a page at a time, and one record as (JSON item, Markdown) (a worker thread)
    pages: Pages | None = None
    row: Callable[[Any], tuple[Any, str]] | None = None
    #: what the reply says of this part ("1 daily memory file"; with ``pages``, the noun after their count), or ""
    summary: str = ""


@dataclass(frozen=True, slots=True)
class ExportPart:
    """A named section of every export."""

    name: str
    title: str
    collect: Callable[[ExportRequest], Awaitable[Section]]


class ExportParts:
    """The parts of an export, in order. Registering a name again replaces that part in place."""

    def __init__(self, parts: list[ExportPart] | None = None) -> None:
        self._parts: dict[str, ExportPart] = {p.name: p for p in parts or []}

    def register(self, part: ExportPart) -> None:
        """Add ``part`` (or replace the part of that name)."""
        self._parts[part.name] = part

    def all(self) -> list[ExportPart]:
        """Every part, in registration order."""
        return list(self._parts.values())


# --- helpers -------------------------------------------------------------------------------------------
def iso(when: datetime | None) -> str | None:
    """An aware datetime as ISO 8601 (UTC), or None."""
    return when.isoformat() if when is not None else None


def local(when: datetime | None, zone: tzinfo) -> str:
    """A datetime in the configured zone, ``YYYY-MM-DD HH:MM``."""
    return when.astimezone(zone).strftime("%Y-%m-%d %H:%M") if when is not None else "?"


def message_text(content: Any) -> str:
    """A stored message as readable text: its text, its tool calls, and a word for what is not text."""
    if not isinstance(content, dict):
        return str(content)
    body = content.get("content")
    if isinstance(body, list):
        pieces = []
        for part in body:
            if isinstance(part, dict) and part.get("type") == "text":
                pieces.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                pieces.append(f"[{part.get('type', 'part')}]")
        text = "\n".join(pieces)
    else:
        text = "" if body is None else str(body)
    for call in content.get("tool_calls") or []:
        fn = (call.get("function") or {}) if isinstance(call, dict) else {}
        text += f"\n→ {fn.get('name', '?')}({fn.get('arguments', '')})"
    return text.strip()


def plural(n: int, noun: str) -> str:
    """``"2 daily memory files"``; ``""`` for none (the reply leaves empty parts out)."""
    return "" if not n else f"{n} {noun}" + ("" if n == 1 else "s")


def _fence(text: str) -> str:
    """``text`` in a Markdown block quote (a stored message can hold any Markdown, headings included)."""
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines()) or ">"


# --- the built-in parts ----------------------------------------------------------------------------------
async def history(request: ExportRequest) -> Section:
    """Every stored message, oldest first; those before the context boundary are marked."""
    services = request.services
    sid = request.session.session_id
    row = await services.store.run(session_row, sid)
    start = row["context_start_seq"] if row else 1
    zone = request.zone

    async def pages() -> AsyncIterator[list[Any]]:
        after = 0
        while True:
            page = await services.store.run_long(message_page, sid, after, PAGE)  # off the loop
            if page:
                yield page
            if len(page) < PAGE:
                return
            after = page[-1][0]

    def one(record: Any) -> tuple[Any, str]:
        seq, role, content, created = record
        in_context = seq >= start
        item = {"seq": seq, "role": role, "created_at": iso(created), "in_context": in_context, "content": content}
        mark = "" if in_context else " · no longer in the context"
        return item, f"**{role}** · {local(created, zone)} · #{seq}{mark}\n\n{_fence(message_text(content))}\n\n"

    return Section(pages=pages, row=one, summary="stored messages")  # the writer counts the rows


async def summary(request: ExportRequest) -> Section:
    """The session's row: when it began, its boundary, and the summary injected into its context."""
    row = await request.services.store.run(session_row, request.session.session_id)
    if row is None:
        return Section(data=None, markdown="Nothing is stored for this conversation.")
    data = {k: (iso(v) if isinstance(v, datetime) else v) for k, v in row.items()}
    lines = [f"- Conversation: {row['session_id']}" + (f" ({row['title']})" if row["title"] else ""),
             f"- Started: {local(row['created_at'], request.zone)}; last active: "
             f"{local(row['last_active'], request.zone)}",
             f"- The model's context starts at message #{row['context_start_seq']}"]
    if row["summary"]:
        lines.append(f"- Summary of {row['summary_turns']} earlier turn(s) now in the context:\n\n"
                     + _fence(row["summary"]))
    else:
        lines.append("- No summary is in the context now.")
    return Section(data=data, markdown="\n".join(lines))


def _memory_files(folder: Path) -> list[Path]:
    if not folder.is_dir() or folder.is_symlink():
        return []
    daily = [p for p in folder.glob("*.md") if valid_date(p.stem) and p.is_file() and not p.is_symlink()]
    return sorted(daily)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


async def memory_files(request: ExportRequest) -> Section:
    """The session's daily memory files (the summaries of what left the context), copied into the zip too."""
    folder = request.services.memory.session_dir(request.session.session_id)
    paths = await asyncio.to_thread(_memory_files, folder)
    data, md = [], []
    for path in paths:
        text = await asyncio.to_thread(_read, path)
        data.append({"date": path.stem, "file": f"memory/{path.name}", "text": text})
        md.append(text.replace("\n# ", "\n#### ").replace("\n## ", "\n#### ").lstrip("# ").strip())
    return Section(data=data, markdown="\n\n".join(f"### {m}" for m in md) or "No daily memory files.",
                   files=[(f"memory/{p.name}", p) for p in paths], summary=plural(len(paths), "daily memory file"))


async def notes(request: ExportRequest) -> Section:
    """The session's long-term notes (MEMORY.md)."""
    path = request.services.memory.session_dir(request.session.session_id) / LONG_TERM_FILE
    text = await asyncio.to_thread(_text_or_none, path)
    if text is None:
        return Section(data=None, markdown=f"No long-term notes ({LONG_TERM_FILE}).")
    return Section(data={"file": f"memory/{LONG_TERM_FILE}", "text": text}, markdown=text.strip() or "(empty)",
                   files=[(f"memory/{LONG_TERM_FILE}", path)], summary=LONG_TERM_FILE)


def _text_or_none(path: Path) -> str | None:
    if path.is_symlink() or not path.is_file():
        return None
    return _read(path)


async def images(request: ExportRequest) -> Section:
    """The session's photos: the ~1 MP JPEG files kept with it (media/files.py), copied into the zip."""
    data_dir = request.services.config.current.data_path()
    paths = await asyncio.to_thread(session_media_files, data_dir, request.session.session_id)
    if not paths:
        return Section(data=[], markdown="No images.")
    listed = [{"file": f"images/{p.name}", "bytes": p.stat().st_size} for p in paths]
    return Section(data=listed, markdown="\n".join(f"- {item['file']}" for item in listed),
                   files=[(f"images/{p.name}", p) for p in paths], summary=plural(len(paths), "image"))


async def reminders(request: ExportRequest) -> Section:
    """The session's reminders: pending, sent and cancelled (store/reminders.py)."""
    listed = await session_reminders(request.services.store, request.session.session_id)
    if not listed:
        return Section(data=[], markdown="No reminders.")
    lines = []
    for r in listed:
        due = datetime.fromisoformat(r["due_at"]).astimezone(request.zone).strftime("%Y-%m-%d %H:%M")
        repeat = f", every {r['every']}" if r["every"] else ""
        lines.append(f"- {due}{repeat} ({r['status']}): {r['text']}")
    return Section(data=listed, markdown="\n".join(lines), summary=plural(len(listed), "reminder"))


async def person_notes(request: ExportRequest) -> Section:
    """The speaker's person notes, in their private chat only (a group's export is read by the group)."""
    if request.person is None:
        return Section(data=None, markdown="Not included in a group chat: your person notes are private. Send "
                                           "/export in your private chat with me to get them.")
    people = request.services.people
    text = await asyncio.to_thread(people.text, request.person)
    listed = note_lines(text)
    if not listed:
        return Section(data={"person": request.person, "notes": []}, markdown="I keep no notes about you.")
    return Section(data={"person": request.person, "notes": listed},
                   markdown="\n".join(f"{i}. {n}" for i, n in enumerate(listed, start=1)),
                   files=[(f"person/{PERSON_FILE}", people.path(request.person))],
                   summary=plural(len(listed), "person note"))


def default_parts() -> ExportParts:
    """The built-in parts, in their order in the file."""
    return ExportParts([
        ExportPart("summary", "Conversation", summary),
        ExportPart("history", "History", history),
        ExportPart("memory_files", "Daily memory files", memory_files),
        ExportPart("notes", "Long-term notes (MEMORY.md)", notes),
        ExportPart("images", "Images", images),
        ExportPart("reminders", "Reminders", reminders),
        ExportPart("person_notes", "Your person notes (PERSON.md)", person_notes),
    ])


def file_stem(session_id: str, when: datetime) -> str:
    """``export-<session dir>-<YYYYmmdd-HHMMSS>``."""
    return f"export-{session_dir_name(session_id)}-{when:%Y%m%d-%H%M%S}"


def dumps(value: Any) -> str:
    """JSON text for the export (non-ASCII kept as it is)."""
    return json.dumps(value, ensure_ascii=False, default=str)

"""The memory page: read and edit each conversation's MEMORY.md and each person's PERSON.md, within their caps.

A save is refused, with the text kept in the form, when it is over the cap or when the file changed since
the page was loaded (the model may have written a note meanwhile). Files are replaced atomically, on the
memory files' per-path lock; a conversation's search index is rebuilt from its files afterwards.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from console.server import console_of
from core.files import atomic_write
from memory.daily import FILE_LOCKS, LONG_TERM_FILE, session_dir_name
from memory.notes import NOTES_MAX_CHARS, read_note_file
from memory.person import PEOPLE_DIR, PERSON_FILE, PERSON_MAX_CHARS

if TYPE_CHECKING:
    from dispatcher.commands import Services

logger = logging.getLogger(__name__)

_FOLDER = re.compile(r"[A-Za-z0-9_.-]+")


def add_routes(router: web.UrlDispatcher) -> None:
    """Register the memory pages."""
    router.add_get("/memory", memory_list)
    router.add_get("/memory/edit", edit_form)
    router.add_post("/memory/edit", save)


def _root(services: Services) -> Path:
    return Path(services.memory.root)


def note_path(services: Services, kind: str, folder: str) -> tuple[Path, int]:
    """The file a ``kind`` (``session`` or ``person``) and folder name stand for, and its cap; 404 otherwise."""
    if not _FOLDER.fullmatch(folder) or folder in (".", "..") or (kind == "session" and folder == PEOPLE_DIR):
        raise web.HTTPNotFound(text="No such memory folder.")
    if kind == "session":
        return _root(services) / folder / LONG_TERM_FILE, NOTES_MAX_CHARS
    if kind == "person":
        return _root(services) / PEOPLE_DIR / folder / PERSON_FILE, PERSON_MAX_CHARS
    raise web.HTTPNotFound(text="No such kind of memory.")


def digest(text: str | None) -> str:
    """A short fingerprint of a file's text ('' for no file)."""
    return "" if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]




def scan(services: Services, names: dict[str, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each conversation folder (with its session id when known) and each person folder, with sizes."""
    root = _root(services)
    sessions, people = [], []
    if root.is_dir():
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
            if folder.name == PEOPLE_DIR:
                continue
            notes = folder / LONG_TERM_FILE
            daily = [p for p in folder.glob("*.md") if p.name != LONG_TERM_FILE]
            sessions.append({"folder": folder.name, "session_id": names.get(folder.name, ""),
                             "notes": notes.stat().st_size if notes.is_file() else None, "daily": len(daily)})
        people_root = root / PEOPLE_DIR
        if people_root.is_dir():
            for folder in sorted(p for p in people_root.iterdir() if p.is_dir() and not p.is_symlink()):
                note = folder / PERSON_FILE
                people.append({"folder": folder.name, "size": note.stat().st_size if note.is_file() else None})
    return sessions, people


async def memory_list(request: web.Request) -> web.StreamResponse:
    """Every conversation's notes and every person's notes, with links to edit them."""
    console = console_of(request)
    services = console.services
    rows = await services.store.sessions.listing("", 10_000)
    names = {session_dir_name(r.session_id): r.session_id for r in rows}
    titles = {session_dir_name(r.session_id): r.title or "" for r in rows}
    # a person's folder is named from "<channel>:<user id>", as their private chat's session id is
    persons = {session_dir_name(r.session_id): r.title or "" for r in rows if not r.is_group}
    sessions, people = await asyncio.to_thread(scan, services, names)
    with_sessions = {s["folder"] for s in sessions}
    for folder, sid in names.items():  # conversations with no memory folder yet can get notes too
        if folder not in with_sessions:
            sessions.append({"folder": folder, "session_id": sid, "notes": None, "daily": 0})
    for row in sessions:
        row["title"] = titles.get(row["folder"], "")
    sessions.sort(key=lambda r: (not r["session_id"], (r["title"] or r["session_id"] or r["folder"]).casefold()))
    for person in people:
        person["name"] = persons.get(person["folder"], "")
    return console.render(request, "memory.html", title="Memory", sessions=sessions, people=people,
                          notes_file=LONG_TERM_FILE, person_file=PERSON_FILE)


def _label(kind: str, folder: str, session_id: str | None = None, title: str = "") -> str:
    if kind == "session":
        who = f"{title} ({session_id})" if title and session_id else session_id or folder
        return f"{LONG_TERM_FILE} of {who}"
    return f"{PERSON_FILE} of {title} ({folder})" if title else f"{PERSON_FILE} of {folder}"


async def edit_form(request: web.Request) -> web.StreamResponse:
    """A notes file in a text area, with its cap."""
    console = console_of(request)
    kind, folder = request.query.get("kind", ""), request.query.get("dir", "")
    path, cap = note_path(console.services, kind, folder)
    text = await asyncio.to_thread(read_note_file, path)
    sid, name = await _session_of(console.services, folder, kind)
    return console.render(request, "memory_edit.html", title=_label(kind, folder, sid, name), kind=kind, folder=folder,
                          text=text or "", cap=cap, digest=digest(text), exists=text is not None)


async def save(request: web.Request) -> web.StreamResponse:
    """Replace a notes file; refused (text kept) when over the cap or when the file changed meanwhile."""
    console = console_of(request)
    services = console.services
    form = await request.post()
    kind, folder = str(form.get("kind", "")), str(form.get("dir", ""))
    path, cap = note_path(services, kind, folder)
    text = str(form.get("text", "")).replace("\r\n", "\n")
    loaded = str(form.get("digest", ""))
    sid, name = await _session_of(services, folder, kind)
    title = _label(kind, folder, sid, name)

    def again(error: str, status: int = 400) -> web.Response:
        return console.render(request, "memory_edit.html", status=status, title=title, kind=kind,
                              folder=folder, text=text, cap=cap, digest=loaded, exists=True, error=error)

    if len(text) > cap:
        return again(f"Not saved: the notes are {len(text):,} characters long; at most {cap:,} fit. "
                     "Shorten them and save again.")
    async with FILE_LOCKS.hold(path.resolve()):
        current = await asyncio.to_thread(read_note_file, path)
        if digest(current) != loaded:
            return again("Not saved: the file changed since this page was loaded (the bot may have written a "
                         "note). Copy your text, reload the page, and apply your change again.", status=409)
        if text.strip() and not text.endswith("\n"):
            text += "\n"
        await asyncio.to_thread(atomic_write, path, text, parents=True)
    logger.info("web console: %s saved (%d characters)", path.relative_to(_root(services)), len(text))
    if sid and services.memory_search is not None:
        _reindex(services, sid)
    return console.render(request, "memory_edit.html", title=title, kind=kind, folder=folder,
                          text=text, cap=cap, digest=digest(text), exists=True,
                          notice=f"Saved ({len(text):,} of {cap:,} characters).")


async def _session_of(services: Services, folder: str, kind: str) -> tuple[str | None, str]:
    """The conversation a notes folder belongs to (None for a person's) and its title or the person's name."""
    rows = await services.store.sessions.listing("", 10_000)
    row = next((r for r in rows if session_dir_name(r.session_id) == folder and (kind == "session" or not r.is_group)),
               None)
    if row is None:
        return None, ""
    return (row.session_id if kind == "session" else None), row.title or ""


def _reindex(services: Services, session_id: str) -> None:
    """Rebuild the conversation's search index from its files, in the background."""
    async def run() -> None:
        try:
            await services.memory_search.index.rebuild(session_id)
        except Exception:  # noqa: BLE001 - the notes are saved; /memory rebuild can index them later
            logger.exception("web console: re-indexing %s failed", session_id)

    task = asyncio.create_task(run(), name=f"console reindex {session_id}")
    tasks = services.memory_search.index.pending  # a stop waits for them with the memory index's own
    tasks.add(task)
    task.add_done_callback(tasks.discard)

"""``/forget``: delete a session's stored history, memory files, notes and search index for good.

The database part is one transaction (store/sessions.py ``Sessions.forget``): every table of the schema with a
``session_id`` column loses the session's rows (so tables added later are covered), children before
``sessions``; a group session also loses its group's background. The files part removes
the session's memory folder: its daily files and MEMORY.md (and nothing outside it; links are not followed).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from media.files import delete_session_media
from memory.daily import LONG_TERM_FILE, DailyMemory

if TYPE_CHECKING:
    from store.store import Store

logger = logging.getLogger(__name__)


@dataclass
class ForgetReport:
    """What was deleted: rows per table, and the memory file names."""

    rows: dict[str, int] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    #: the person notes deleted with a private chat (None: not asked, a group)
    person_notes: int | None = None
    #: image files of the session's photos (``<data_dir>/media/<session dir>/``)
    images: int = 0

    def describe(self) -> str:
        """A sentence or two for the user."""
        messages = self.rows.get("messages", 0)
        # the memory files' passages and the stored turns' vectors (history_search's meaning half)
        chunks = self.rows.get("memory_chunks", 0) + self.rows.get("message_vectors", 0)
        daily = [f for f in self.files if f != LONG_TERM_FILE]
        parts = [f"{messages} stored message{'s' if messages != 1 else ''}",
                 f"{len(daily)} daily memory file{'s' if len(daily) != 1 else ''}",
                 "the long-term notes (MEMORY.md)" if LONG_TERM_FILE in self.files else "no long-term notes",
                 f"{chunks} search index entr{'ies' if chunks != 1 else 'y'}"]
        group = self.rows.get("group_messages", 0)
        if group:
            parts.append(f"{group} message{'s' if group != 1 else ''} of this group's background")
        if self.images:
            parts.append(f"{self.images} image file{'s' if self.images != 1 else ''}")
        other = sum(n for t, n in self.rows.items()
                    if t not in ("messages", "memory_chunks", "message_vectors", "sessions", "group_messages"))
        if other:
            parts.append(f"{other} other record{'s' if other != 1 else ''}")
        if self.person_notes is not None:
            n = self.person_notes
            parts.append(f"your {n} person note{'s' if n != 1 else ''} (/me)" if n else "no person notes (/me)")
        return "Deleted for good: " + ", ".join(parts) + "."


def delete_memory_files(memory: DailyMemory, session_id: str) -> list[str]:
    """Remove the session's memory folder and the files in it; return the names of the ``.md`` files removed."""
    folder = memory.session_dir(session_id)
    if folder.is_symlink():
        folder.unlink()
        return []
    if not folder.is_dir():
        return []
    removed: list[str] = []
    for path in sorted(folder.iterdir()):
        if path.is_dir() and not path.is_symlink():
            logger.warning("session %s: %s is a folder inside the memory folder; left in place", session_id, path.name)
            continue
        path.unlink()
        if path.suffix == ".md":
            removed.append(path.name)
    try:
        folder.rmdir()
    except OSError:
        pass
    return removed


async def forget_session(store: Store, memory: DailyMemory, session_id: str) -> ForgetReport:
    """Delete everything the bot keeps about a session: database rows first, then the memory files and the
    image files of its photos (``<data_dir>/media/<session dir>/``, beside ``<data_dir>/memory``)."""
    rows = await store.sessions.forget(session_id)
    files = await asyncio.to_thread(delete_memory_files, memory, session_id)
    images = await asyncio.to_thread(delete_session_media, memory.root.parent, session_id)
    report = ForgetReport(rows=rows, files=files, images=images)
    logger.info("session %s: forgotten (%s rows, %d files)", session_id, sum(rows.values()), len(files))
    return report

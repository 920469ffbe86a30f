"""The semantic memory index: passages of a session's memory files and their embeddings, in ``memory_chunks``.

A passage is one line of a daily file's sections or of MEMORY.md (headers and blank lines left out; a
long line is cut at sentence ends). Passages are embedded when they are written (the ``memory_written``
hook) and stored per session with the embedding model's name; the same text is indexed once per session.
When the embedder fails or semantic search is off, passages are still stored, without a vector, so the
keyword half of the search finds them; ``/memory rebuild`` embeds them again from the files. When the
model changes (a new local model after an upgrade, or another ``memory_embedding_model``), the search
embeds the session's passages again from their stored text, a batch per search (:meth:`MemoryIndex.refresh`).

The SQL is store/chunks.py's, run through ``store.run(fn)``: one transaction each.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory.daily import LONG_TERM_FILE, DailyMemory, valid_date
from memory.embeddings import BaseEmbedder, to_bytes
from store import chunks
from store.chunks import ChunkRow, delete_session_chunks
from store.models import utcnow

if TYPE_CHECKING:
    from store.store import Store

logger = logging.getLogger(__name__)

#: Longest passage, in characters; a longer line is cut at sentence ends (or hard, if it has none).
CHUNK_CHARS = 500
_BULLET = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？;；])\s*")
_DAILY = re.compile(r"(\d{4}-\d{2}-\d{2})\.md")


def chunk_text(text: str, max_chars: int = CHUNK_CHARS) -> list[str]:
    """The passages of a memory text: its non-blank, non-header lines, bullets stripped, cut to ``max_chars``."""
    chunks: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = _BULLET.sub("", line).strip()
        if not line:
            continue
        chunks.extend(cut_at_sentences(line, max_chars))
    return chunks


def cut_at_sentences(text: str, limit: int, sentence_end: re.Pattern[str] = _SENTENCE_END) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters: cut after the last sentence end (``sentence_end``)
    that keeps at least a quarter of ``limit``, else at a space, else hard. The knowledge base cuts its
    paragraphs with it too, at its own sentence ends."""
    pieces: list[str] = []
    rest = text
    while len(rest) > limit:
        head = rest[:limit]
        cut = max((m.end() for m in sentence_end.finditer(head) if 0 < m.end() < limit), default=0)
        if cut < limit // 4:
            space = head.rfind(" ")
            cut = space if space > limit // 4 else limit
        pieces.append(rest[:cut].strip())
        rest = rest[cut:].strip()
    if rest:
        pieces.append(rest)
    return pieces


def date_of(source: str) -> str:
    """The date a source file is about (``YYYY-MM-DD``), or ``""`` for MEMORY.md."""
    match = _DAILY.fullmatch(source)
    return match.group(1) if match and valid_date(match.group(1)) else ""


class MemoryIndex:
    """One process's access to the index: embeds passages with ``embedder`` (None: keywords only)."""

    def __init__(self, store: Store, embedder: BaseEmbedder | None, memory: DailyMemory) -> None:
        self.store = store
        self.embedder = embedder
        self.memory = memory
        #: what ``embedder`` was built from (model setting, endpoint, key), to rebuild it when they change
        self.embedder_settings: tuple[str, ...] | None = None
        #: indexing running in the background (:meth:`add` of what was just written)
        self.pending: set[asyncio.Task] = set()
        #: per session, each memory file's (modification time, size) when this process last indexed it
        self._synced: dict[str, dict[str, tuple[int, int]]] = {}

    @property
    def model_name(self) -> str:
        """The embedding model's name, or ``""`` when semantic search is off."""
        return self.embedder.name if self.embedder is not None else ""

    async def _rows(self, session_id: str, items: list[tuple[str, str, str]],
                    embed: bool = True) -> list[dict[str, Any]]:
        """Rows for ``(source, kind, text)`` passages, embedded when ``embed`` and an embedder is set and answers."""
        vectors = None
        if embed and self.embedder is not None and items:
            try:
                vectors = await self.embedder.embed([text for _, _, text in items])
            except Exception:  # noqa: BLE001 - keywords still find the passages; /memory rebuild embeds them
                logger.exception("session %s: embedding %d passages failed; stored for keyword search only",
                                  session_id, len(items))
        now = utcnow()
        rows = []
        for i, (source, kind, text) in enumerate(items):
            vector = vectors[i] if vectors is not None else None
            rows.append({"session_id": session_id, "source": source[:64], "kind": kind, "text": text,
                         "model": self.model_name if vector is not None else "",
                         "dim": int(vector.shape[0]) if vector is not None else 0,
                         "vector": to_bytes(vector) if vector is not None else None, "created_at": now})
        return rows

    async def add(self, session_id: str, kind: str, text: str, source: str) -> int:
        """Index what was written to ``source`` (a file name); return how many new passages were stored."""
        items = [(source, kind, chunk) for chunk in dict.fromkeys(chunk_text(text))]
        if not items:
            return 0
        added = await self.store.run(chunks.insert_new, session_id, await self._rows(session_id, items))
        logger.debug("session %s: indexed %d new passages from %s", session_id, added, source)
        return added

    def files(self, session_id: str) -> list[Path]:
        """The session's daily files (oldest first), then MEMORY.md, if they exist."""
        folder = self.memory.session_dir(session_id)
        if not folder.is_dir() or folder.is_symlink():
            return []
        daily = sorted(p for p in folder.glob("*.md") if date_of(p.name) and p.is_file() and not p.is_symlink())
        notes = folder / LONG_TERM_FILE
        return daily + ([notes] if notes.is_file() and not notes.is_symlink() else [])

    async def rebuild(self, session_id: str) -> tuple[int, int]:
        """Index the session's memory files anew with the current model; return ``(removed, indexed)``."""
        items: list[tuple[str, str, str]] = []
        for path in self.files(session_id):
            kind = "note" if path.name == LONG_TERM_FILE else "summary"
            text = path.read_text(encoding="utf-8", errors="replace")
            items.extend((path.name, kind, chunk) for chunk in dict.fromkeys(chunk_text(text)))
        self.forget(session_id)
        rows = await self._rows(session_id, items)
        removed, indexed = await self.store.run(chunks.replace_session, session_id, rows)
        logger.info("session %s: memory index rebuilt (%d passages, was %d)", session_id, indexed, removed)
        return removed, indexed

    async def refresh(self, rows: list[ChunkRow]) -> int:
        """Embed stored passages again with the current model (their text is kept); return how many.

        Raises what the embedder raises; the passages then keep their old vectors."""
        if self.embedder is None or not rows:
            return 0
        vectors = await self.embedder.embed([row.text for row in rows])
        await self.store.run(chunks.set_vectors, [
            {"row_id": row.id, "new_model": self.model_name, "new_dim": int(vector.shape[0]),
             "new_vector": to_bytes(vector)} for row, vector in zip(rows, vectors, strict=True)])
        return len(rows)
    def _signatures(self, session_id: str) -> dict[str, tuple[int, int]]:
        found = {}
        for path in self.files(session_id):
            try:
                st = path.stat()
            except OSError:
                continue
            found[path.name] = (st.st_mtime_ns, st.st_size)
        return found

    async def sync(self, session_id: str, *, embed: bool = True) -> int:
        """Bring the session's index in step with its files (an operator may edit MEMORY.md while the bot
        runs): each file changed since this process last looked is indexed again, only its new passages
        embedded, passages it no longer holds deleted, and the passages of deleted files dropped. Returns
        how many passages were added or deleted. ``embed`` false (a search): new passages are stored without a
        vector, for their words, and embedded later (memory/search.py)."""
        now = await asyncio.to_thread(self._signatures, session_id)
        before = self._synced.get(session_id)
        if before == now:
            return 0
        changed = 0
        if before is None or set(before) - set(now):
            changed += await self.store.run(chunks.drop_sources, session_id, list(now))
        for name, signature in now.items():
            if before is not None and before.get(name) == signature:
                continue
            path = self.memory.session_dir(session_id) / name
            kind = "note" if name == LONG_TERM_FILE else "summary"
            text = await asyncio.to_thread(path.read_text, encoding="utf-8", errors="replace")
            passages = list(dict.fromkeys(chunk_text(text)))
            deleted, fresh = await self.store.run(chunks.sync_source, session_id, name, passages)
            items = [(name, kind, t) for t in fresh]
            rows = await self._rows(session_id, items, embed) if fresh else []
            added = await self.store.run(chunks.insert_new, session_id, rows) if fresh else 0
            changed += deleted + added
        self._synced[session_id] = now
        if changed:
            logger.info("session %s: memory index in step with the files (%d passages added or deleted)",
                        session_id, changed)
        return changed

    def forget(self, session_id: str) -> None:
        """Forget what this process knew of the session's files (after /forget or a rebuild)."""
        self._synced.pop(session_id, None)

    async def stamp(self, session_id: str) -> tuple[int, int]:
        """A cheap version of the session's index (count and newest id)."""
        return await self.store.run(chunks.stamp, session_id)

    async def load(self, session_id: str) -> list[ChunkRow]:
        """Every passage of the session, oldest first."""
        return await self.store.run(chunks.load_session, session_id)

    async def models(self, session_id: str) -> dict[str, int]:
        """Passages per embedding model name (``""``: stored without a vector)."""
        return await self.store.run(chunks.models, session_id)

    async def delete(self, session_id: str) -> int:
        """Delete the session's index; return how many passages went."""
        return await self.store.run(delete_session_chunks, [session_id])

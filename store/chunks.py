"""The passages of the semantic memory index (table ``memory_chunks``): a session's memory-file passages with
their embeddings (memory/index.py decides what is stored; this module is the SQL).

All functions are transaction functions: ``store.run(fn, ...)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.engine import Connection

from store.models import MemoryChunkRow

_CHUNKS = MemoryChunkRow.__table__
_C = _CHUNKS.c


@dataclass(frozen=True)
class ChunkRow:
    """One stored passage as the search reads it."""

    id: int
    source: str
    kind: str
    text: str
    model: str
    dim: int
    vector: bytes | None


def delete_session_chunks(conn: Connection, session_ids: Iterable[str]) -> int:
    """Delete the index of these sessions; return how many passages went (for cleanup and /forget)."""
    ids = list(session_ids)
    if not ids:
        return 0
    return conn.execute(delete(_CHUNKS).where(_C.session_id.in_(ids))).rowcount or 0


def insert_new(conn: Connection, session_id: str, rows: list[dict[str, Any]]) -> int:
    """Insert the rows whose text this session has not indexed yet; return how many."""
    texts = list({r["text"] for r in rows})
    seen: set[str] = set()
    for start in range(0, len(texts), 500):
        seen.update(conn.execute(select(_C.text).where(
            _C.session_id == session_id, _C.text.in_(texts[start:start + 500]))).scalars())
    fresh: list[dict[str, Any]] = []
    for row in rows:
        if row["text"] not in seen:
            seen.add(row["text"])
            fresh.append(row)
    if fresh:
        conn.execute(insert(_CHUNKS), fresh)
    return len(fresh)


def replace_session(conn: Connection, session_id: str, rows: list[dict[str, Any]]) -> tuple[int, int]:
    """Delete the session's passages and insert ``rows``; return ``(removed, inserted)``."""
    removed = delete_session_chunks(conn, [session_id])
    return removed, insert_new(conn, session_id, rows)


def stamp(conn: Connection, session_id: str) -> tuple[int, int]:
    """``(count, max id)`` of a session's passages: changes whenever a passage is added or deleted."""
    count, top = conn.execute(select(func.count(), func.max(_C.id)).where(_C.session_id == session_id)).one()
    return int(count or 0), int(top or 0)


def load_session(conn: Connection, session_id: str) -> list[ChunkRow]:
    """Every passage of the session, oldest first."""
    rows = conn.execute(select(_C.id, _C.source, _C.kind, _C.text, _C.model, _C.dim, _C.vector)
                        .where(_C.session_id == session_id).order_by(_C.id))
    return [ChunkRow(*row) for row in rows]


def set_vectors(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Store new vectors (``row_id``, ``new_model``, ``new_dim``, ``new_vector``) for existing passages."""
    conn.execute(update(_CHUNKS).where(_C.id == bindparam("row_id")).values(
        model=bindparam("new_model"), dim=bindparam("new_dim"), vector=bindparam("new_vector")), rows)


def sync_source(conn: Connection, session_id: str, source: str, texts: list[str]) -> tuple[int, list[str]]:
    """Delete the passages of ``source`` it no longer holds; return ``(deleted, texts not indexed yet)``."""
    stored = conn.execute(select(_C.id, _C.text).where(_C.session_id == session_id, _C.source == source)).all()
    wanted = set(texts)
    stale = [row_id for row_id, text in stored if text not in wanted]
    for start in range(0, len(stale), 500):
        conn.execute(delete(_CHUNKS).where(_C.id.in_(stale[start:start + 500])))
    seen: set[str] = set()
    for start in range(0, len(texts), 500):
        seen.update(conn.execute(select(_C.text).where(
            _C.session_id == session_id, _C.text.in_(texts[start:start + 500]))).scalars())
    return len(stale), [t for t in texts if t not in seen]


def drop_sources(conn: Connection, session_id: str, keep: list[str]) -> int:
    """Delete the passages of files that are gone (any source not in ``keep``)."""
    return conn.execute(delete(_CHUNKS).where(_C.session_id == session_id, _C.source.not_in(keep))).rowcount or 0


def models(conn: Connection, session_id: str) -> dict[str, int]:
    """How many of the session's passages each embedding model's name holds."""
    rows = conn.execute(select(_C.model, func.count()).where(_C.session_id == session_id).group_by(_C.model))
    return {model: int(n) for model, n in rows}

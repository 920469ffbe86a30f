"""The embeddings of stored messages (table ``message_vectors``), for the semantic half of ``history_search``.

One row per user or assistant message, written by the background indexer (memory/history_index.py) after
the message is stored, never on the turn's path. A user message's row holds the vector of the exchange (the
message with the bot's answer), and the answer's row an empty vector; a message without text or without
content words (an assistant's tool call, "ok, thanks") gets an empty one too, so it is not picked again.
Vectors are int8 with one float scale per row (384 bytes a turn with the local model, not 1,536 as
float32). A row goes with its message (the foreign key cascades on both databases), so cleanup and
``/forget`` remove it; ``/forget`` also deletes it by ``session_id`` (memory/forget.py).

Which messages wait for a vector is read from the tables themselves: those after the newest indexed
message (less :data:`LOOK_BACK`, for a transaction that committed a lower id later) with no row yet. So a
restart resumes where the indexer stopped, and nothing has to be queued in memory.

All functions are transaction functions: ``store.run(fn, ...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, text
from sqlalchemy.engine import Connection

from store.models import MessageVectorRow

_VECTORS = MessageVectorRow.__table__
_V = _VECTORS.c

#: Messages below the newest indexed one that are still checked for a missing vector.
LOOK_BACK = 1000
#: A message's neighbour is the nearest user or assistant message within this many seqs (tool calls lie between).
REACH = 4


@dataclass(frozen=True, slots=True)
class Neighbour:
    """The nearest user or assistant message before or after a waiting one (tool calls may lie between)."""

    id: int
    seq: int
    role: str
    content: Any
    #: it has a vector row already (it was indexed)
    indexed: bool = False


@dataclass(frozen=True, slots=True)
class PendingMessage:
    """A stored message waiting for its vector, with its neighbours: ``previous`` (for an assistant message:
    the question it may answer) and ``next`` (for a user message: the answer it may have got)."""

    id: int
    session_id: str
    seq: int
    role: str
    content: Any
    previous: Neighbour | None = None
    next: Neighbour | None = None


@dataclass(frozen=True, slots=True)
class VectorRows:
    """A session's stored vectors of one model, in message order."""

    ids: list[int]
    seqs: list[int]
    scales: list[float]
    vectors: list[bytes]


def _neighbour(conn: Connection, session_id: str, seq: int, after: bool) -> Neighbour | None:
    """The nearest user or assistant message within :data:`REACH` seqs before (or after) ``seq``."""
    op, order, edge = (">", "ASC", seq + REACH) if after else ("<", "DESC", seq - REACH)
    row = conn.execute(text(
        f"SELECT m.id, m.seq, m.role, m.content, v.message_id FROM messages m "
        f"LEFT JOIN message_vectors v ON v.message_id = m.id "
        f"WHERE m.session_id = :sid AND m.seq {op} :seq AND m.seq {'<=' if after else '>='} :edge "
        f"AND m.role IN ('user', 'assistant') ORDER BY m.seq {order} LIMIT 1"),
        {"sid": session_id, "seq": seq, "edge": edge}).first()
    return Neighbour(row[0], row[1], row[2], row[3], row[4] is not None) if row is not None else None


def pending(conn: Connection, limit: int) -> list[PendingMessage]:
    """Up to ``limit`` user and assistant messages without a vector, oldest first: a user message with the
    message after it (its answer, when the bot answered), an assistant message with the one before it."""
    newest = conn.execute(select(func.max(_V.message_id))).scalar() or 0
    rows = conn.execute(text(
        "SELECT m.id, m.session_id, m.seq, m.role, m.content FROM messages m "
        "LEFT JOIN message_vectors v ON v.message_id = m.id "
        "WHERE m.id > :floor AND v.message_id IS NULL AND m.role IN ('user', 'assistant') "
        "ORDER BY m.id LIMIT :n"), {"floor": newest - LOOK_BACK, "n": limit}).all()
    found = []
    for id_, session_id, seq, role, content in rows:
        if role == "user":
            found.append(PendingMessage(id_, session_id, seq, role, content,
                                        next=_neighbour(conn, session_id, seq, True)))
        else:
            found.append(PendingMessage(id_, session_id, seq, role, content,
                                        previous=_neighbour(conn, session_id, seq, False)))
    return found


def save(conn: Connection, model: str, rows: list[tuple[PendingMessage, float, bytes]]) -> int:
    """Store ``(message, scale, int8 bytes)`` rows of ``model``; a message deleted meanwhile (``/forget``) or
    indexed already is skipped. Returns the rows written."""
    written = 0
    for message, scale, vector in rows:
        written += conn.execute(text(
            "INSERT INTO message_vectors (message_id, session_id, seq, model, scale, vector) "
            "SELECT :id, :sid, :seq, :model, :scale, :vector WHERE EXISTS (SELECT 1 FROM messages WHERE id = :id) "
            "AND NOT EXISTS (SELECT 1 FROM message_vectors WHERE message_id = :id)"),
            {"id": message.id, "sid": message.session_id, "seq": message.seq, "model": model,
             "scale": float(scale), "vector": vector}).rowcount or 0
    return written


def drop_other_models(conn: Connection, model: str, limit: int = 5000) -> int:
    """Delete up to ``limit`` vectors of another model (after a change of ``memory_embedding_model``): those
    messages are embedded again. Returns the rows deleted."""
    ids = select(_V.message_id).where(_V.model != model).limit(limit).scalar_subquery()
    return conn.execute(delete(_VECTORS).where(_V.message_id.in_(ids))).rowcount or 0


def stamp(conn: Connection, session_id: str) -> tuple[int, int]:
    """The session's lowest and highest indexed message ids (``(0, 0)``: none): a cached matrix is still the
    session's when its lowest id is unchanged, and needs the rows after its highest one."""
    # two subqueries: SQLite reads a min() or a max() off the index only when it is alone in its query
    # (together they scanned the session's rows: 12 ms at 100,000)
    low = select(func.min(_V.message_id)).where(_V.session_id == session_id).scalar_subquery()
    high = select(func.max(_V.message_id)).where(_V.session_id == session_id).scalar_subquery()
    low, high = conn.execute(select(low, high)).one()
    return int(low or 0), int(high or 0)


def load(conn: Connection, session_id: str, model: str, after_id: int = 0) -> VectorRows:
    """The session's non-empty vectors of ``model`` after message ``after_id``, in message order."""
    rows = conn.execute(select(_V.message_id, _V.seq, _V.scale, _V.vector)
                        .where(_V.session_id == session_id, _V.message_id > after_id, _V.model == model,
                               _V.scale > 0)
                        .order_by(_V.message_id)).all()
    return VectorRows([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [bytes(r[3]) for r in rows])


def count(conn: Connection, session_id: str | None = None) -> int:
    """Stored vector rows (of one session, or all)."""
    query = select(func.count()).select_from(_VECTORS)
    if session_id is not None:
        query = query.where(_V.session_id == session_id)
    return int(conn.execute(query).scalar_one())

"""Full-text search over a session's stored messages (the ``history_search`` tool, DESIGN §1.8).

Only what people said is indexed: the text of user and assistant messages, not tool results or tool-call
arguments. Triggers on ``messages`` (migrations 0002 and 0006) write a message's entry in the transaction
that stores it and delete it with the message, so cleanup and forgetting a session remove it too.

Every message of the session is ranked by relevance, in the database: ``bm25`` of SQLite's FTS5, or
PostgreSQL's ``ts_rank_cd`` over a GIN-indexed tsvector (cover density, which counts how many of the
query's phrases a message holds; plain ``ts_rank`` let one common phrase outrank two rarer ones); the
newer message wins a tie. A query's words match
whole words ("her" is not in "others") and its Chinese matches as two-character phrases
(store/search_terms.py). A hit comes with the part of the message that holds most of the query's terms,
and with the turns before and after it; the messages of the turn being answered are left out, so the
question is never its own answer.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from store.models import UTCDateTime
from store.search_terms import query_terms, term_pattern

logger = logging.getLogger(__name__)

#: The index table (a virtual FTS5 table on SQLite, whose shadow tables share the prefix).
SEARCH_TABLE = "message_search"
#: A passage shows at most this many characters of the message (the whole message when it is shorter).
PASSAGE_CHARS = 360
#: A neighbouring turn shows at most this many characters.
NEIGHBOUR_CHARS = 160
#: A neighbour is the nearest user or assistant text within this many messages (tool calls lie between).
NEIGHBOUR_REACH = 4


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A turn next to a hit: who said it and its beginning."""

    seq: int
    role: str
    text: str


@dataclass(frozen=True, slots=True)
class HistoryHit:
    """One matching message: when, who, the passage that matches, and the turns around it."""

    seq: int
    role: str
    created_at: datetime
    passage: str
    before: Neighbour | None = None
    after: Neighbour | None = None


def is_search_table(name: str) -> bool:
    """True for the index table and SQLite's shadow tables of it (not part of the models' metadata)."""
    return name == SEARCH_TABLE or name.startswith(f"{SEARCH_TABLE}_")


def message_text(content: Any) -> str:
    """The text of a stored message (``messages.content``): its string, or its text parts joined."""
    if isinstance(content, str):
        try:
            content = json.loads(content)
        except ValueError:
            return content
    body = content.get("content") if isinstance(content, dict) else None
    if isinstance(body, str):
        return body.strip()
    if isinstance(body, list):
        return "\n".join(p["text"] for p in body if isinstance(p, dict) and isinstance(p.get("text"), str)).strip()
    return ""


def passage(body: str, terms: list[str], width: int = PASSAGE_CHARS) -> str:
    """The ``width`` characters of ``body`` that hold the most distinct query terms (all of a short body)."""
    flat = " ".join(body.split())
    if len(flat) <= width:
        return flat
    spots = sorted((m.start(), i) for i, t in enumerate(terms) for m in term_pattern(t).finditer(flat))
    best, best_start = -1, 0
    for start, _ in spots:
        covered = {i for at, i in spots if start <= at < start + width}
        if len(covered) > best:
            best, best_start = len(covered), start
    # start a little before the first matching term, at a word boundary
    start = max(0, best_start - width // 6)
    if start:
        space = flat.rfind(" ", 0, start + 1)
        start = space + 1 if space > best_start - width // 3 else start
    end = min(len(flat), start + width)
    return ("…" if start else "") + flat[start:end].strip() + ("…" if end < len(flat) else "")


def _ranked(conn: Connection, session_id: str, terms: list[str], limit: int, before_seq: int | None) -> list[Any]:
    params: dict[str, Any] = {"sid": session_id, "cap": limit, "before": before_seq or 2**62}
    if conn.dialect.name == "sqlite":
        params["q"] = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        sql = (f"SELECT m.seq, m.role, m.created_at, m.content FROM {SEARCH_TABLE} s "
               f"JOIN messages m ON m.id = s.rowid WHERE {SEARCH_TABLE} MATCH :q AND m.session_id = :sid "
               f"AND m.seq < :before ORDER BY bm25({SEARCH_TABLE}), m.seq DESC LIMIT :cap")
    else:
        query = " || ".join(f"phraseto_tsquery('simple', :t{i})" for i in range(len(terms)))
        params.update({f"t{i}": t for i, t in enumerate(terms)})
        sql = (f"SELECT m.seq, m.role, m.created_at, m.content FROM {SEARCH_TABLE} s "
               f"JOIN messages m ON m.id = s.message_id, (SELECT {query} AS query) q "
               f"WHERE s.terms @@ q.query AND m.session_id = :sid AND m.seq < :before "
               f"ORDER BY ts_rank_cd(s.terms, q.query, 1) DESC, m.seq DESC LIMIT :cap")
    stmt = text(sql).columns(created_at=UTCDateTime())
    return list(conn.execute(stmt, params).all())


def _neighbours(conn: Connection, session_id: str, seqs: set[int]) -> dict[int, Neighbour]:
    """The user and assistant texts at ``seqs`` (tool calls and results have none, and are skipped)."""
    if not seqs:
        return {}
    rows = conn.execute(text("SELECT seq, role, content FROM messages WHERE session_id = :sid AND seq IN "
                             f"({', '.join(str(int(s)) for s in sorted(seqs))}) "
                             "AND role IN ('user', 'assistant')"), {"sid": session_id}).all()
    found = {}
    for seq, role, content in rows:
        body = " ".join(message_text(content).split())
        if body:
            cut = body if len(body) <= NEIGHBOUR_CHARS else body[:NEIGHBOUR_CHARS - 1].rstrip() + "…"
            found[seq] = Neighbour(seq, role, cut)
    return found


def search_history(conn: Connection, session_id: str, query: str, limit: int,
                   before_seq: int | None = None) -> list[HistoryHit]:
    """The session's messages best matching ``query``, most relevant first (a transaction function).

    ``before_seq``: only messages before it (the turn being answered starts there).
    """
    terms = query_terms(query)
    if not terms:
        return []
    rows = _ranked(conn, session_id, terms, limit, before_seq)
    end = before_seq or 2**62
    wanted = {s for seq, *_ in rows for s in range(seq - NEIGHBOUR_REACH, seq + NEIGHBOUR_REACH + 1)
              if 0 < s < end and s != seq}
    near = _neighbours(conn, session_id, wanted)
    hits = []
    for seq, role, created_at, content in rows:
        before = next((near[s] for s in range(seq - 1, seq - NEIGHBOUR_REACH - 1, -1) if s in near), None)
        after = next((near[s] for s in range(seq + 1, seq + NEIGHBOUR_REACH + 1) if s in near), None)
        hits.append(HistoryHit(seq, role, created_at, passage(message_text(content), terms), before, after))
    return hits

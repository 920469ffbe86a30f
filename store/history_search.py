"""Full-text search over a session's stored messages (the ``history_search`` tool, DESIGN §1.8).

Only what people said is indexed: the text of user and assistant messages, not tool results or tool-call
arguments. Triggers on ``messages`` (migration 0002) write a message's entry in the transaction that
stores it and delete it with the message, so cleanup and forgetting a session remove it too.

* SQLite: FTS5 with the trigram tokenizer, which needs at least three characters per term; shorter terms
  (a two-character Chinese word, "Tom" is fine) are matched with ``LIKE`` over the session's own rows.
* PostgreSQL: ``ILIKE`` over the session's rows, backed by a pg_trgm index when the extension exists.

A query is split into terms: words, and overlapping two-character pieces of Chinese/Japanese/Korean runs
(which have no spaces). A message matches when it holds any term; the ones holding most terms come first,
newest first among equals.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from store.models import UTCDateTime

logger = logging.getLogger(__name__)

#: The index table (a virtual FTS5 table on SQLite, whose shadow tables share the prefix).
SEARCH_TABLE = "message_search"
#: Candidate messages read per search, newest first, before ranking.
CANDIDATES = 500
#: Characters of context kept on each side of a match.
CONTEXT_CHARS = 120
MAX_TERMS = 16

_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


@dataclass(frozen=True, slots=True)
class HistoryHit:
    """One matching message: when, who, and the passage around the match."""

    seq: int
    role: str
    created_at: datetime
    passage: str


def is_search_table(name: str) -> bool:
    """True for the index table and SQLite's shadow tables of it (not part of the models' metadata)."""
    return name == SEARCH_TABLE or name.startswith(f"{SEARCH_TABLE}_")


def search_terms(query: str) -> list[str]:
    """The lower-cased terms of a query: words, and two-character pieces of CJK runs."""
    terms: list[str] = []
    for word in _WORD.findall(query.lower()):
        pos = 0
        for run in _CJK.finditer(word):
            terms.extend(p for p in _WORD.findall(word[pos:run.start()]))
            chars = run.group()
            terms.extend([chars] if len(chars) <= 2 else [chars[i:i + 2] for i in range(len(chars) - 1)])
            pos = run.end()
        terms.extend(_WORD.findall(word[pos:]))
    unique = list(dict.fromkeys(terms))
    long = [t for t in unique if len(t) > 1 or _CJK.match(t)]
    return (long or unique)[:MAX_TERMS]


def _like(term: str) -> str:
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _candidates(conn: Connection, session_id: str, terms: list[str]) -> list[Any]:
    params: dict[str, Any] = {"sid": session_id, "cap": CANDIDATES}
    tests = []
    if conn.dialect.name == "sqlite":
        fts = [t for t in terms if len(t) >= 3]  # the trigram tokenizer's minimum
        if fts:
            params["fts"] = " OR ".join('"' + t.replace('"', '""') + '"' for t in fts)
            tests.append(f"s.rowid IN (SELECT rowid FROM {SEARCH_TABLE} WHERE {SEARCH_TABLE} MATCH :fts)")
        for i, term in enumerate(t for t in terms if len(t) < 3):
            params[f"p{i}"] = _like(term)
            tests.append(f"s.text LIKE :p{i} ESCAPE '\\'")
        join = f"JOIN {SEARCH_TABLE} s ON s.rowid = m.id"
    else:
        for i, term in enumerate(terms):
            params[f"p{i}"] = _like(term)
            tests.append(f"s.text ILIKE :p{i} ESCAPE '\\'")
        join = f"JOIN {SEARCH_TABLE} s ON s.message_id = m.id"
    sql = (f"SELECT m.seq, m.role, m.created_at, s.text FROM messages m {join} "
           f"WHERE m.session_id = :sid AND ({' OR '.join(tests)}) ORDER BY m.seq DESC LIMIT :cap")
    stmt = text(sql).columns(created_at=UTCDateTime())
    return list(conn.execute(stmt, params).all())


def passage(body: str, terms: list[str]) -> str:
    """The part of ``body`` around its first matching term."""
    low = body.lower()
    found = [(low.find(t), t) for t in terms if t in low]
    if not found:
        return body[:2 * CONTEXT_CHARS]
    at, term = min(found)
    start = max(0, at - CONTEXT_CHARS)
    end = min(len(body), at + len(term) + CONTEXT_CHARS)
    return ("…" if start else "") + body[start:end].replace("\n", " ") + ("…" if end < len(body) else "")


def search_history(conn: Connection, session_id: str, query: str, limit: int) -> list[HistoryHit]:
    """The session's messages best matching ``query`` (a transaction function for the store)."""
    terms = search_terms(query)
    if not terms:
        return []
    scored = []
    for seq, role, created_at, body in _candidates(conn, session_id, terms):
        low = body.lower()
        score = sum(1 for t in terms if t in low)
        if score:
            scored.append((-score, -seq, HistoryHit(seq, role, created_at, passage(body, terms))))
    scored.sort(key=lambda item: item[:2])
    return [hit for *_, hit in scored[:limit]]

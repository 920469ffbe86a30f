"""Full-text search over a session's stored messages (the ``history_search`` tool, DESIGN §1.8).

Only what people said is indexed: the text of user and assistant messages, not tool results or tool-call
arguments. Triggers on ``messages`` (migrations 0002 and 0006) write a message's entry in the transaction
that stores it and delete it with the message, so cleanup and forgetting a session remove it too.

Every message of the session is ranked by relevance, in the database: ``bm25`` of SQLite's FTS5; on
PostgreSQL, over a GIN-indexed tsvector, the sum of the matching terms' idf in the session (bm25's
weight, which ``ts_rank`` lacks), then ``ts_rank_cd`` (cover density); the newer message wins a tie. A
query's words match whole words ("her" is not in "others") and its Chinese matches as two-character
phrases (store/search_terms.py). A hit comes with the part of the message that holds most of the query's terms,
and with the turns before and after it; the messages of the turn being answered are left out, so the
question is never its own answer.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from store.models import UTCDateTime
from store.search_terms import query_terms, says_something, stem, term_pattern

logger = logging.getLogger(__name__)

#: The index table (a virtual FTS5 table on SQLite, whose shadow tables share the prefix).
SEARCH_TABLE = "message_search"
#: A passage shows at most this many characters of the message (the whole message when it is shorter).
PASSAGE_CHARS = 360
#: A neighbouring turn shows at most this many characters.
NEIGHBOUR_CHARS = 160
#: A word is too common to rank by when more messages than this hold it, and more than COMMON_SHARE of all.
COMMON_MESSAGES = 1000
COMMON_SHARE = 0.05
#: PostgreSQL: a session of at most this many messages is searched row by row, not through the index.
SMALL_SESSION = 5000
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


_SAFE_TERM = re.compile(r"[^\W_]+(?: [^\W_]+)*")


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


def passage(body: str, terms: list[str], width: int | None = None) -> str:
    """The ``width`` characters (:data:`PASSAGE_CHARS`) of ``body`` that hold the most distinct query terms (all of
    a short body)."""
    width = PASSAGE_CHARS if width is None else width
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


def _rare_enough(conn: Connection, terms: list[str]) -> list[str]:
    """The terms without those too common to rank by (SQLite; all of them when nothing else is left).

    Ranking a word that thousands of messages hold costs a score for each of them and changes little: its
    weight (bm25's idf) is small. Beyond :data:`COMMON_MESSAGES` and :data:`COMMON_SHARE` of the index
    such a word is left out, which keeps a search at 100,000 messages fast.
    """
    words = sorted({w for t in terms for w in t.split()})
    rows = conn.execute(text(f"SELECT term, doc FROM {SEARCH_TABLE}_vocab WHERE term IN "
                             f"({', '.join(f':w{i}' for i in range(len(words)))})"),
                        {f"w{i}": w for i, w in enumerate(words)}).all()
    docs = dict(rows)
    total = conn.execute(text(f"SELECT count(*) FROM {SEARCH_TABLE}")).scalar_one()
    cap = max(COMMON_MESSAGES, total * COMMON_SHARE)
    return [t for t in terms if max(docs.get(w, 0) for w in t.split()) <= cap] or terms


def _fts5_term(term: str) -> str:
    """A query term in FTS5's syntax: a phrase, or its stem's prefix (store/search_terms.py :func:`stem`)."""
    root = stem(term)
    return f'"{root}" *' if root is not None else '"' + term.replace('"', '""') + '"'


def _tsquery(term: str) -> str:
    """A query term as PostgreSQL's tsquery: a phrase, or its stem's prefix (checked by the caller: letters,
    digits and spaces only)."""
    root = stem(term)
    return f"to_tsquery('simple', '{root}:*')" if root is not None else f"phraseto_tsquery('simple', '{term}')"


def _postgres_ranking(terms: list[str], small_session: bool) -> str:
    """PostgreSQL's ranking: each query term weighs its idf in the session (bm25's weight, which ``ts_rank``
    lacks: a name that every message holds would count as much as the one word that answers), then
    ``ts_rank_cd`` (how closely the message holds the terms), then the newer message.

    The terms are written into the statement, not bound: a statement the driver prepares gets a generic
    plan, which cannot see the terms and scans the index for all of them (100-300 ms at 700 messages where
    a plan for the terms at hand takes 10-20 ms). A term is letters, digits and spaces only
    (store/search_terms.py), checked here, so it cannot end its quotes. ``:n`` is the session's size (the
    idf's N).

    The GIN index finds a term's messages in every session; for a session of up to
    :data:`SMALL_SESSION` messages, reading the session's own rows and testing each is cheaper
    (1-2 ms at 700 messages, where the index took 70 ms beside a session of 100,000). The matches carry
    their seq and terms only; ``ts_rank_cd`` (the costly part, ~10 µs a message) is computed for the
    messages that tie with or beat the ``:cap``-th score, and the content is read for the ``:cap`` best.
    """
    if not all(_SAFE_TERM.fullmatch(t) for t in terms):
        raise ValueError(f"unexpected characters in search terms {terms!r}")
    n = len(terms)
    queries = ", ".join(f"{_tsquery(t)} AS q{i}" for i, t in enumerate(terms))
    counts = ", ".join(f"count(*) FILTER (WHERE terms @@ q{i})::float8 AS d{i}" for i in range(n))
    idf = ", ".join(f"ln(1 + (:n - d{i} + 0.5) / (d{i} + 0.5)) AS w{i}" for i in range(n))
    weight = " + ".join(f"CASE WHEN terms @@ q{i} THEN w{i} ELSE 0 END" for i in range(n))
    every = " || ".join(f"q{i}" for i in range(n))
    if small_session:  # the session's own rows first: the index would return every session's matches
        hit = (f"SELECT m.seq, s.terms FROM qs, messages m, "
               f"LATERAL (SELECT terms FROM {SEARCH_TABLE} WHERE message_id = m.id OFFSET 0) s "
               f"WHERE m.session_id = :sid AND m.seq < :before AND s.terms @@ ({every})")
    else:
        hit = (f"SELECT m.seq, s.terms FROM qs, {SEARCH_TABLE} s JOIN messages m ON m.id = s.message_id "
               f"WHERE s.terms @@ ({every}) AND m.session_id = :sid AND m.seq < :before")
    return (f"WITH qs AS (SELECT {queries}), hit AS MATERIALIZED ({hit}), "
            f"df AS (SELECT {counts} FROM qs, hit), "
            f"idf AS (SELECT {idf} FROM df), "
            f"scored AS MATERIALIZED (SELECT seq, terms, {weight} AS score FROM hit, qs, idf), "
            f"bar AS (SELECT score FROM scored ORDER BY score DESC OFFSET :cap - 1 LIMIT 1), "
            f"best AS (SELECT seq, score, ts_rank_cd(terms, {every}, 1) AS cover FROM scored, qs "
            f"WHERE score >= coalesce((SELECT score FROM bar), '-infinity') "
            f"ORDER BY score DESC, cover DESC, seq DESC LIMIT :cap) "
            f"SELECT m.seq, m.role, m.created_at, m.content FROM best JOIN messages m "
            f"ON m.session_id = :sid AND m.seq = best.seq ORDER BY best.score DESC, best.cover DESC, best.seq DESC")


def _postgres_rare_enough(conn: Connection, terms: list[str]) -> list[str]:
    """PostgreSQL, a large session: the terms without those too common to rank by (as on SQLite, see
    :func:`_rare_enough`).

    A word's share of the index comes from the planner's statistics of the ``terms`` column (ANALYZE, run by
    autovacuum, keeps the most common lexemes with the share of rows holding each: one catalog read). Before
    the first ANALYZE, a term's messages are counted through the index, up to the limit only.
    """
    if not all(_SAFE_TERM.fullmatch(t) for t in terms):
        raise ValueError(f"unexpected characters in search terms {terms!r}")
    total = conn.execute(text("SELECT greatest(reltuples, 0) FROM pg_class WHERE oid = to_regclass(:t)"),
                         {"t": SEARCH_TABLE}).scalar() or 0
    cap = int(max(COMMON_MESSAGES, total * COMMON_SHARE))
    stats = conn.execute(text("SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats "
                              "WHERE schemaname = current_schema() AND tablename = :t AND attname = 'terms'"),
                         {"t": SEARCH_TABLE}).first()
    if stats is not None and stats[0] is not None:
        share = dict(zip(stats[0], stats[1], strict=False))  # the freqs end with three summary numbers
        held = [max(share.get(w, 0.0) * total for w in t.split()) for t in terms]
    else:
        counts = ", ".join(f"(SELECT count(*) FROM (SELECT 1 FROM {SEARCH_TABLE} WHERE terms @@ "
                           f"{_tsquery(t)} LIMIT {cap + 1}) x{i})" for i, t in enumerate(terms))
        held = list(conn.execute(text(f"SELECT {counts}")).one())
    return [t for t, n in zip(terms, held, strict=True) if n <= cap] or terms


def _ranked(conn: Connection, session_id: str, terms: list[str], limit: int, before_seq: int | None) -> list[Any]:
    params: dict[str, Any] = {"sid": session_id, "cap": limit, "before": before_seq or 2**62}
    if conn.dialect.name == "sqlite":
        params["q"] = " OR ".join(_fts5_term(t) for t in _rare_enough(conn, terms))
        # CROSS JOIN keeps the index as the outer loop: given the choice, SQLite's planner walks the session's
        # messages by (session_id, seq) and probes the index for each (seconds at 100,000 messages, not 1 ms)
        sql = (f"SELECT m.seq, m.role, m.created_at, m.content FROM {SEARCH_TABLE} s "
               f"CROSS JOIN messages m ON m.id = s.rowid WHERE {SEARCH_TABLE} MATCH :q AND m.session_id = :sid "
               f"AND m.seq < :before ORDER BY bm25({SEARCH_TABLE}), m.seq DESC LIMIT :cap")
    else:
        # the session's span of seqs (two index probes) stands for its size: counting 100,000 rows takes ~10 ms
        span = conn.execute(text("SELECT max(seq) - min(seq) + 1 FROM messages WHERE session_id = :sid"),
                            params).scalar() or 0
        params["n"] = float(span)
        small = span <= SMALL_SESSION
        sql = _postgres_ranking(terms if small else _postgres_rare_enough(conn, terms), small)
    stmt = text(sql).columns(created_at=UTCDateTime())
    return list(conn.execute(stmt, params).all())


def _neighbours(conn: Connection, session_id: str, seqs: set[int], terms: list[str]) -> dict[int, Neighbour]:
    """The user and assistant texts at ``seqs`` that say something (tool calls and results have no text, and a
    turn of filler alone, "ok, noted.", tells nothing beside a hit: both are skipped), each cut around the query's
    terms (from its beginning when it has none of them)."""
    if not seqs:
        return {}
    rows = conn.execute(text("SELECT seq, role, content FROM messages WHERE session_id = :sid AND seq IN "
                             f"({', '.join(str(int(s)) for s in sorted(seqs))}) "
                             "AND role IN ('user', 'assistant')"), {"sid": session_id}).all()
    found = {}
    for seq, role, content in rows:
        body = " ".join(message_text(content).split())
        if body and says_something(body):
            found[seq] = Neighbour(seq, role, passage(body, terms, NEIGHBOUR_CHARS))
    return found


def search_history(conn: Connection, session_id: str, query: str, limit: int,
                   before_seq: int | None = None) -> list[HistoryHit]:
    """The session's messages best matching ``query``, most relevant first (a transaction function).

    ``before_seq``: only messages before it (the turn being answered starts there).
    """
    terms = query_terms(query)
    if not terms:
        return []
    return _hits(conn, session_id, _ranked(conn, session_id, terms, limit, before_seq), terms, before_seq)


def rank_history(conn: Connection, session_id: str, query: str, limit: int, before_seq: int | None = None) -> list[int]:
    """The seqs of :func:`search_history`'s ranking, without the passages (the keyword half of the hybrid search)."""
    terms = query_terms(query)
    return [row[0] for row in _ranked(conn, session_id, terms, limit, before_seq)] if terms else []


def history_hits(conn: Connection, session_id: str, seqs: list[int], query: str,
                 before_seq: int | None = None, near: int | None = None) -> list[HistoryHit]:
    """The hits for the messages at ``seqs``, in that order (those at or after ``before_seq`` left out), their
    passages cut around ``query``'s terms (from the beginning when it has none there); ``near``: only the first
    ``near`` hits come with their neighbouring turns (all of them when None)."""
    end = before_seq or 2**62
    wanted = [int(s) for s in seqs if 0 < int(s) < end]
    if not wanted:
        return []
    stmt = text(f"SELECT seq, role, created_at, content FROM messages WHERE session_id = :sid AND seq IN "
                f"({', '.join(str(s) for s in sorted(set(wanted)))})").columns(created_at=UTCDateTime())
    rows = {row[0]: row for row in conn.execute(stmt, {"sid": session_id}).all()}
    return _hits(conn, session_id, [rows[s] for s in wanted if s in rows], query_terms(query), before_seq, near)


def _hits(conn: Connection, session_id: str, rows: list[Any], terms: list[str],
          before_seq: int | None, near_hits: int | None = None) -> list[HistoryHit]:
    end = before_seq or 2**62
    # the neighbours only of the hits that show them: reading and cutting those of 30 hits was most of the cost
    wanted = {s for seq, *_ in rows[:near_hits] for s in range(seq - NEIGHBOUR_REACH, seq + NEIGHBOUR_REACH + 1)
              if 0 < s < end and s != seq}
    near = _neighbours(conn, session_id, wanted, terms)
    hits = []
    for i, (seq, role, created_at, content) in enumerate(rows):
        before = after = None
        if near_hits is None or i < near_hits:
            before = next((near[s] for s in range(seq - 1, seq - NEIGHBOUR_REACH - 1, -1) if s in near), None)
            after = next((near[s] for s in range(seq + 1, seq + NEIGHBOUR_REACH + 1) if s in near), None)
        hits.append(HistoryHit(seq, role, created_at, passage(message_text(content), terms), before, after))
    return hits

"""history_search on LoCoMo: does the search find the evidence turns of each question, per category?

LoCoMo (Maharana et al., ACL 2024) holds long multi-session conversations between two people, with questions
whose evidence turns are labelled. Every dialog turn is stored, in order, as a message of one session of the
real store (``Store``: SQLite by default, PostgreSQL with ``--db-url``), as "<speaker>: <text>"
(how a group's messages reach the bot); then each question is asked of the store's ``search_history``, as the
``history_search`` tool does, and a question counts as found when one of its evidence turns is among the first
5 (or 10) hits; "shown" counts it found when it is in the first 5 hits' output at all, as a hit or as the turn
just before or after one (the tool shows those too). This measures the history half of the bot's memory only:
no summaries, no memory files. With ``--embedding local`` (the default) every turn is also embedded by the
background indexer (memory/history_index.py: its time per 1,000 turns and bytes per turn are reported) and
each question is asked both ways: words only (the store's ``search_history``) and words and meaning
(``HistoryIndex.search``, what ``history_search`` uses when ``memory_embedding_model`` is set).

Then one session is filled with ``--scale`` turns (the conversations' turns repeated, each copy numbered)
to time the index (milliseconds per 1,000 turns stored, bytes per turn on SQLite) and the search at that
size (median of the questions' searches, the query's embedding included). The copies' vectors are those of
the turns they copy (embedding 100,000 turns would take an hour of one core). On PostgreSQL the planner's
statistics are gathered (ANALYZE) after each filling, as autovacuum does in a running deployment.

The data is not part of the project (its authors publish it for research evaluation): pass the path of
``locomo10.json`` from the dataset's repository, or of a gzipped copy.

    python bench/memory_locomo.py PATH/locomo10.json[.gz] [--db-url URL] [--scale 100000] [--questions 200]
                                  [--embedding local|""]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402

from core.records import SessionInfo  # noqa: E402
from memory.embeddings import build_embedder  # noqa: E402
from memory.history_index import HistoryIndex  # noqa: E402
from store import message_vectors  # noqa: E402
from store.store import Store  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def load(path: Path) -> list[dict[str, Any]]:
    """The conversations of a LoCoMo JSON file (gzipped or not)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def turns(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    """The dialog turns of a conversation, session by session, in order."""
    conv = conversation["conversation"]
    sessions = sorted((int(k.split("_")[1]), v) for k, v in conv.items()
                      if k.startswith("session_") and not k.endswith("date_time") and isinstance(v, list))
    return [turn for _, session in sessions for turn in session]


def evidence_ids(qa: dict[str, Any]) -> set[str]:
    """The evidence dialog ids of a question (some are written "D8:6; D9:17")."""
    return {part.strip() for item in qa.get("evidence") or [] for part in str(item).split(";") if part.strip()}


async def store_turns(store: Store, session_id: str, items: list[dict[str, Any]]) -> dict[str, int]:
    """Store the turns as user messages; return each dialog id's seq."""
    await store.sessions.ensure(SessionInfo(session_id, "bench", session_id))
    seqs: dict[str, int] = {}
    for start in range(0, len(items), 500):
        batch = items[start:start + 500]
        stored = await store.sessions.append(session_id, [{"role": "user",
                                                           "content": f"{t['speaker']}: {t.get('text', '')}"}
                                                 for t in batch])
        seqs.update({t["dia_id"]: seq for t, seq in zip(batch, stored, strict=True)})
    return seqs


async def analyze(store: Store) -> None:
    """PostgreSQL: gather the planner's statistics, as autovacuum does soon after a table grows."""
    if store.dialect == "postgresql":
        await store.run(lambda conn: conn.execute(text("ANALYZE")))


async def recall(store: Store, data: list[dict[str, Any]], index: HistoryIndex | None,
                 ) -> tuple[dict[str, dict[int, list[tuple[bool, bool, bool]]]], dict[str, list[float]], list[str]]:
    """Per way of searching ("words", "words+meaning") and category, (found in top 5, in top 10, shown by the top
    5) for each question; search times in ms per way; the questions."""
    found: dict[str, dict[int, list[tuple[bool, bool, bool]]]] = defaultdict(lambda: defaultdict(list))
    times: dict[str, list[float]] = defaultdict(list)
    questions: list[str] = []
    stored = [(f"locomo:{c['sample_id']}", c, await store_turns(store, f"locomo:{c['sample_id']}", turns(c)))
              for c in data]
    await analyze(store)
    if index is not None:
        await index.embedder.embed(["warm"])  # the model's load is not the index's time
        started = time.perf_counter()
        done = await index.catch_up()
        elapsed = time.perf_counter() - started
        print(f"indexing {done:,} turns (embedded with the turn before each): {elapsed * 1000 / (done / 1000):,.0f} ms "
              f"per 1,000 turns")
        await analyze(store)
    ways = {"words": lambda sid, q: store.sessions.search_history(sid, q, 10)}
    if index is not None:
        ways["words+meaning"] = lambda sid, q: index.search(sid, q, 10)
    for sid, conversation, seqs in stored:
        for qa in conversation["qa"]:
            wanted = {seqs[d] for d in evidence_ids(qa) if d in seqs}
            if not wanted:
                continue
            questions.append(qa["question"])
            for way, search in ways.items():
                started = time.perf_counter()
                hits = await search(sid, qa["question"])
                times[way].append((time.perf_counter() - started) * 1000)
                order = [h.seq for h in hits]
                shown = {n.seq for h in hits[:5] for n in (h.before, h.after) if n is not None} | set(order[:5])
                found[way][int(qa["category"])].append((bool(wanted & set(order[:5])), bool(wanted & set(order)),
                                                        bool(wanted & shown)))
    return found, times, questions


async def scale(store: Store, data: list[dict[str, Any]], n: int, questions: list[str],
                index: HistoryIndex | None) -> tuple[float, dict[str, list[float]]]:
    """Fill one session with ``n`` turns (and their vectors); return ms per 1,000 turns stored and the search
    times in ms per way."""
    base = [t for conversation in data for t in turns(conversation)]
    sid = "locomo:scale"
    await store.sessions.ensure(SessionInfo(sid, "bench", sid))
    started = time.perf_counter()
    for start in range(0, n, 1000):
        batch = [base[i % len(base)] for i in range(start, min(n, start + 1000))]
        await store.sessions.append(sid, [{"role": "user", "content": f"{t['speaker']}: {t.get('text', '')} (copy {i})"}
                                 for i, t in enumerate(batch, start=start)])
    per_thousand = (time.perf_counter() - started) * 1000 / (n / 1000)
    if index is not None:
        await store.run(copy_vectors, sid, index.model_name)
    await analyze(store)
    ways = {"words": lambda q: store.sessions.search_history(sid, q, 10)}
    if index is not None:
        ways["words+meaning"] = lambda q: index.search(sid, q, 10)
        await index.search(sid, "warm", 10)  # the session's matrix is read once, then kept
    times: dict[str, list[float]] = defaultdict(list)
    for question in questions:
        for way, search in ways.items():
            started = time.perf_counter()
            await search(question)
            times[way].append((time.perf_counter() - started) * 1000)
    return per_thousand, times


def copy_vectors(conn: Any, sid: str, model: str) -> None:
    """Give the scale session's turns the vectors of the conversations' turns they copy, in order."""
    source = conn.execute(text("SELECT v.scale, v.vector FROM message_vectors v JOIN messages m ON m.id = v.message_id "
                               "WHERE m.session_id LIKE 'locomo:conv-%' ORDER BY m.session_id, m.seq")).all()
    # the conversations were stored in the data's order; sessions sort the same way (conv-41 ... conv-50)
    targets = conn.execute(text("SELECT id, seq FROM messages WHERE session_id = :sid ORDER BY seq"),
                           {"sid": sid}).all()
    rows = [{"id": id_, "sid": sid, "seq": seq, "model": model, "scale": source[i % len(source)][0],
             "vector": source[i % len(source)][1]} for i, (id_, seq) in enumerate(targets)]
    for start in range(0, len(rows), 5000):
        conn.execute(text("INSERT INTO message_vectors (message_id, session_id, seq, model, scale, vector) "
                          "VALUES (:id, :sid, :seq, :model, :scale, :vector)"), rows[start:start + 5000])


def vector_bytes(conn: Any) -> tuple[int, int]:
    """Bytes of message_vectors with its indexes (SQLite's dbstat or PostgreSQL's relation size) and its rows."""
    rows = message_vectors.count(conn)
    if conn.dialect.name == "sqlite":
        size = conn.execute(text("SELECT sum(pgsize) FROM dbstat WHERE name IN ('message_vectors', "
                                 "'ix_message_vectors_session', 'sqlite_autoindex_message_vectors_1')")).scalar()
    else:
        size = conn.execute(text("SELECT pg_total_relation_size('message_vectors')")).scalar()
    return int(size or 0), rows


def report(found: dict[int, list[tuple[bool, bool, bool]]], times: list[float], title: str) -> None:
    """One way's recall per category."""
    def share(rows: list[tuple[bool, bool, bool]], i: int) -> str:
        return f"{sum(r[i] for r in rows) / max(len(rows), 1):6.0%}"

    total = [f for cat in (1, 2, 3, 4) for f in found[cat]]
    print(f"-- {title}")
    print(f"{'category':22s} {'questions':>9s} {'top-5':>6s} {'top-10':>6s} {'shown by top-5':>14s}")
    for cat in sorted(c for c in found if found[c]):
        rows = found[cat]
        print(f"{cat} {CATEGORIES.get(cat, '?'):20s} {len(rows):9d} {share(rows, 0)} {share(rows, 1)} "
              f"{share(rows, 2):>14s}")
    print(f"{'1-4 together':22s} {len(total):9d} {share(total, 0)} {share(total, 1)} {share(total, 2):>14s}")
    print(f"search median {statistics.median(times):.2f} ms")


async def run(args: argparse.Namespace) -> int:
    """Store, index, ask, report."""
    data = load(Path(args.path))
    folder = Path(tempfile.mkdtemp(prefix="locomo-"))
    url = args.db_url or f"sqlite:///{folder / 'bench.db'}"
    store = Store(url)
    await store.open()
    embedder = build_embedder(args.embedding, base_url="", api_key="")
    index = HistoryIndex(store, embedder) if embedder is not None else None
    try:
        found, times, questions = await recall(store, data, index)
        print(f"{len(data)} conversations, {sum(len(v) for v in found['words'].values())} questions with evidence, "
              f"database {store.dialect}, about {max(len(turns(c)) for c in data)} turns per session")
        for way in found:
            report(found[way], times[way], way)
        if index is not None:
            size, rows = await store.run(vector_bytes)
            print(f"message_vectors: {rows:,} rows, {size / max(rows, 1):.0f} bytes per turn (with its indexes)")
        if args.scale:
            per_thousand, big = await scale(store, data, args.scale, questions[:args.questions], index)
            print(f"storing {args.scale:,} turns in one session: {per_thousand:.0f} ms per 1,000 turns")
            for way, ms in big.items():
                print(f"search at {args.scale:,} turns in one session, {way}: median {statistics.median(ms):.1f} ms, "
                      f"p90 {statistics.quantiles(ms, n=10)[-1]:.1f} ms ({len(ms)} questions)")
    finally:
        await store.close()
    if store.dialect == "sqlite":
        size = sum(p.stat().st_size for p in folder.glob("bench.db*"))  # noqa: ASYNC240 - after the run
        print(f"database size {size / 1e6:.1f} MB")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="LoCoMo's locomo10.json (or a .json.gz of the same shape)")
    parser.add_argument("--db-url", default="", help="a PostgreSQL URL (default: a new SQLite file)")
    parser.add_argument("--scale", type=int, default=100_000, help="turns of the one-session timing (0: skip)")
    parser.add_argument("--questions", type=int, default=200, help="questions searched at that size")
    parser.add_argument("--embedding", default="local", help='"local" (the bundled model) or "" (words only)')
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())

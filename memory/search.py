"""``memory_search``: keywords and meaning together, over one session's memory index.

Two rankings of the session's passages: BM25 over words (Chinese as character unigrams and bigrams),
and cosine similarity of embeddings (a numpy scan of the session's vectors). They are fused with
reciprocal rank fusion, ``sum(1 / (60 + rank))``, so neither score scale has to be calibrated against the
other. With semantic search off, or when the query cannot be embedded, the keyword ranking alone decides.

A session's passages are loaded once into a :class:`Corpus` and kept while the index's stamp (count and
newest id) is unchanged, so a search costs one small query, one matrix-vector product and a few postings.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from memory.embeddings import from_bytes
from memory.index import ChunkRow, MemoryIndex, date_of
from memory.priority import SearchFirst
from memory.ranking import fuse, top

logger = logging.getLogger(__name__)

#: Passages a search returns by default.
TOP_K = 5
#: Candidates each ranking contributes to the fusion.
CANDIDATES = 50
#: Below this cosine similarity a passage is not a semantic candidate (unrelated text still scores ~0.0-0.1).
MIN_SIMILARITY = 0.1
#: Sessions whose corpus is kept in memory.
CACHED_SESSIONS = 64
#: Passages of another embedding model (or stored without a vector) embedded again per background batch.
REFRESH_BATCH = 64
BM25_K1, BM25_B = 1.2, 0.75

R = TypeVar("R")

_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_STOP = frozenset("""a an and are as at be been but by can could did do does for from had has have he her his
how i i'm if in into is it its me my of on or our she so that the their them there they this to us was we
were what when where which who whom why will with would you your yours
的 了 是 我 你 他 她 它 吗 呢 吧 在 和 有 这 那 么 什么 我的 你的""".split())


def terms(text: str) -> Iterator[str]:
    """Keyword terms: folded words less stop words and single letters (a plural ``s`` dropped), CJK as unigrams and
    bigrams."""
    for word in _WORD.findall(text.casefold()):
        pos = 0
        for run in _CJK.finditer(word):
            yield from _latin(word[pos:run.start()])
            chars = run.group()
            for i, ch in enumerate(chars):
                if ch not in _STOP:
                    yield ch
                # A bigram with a particle or pronoun in it ("的猫") says no more than its other character.
                if i + 1 < len(chars) and ch not in _STOP and chars[i + 1] not in _STOP:
                    yield chars[i:i + 2]
            pos = run.end()
        yield from _latin(word[pos:])


def _latin(word: str) -> Iterator[str]:
    if not word or word in _STOP or (len(word) == 1 and word.isascii()):
        return
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    yield word


@dataclass(frozen=True)
class Passage:
    """One search result: the passage, the file it is in and that file's date (``""`` for MEMORY.md)."""

    source: str
    date: str
    kind: str
    text: str
    score: float


@dataclass
class RankedCorpus(Generic[R]):
    """Rows ranked two ways: BM25 over their words' postings, and cosine similarity of their vectors (float32
    rows, for the rows listed in ``vector_rows``). Memory's :class:`Corpus` and the knowledge base's
    ``KnowledgeCorpus`` each build one from their own rows."""

    rows: list[R]
    model: str
    postings: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    vector_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))

    def index_words(self, texts: Iterable[str]) -> None:
        """Postings for every term of each row's text (``texts``, one per row, in order)."""
        lists: dict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        lengths = np.zeros(len(self.rows), dtype=np.float32)
        for i, text in enumerate(texts):
            counts = Counter(terms(text))
            lengths[i] = sum(counts.values())
            for term, tf in counts.items():
                docs, tfs = lists[term]
                docs.append(i)
                tfs.append(tf)
        self.postings = {t: (np.array(d, dtype=np.int64), np.array(f, dtype=np.float32))
                         for t, (d, f) in lists.items()}
        self.lengths = lengths

    def keyword_ranking(self, query: str, limit: int = CANDIDATES) -> list[int]:
        """Row positions by BM25 score, best first, only those sharing a term with the query."""
        n = len(self.rows)
        if not n:
            return []
        avg = float(self.lengths.mean()) or 1.0
        scores = np.zeros(n, dtype=np.float32)
        for term in set(terms(query)):
            hit = self.postings.get(term)
            if hit is None:
                continue
            docs, tf = hit
            idf = math.log(1.0 + (n - len(docs) + 0.5) / (len(docs) + 0.5))
            norm = BM25_K1 * (1.0 - BM25_B + BM25_B * self.lengths[docs] / avg)
            scores[docs] += idf * tf * (BM25_K1 + 1.0) / (tf + norm)
        return top(scores, limit, above=0.0)

    def vector_ranking(self, query_vector: np.ndarray, limit: int = CANDIDATES) -> list[int]:
        """Row positions by cosine similarity to the query, best first, above :data:`MIN_SIMILARITY`."""
        if not len(self.vector_rows) or query_vector.shape[-1] != self.vectors.shape[1]:
            return []
        # einsum, not BLAS: one small matrix-vector product does not pay for BLAS's thread pool, which
        # contends with the bot's other threads on a busy machine.
        sims = np.einsum("ij,j->i", self.vectors, query_vector.astype(np.float32))
        return [int(self.vector_rows[i]) for i in top(sims, limit, above=MIN_SIMILARITY)]


class Corpus(RankedCorpus[ChunkRow]):
    """One session's passages, their BM25 postings and the vectors of the current model."""

    @classmethod
    def build(cls, rows: list[ChunkRow], model: str) -> Corpus:
        """Index ``rows``: postings for every term; the vectors stored by ``model`` as one matrix."""
        corpus = cls(rows=rows, model=model)
        corpus.index_words(row.text for row in rows)
        picked = [i for i, r in enumerate(rows) if model and r.model == model and r.vector is not None]
        if picked:
            dim = rows[picked[0]].dim
            picked = [i for i in picked if rows[i].dim == dim]
            corpus.vector_rows = np.array(picked, dtype=np.int64)
            corpus.vectors = from_bytes([rows[i].vector for i in picked], dim)  # type: ignore[misc]
        return corpus


class MemorySearch:
    """Hybrid search over :class:`MemoryIndex`, strictly one session at a time."""

    def __init__(self, index: MemoryIndex) -> None:
        self.index = index
        self._cache: OrderedDict[str, tuple[tuple[int, int, str], Corpus]] = OrderedDict()
        self._lock = asyncio.Lock()
        #: sessions whose passages of another model could not be embedded again (not retried by this process)
        self._refresh_failed: set[str] = set()
        #: the background embedding of a session's passages stored without a vector of the current model
        self._refreshing: dict[str, asyncio.Task[None]] = {}
        #: searches first: the background embedding waits between batches while one runs (shared with the
        #: history index's, set by the memory_index plugin)
        self.priority = SearchFirst()

    async def corpus(self, session_id: str) -> Corpus:
        """The session's corpus, loaded again only when its index changed."""
        key = (*await self.index.stamp(session_id), self.index.model_name)
        cached = self._cache.get(session_id)
        if cached is not None and cached[0] == key:
            self._cache.move_to_end(session_id)
            return cached[1]
        async with self._lock:
            rows = await self.index.load(session_id)
            corpus = await asyncio.to_thread(Corpus.build, rows, self.index.model_name)
            self._cache[session_id] = (key, corpus)
            self._cache.move_to_end(session_id)
            while len(self._cache) > CACHED_SESSIONS:
                self._cache.popitem(last=False)
        return corpus

    def forget(self, session_id: str) -> None:
        """Drop the session's cached corpus (after /forget)."""
        self._cache.pop(session_id, None)
        self.index.forget(session_id)

    async def search(self, session_id: str, query: str, k: int = TOP_K, *, semantic: bool = True) -> list[Passage]:
        """The ``k`` best passages of this session for ``query``; keywords only when ``semantic`` is false or off.

        Nothing but the question is embedded on the search's path: passages new to the index (a file changed
        outside the bot) or of another model are embedded in the background (:meth:`refreshed` waits for it),
        and found by their words meanwhile."""
        if not query.strip():
            return []
        async with self.priority.searching():
            return await self._search(session_id, query, k, semantic)

    async def _search(self, session_id: str, query: str, k: int, semantic: bool) -> list[Passage]:
        # A file changed outside the bot is searched as it is now. Deletions can leave the index's stamp as it
        # was (SQLite reuses the highest freed id), so a sync that changed anything drops the cached corpus.
        if await self.index.sync(session_id, embed=False):
            self._cache.pop(session_id, None)
        corpus = await self.corpus(session_id)
        if not corpus.rows:
            return []
        embedder = self.index.embedder
        if semantic and embedder is not None and session_id not in self._refresh_failed:
            self._refresh_later(session_id, corpus)
        rankings = [corpus.keyword_ranking(query)]
        if semantic and embedder is not None and len(corpus.vector_rows):
            try:
                rankings.append(corpus.vector_ranking(await embedder.embed_query(query)))
            except Exception:  # noqa: BLE001 - the keyword ranking still answers
                logger.exception("session %s: embedding the query failed; keyword search only", session_id)
        hits = []
        for pos, score in fuse(*rankings)[:k]:
            row = corpus.rows[pos]
            hits.append(Passage(source=row.source, date=date_of(row.source), kind=row.kind, text=row.text,
                                score=score))
        return hits


    def _refresh_later(self, session_id: str, corpus: Corpus) -> None:
        """Embed the session's passages of another model (or none) in the background, if any."""
        if session_id in self._refreshing or all(row.model == self.index.model_name for row in corpus.rows):
            return
        task = asyncio.create_task(self._refresh(session_id), name=f"memory refresh {session_id}")
        self._refreshing[session_id] = task
        task.add_done_callback(lambda _: self._refreshing.pop(session_id, None))

    async def refreshed(self, session_id: str | None = None) -> None:
        """Wait for the background embedding of one session's passages (or of all)."""
        tasks = [self._refreshing[session_id]] if session_id in self._refreshing else (
            list(self._refreshing.values()) if session_id is None else [])
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        """Cancel the background embedding (at a stop, before the database closes; it resumes after a search)."""
        tasks = list(self._refreshing.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _refresh(self, session_id: str) -> None:
        """Embed passages stored under another model (or none) again, :data:`REFRESH_BATCH` at a time, letting
        searches go first between batches, so a change of model brings the whole index over."""
        done = 0
        while True:
            await self.priority.wait_turn()
            corpus = await self.corpus(session_id)
            stale = [row for row in corpus.rows if row.model != self.index.model_name][:REFRESH_BATCH]
            if not stale or self.index.embedder is None:
                break
            try:
                done += await self.index.refresh(stale)
            except Exception:  # noqa: BLE001 - the stored vectors and the keywords still answer
                logger.exception("session %s: embedding %d passages with the new model failed", session_id,
                                 len(stale))
                self._refresh_failed.add(session_id)
                break
            self._cache.pop(session_id, None)
        if done:
            logger.info("session %s: %d passages embedded with %s", session_id, done, self.index.model_name)


def format_passages(hits: list[Passage]) -> str:
    """Results for the model: one passage per line, ``[file, date] text``."""
    lines = []
    for hit in hits:
        where = f"{hit.source}, {hit.date}" if hit.date else hit.source
        lines.append(f"[{where}] {hit.text}")
    return "\n".join(lines)

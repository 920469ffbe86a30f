"""Hybrid search over the chunks of a set of scopes: BM25 over words and cosine similarity of the int8 vectors,
fused by reciprocal rank (memory/ranking.py), as ``memory_search`` ranks a session's memory.

The chunks of a set of scopes are loaded once into a :class:`KnowledgeCorpus` and kept while the scopes'
documents are unchanged (:func:`store.knowledge.stamp`), so a search costs one small query, a few postings and one
matrix-vector product (bench/knowledge.py: the median at 10,000 chunks).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from knowledge.chunk import Chunk
from memory.ranking import fuse, top
from memory.search import BM25_B, BM25_K1, terms
from store.knowledge import ChunkRow

#: Candidates each ranking contributes to the fusion.
CANDIDATES = 50
#: Below this cosine similarity a chunk is not a semantic candidate.
MIN_SIMILARITY = 0.1


@dataclass(frozen=True, slots=True)
class Hit:
    """One passage found: its document, page or heading, text and fused score."""

    document: str
    page: int | None
    section: str
    text: str
    score: float


@dataclass
class KnowledgeCorpus:
    """The chunks of some scopes, their BM25 postings and the vectors of the current model (float32 rows)."""

    rows: list[ChunkRow]
    model: str
    postings: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    vector_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))

    @classmethod
    def build(cls, rows: list[ChunkRow], model: str) -> KnowledgeCorpus:
        """Postings of every chunk's words (its heading included); its vector when stored by ``model``."""
        corpus = cls(rows=rows, model=model)
        lists: dict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        lengths = np.zeros(len(rows), dtype=np.float32)
        for i, row in enumerate(rows):
            counts = Counter(terms(Chunk(row.text, row.page, row.section).indexed_text()))
            lengths[i] = sum(counts.values())
            for term, tf in counts.items():
                docs, tfs = lists[term]
                docs.append(i)
                tfs.append(tf)
        corpus.postings = {t: (np.array(d, dtype=np.int64), np.array(f, dtype=np.float32))
                           for t, (d, f) in lists.items()}
        corpus.lengths = lengths
        picked = [i for i, r in enumerate(rows) if model and r.model == model and r.scale > 0 and r.vector]
        if picked:
            dim = len(rows[picked[0]].vector)
            picked = [i for i in picked if len(rows[i].vector) == dim]
            ints = np.frombuffer(b"".join(rows[i].vector for i in picked), dtype=np.int8).reshape(len(picked), dim)
            scales = np.array([rows[i].scale for i in picked], dtype=np.float32)[:, None]
            corpus.vector_rows = np.array(picked, dtype=np.int64)
            corpus.vectors = np.ascontiguousarray(ints.astype(np.float32) * scales)
        return corpus

    def keyword_ranking(self, query: str, limit: int = CANDIDATES) -> list[int]:
        """Row positions by BM25 score, best first."""
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
        """Row positions by cosine similarity to the query, best first."""
        if not len(self.vector_rows) or query_vector.shape[-1] != self.vectors.shape[1]:
            return []
        sims = self.vectors @ query_vector.astype(np.float32)
        return [int(self.vector_rows[i]) for i in top(sims, limit, above=MIN_SIMILARITY)]

    def search(self, query: str, query_vector: np.ndarray | None, k: int, *, words: bool = True) -> list[Hit]:
        """The ``k`` best chunks: words and meaning fused; either alone when the other is missing or off."""
        rankings = []
        if words:
            rankings.append(self.keyword_ranking(query))
        if query_vector is not None:
            rankings.append(self.vector_ranking(query_vector))
        hits = []
        for pos, score in fuse(*rankings)[:k]:
            row = self.rows[pos]
            hits.append(Hit(document=row.document, page=row.page, section=row.section, text=row.text, score=score))
        return hits

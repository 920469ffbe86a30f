"""Hybrid search over the chunks of a set of scopes: BM25 over words and cosine similarity of the int8 vectors,
fused by reciprocal rank (memory/ranking.py), as ``memory_search`` ranks a session's memory.

The chunks of a set of scopes are loaded once into a :class:`KnowledgeCorpus` and kept while the scopes'
documents are unchanged (:func:`store.knowledge.stamp`), so a search costs one small query, a few postings and one
matrix-vector product (bench/knowledge.py: the median at 10,000 chunks).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from knowledge.chunk import Chunk
from memory.ranking import fuse
from memory.search import RankedCorpus
from store.knowledge import ChunkRow


@dataclass(frozen=True, slots=True)
class Hit:
    """One passage found: its document, page or heading, text and fused score."""

    document: str
    page: int | None
    section: str
    text: str
    score: float


class KnowledgeCorpus(RankedCorpus[ChunkRow]):
    """The chunks of some scopes, their BM25 postings and the vectors of the current model (float32 rows);
    ranked as memory ranks a session's passages (:class:`memory.search.RankedCorpus`)."""

    @classmethod
    def build(cls, rows: list[ChunkRow], model: str) -> KnowledgeCorpus:
        """Postings of every chunk's words (its heading included); its vector when stored by ``model``."""
        corpus = cls(rows=rows, model=model)
        corpus.index_words(Chunk(row.text, row.page, row.section).indexed_text() for row in rows)
        picked = [i for i, r in enumerate(rows) if model and r.model == model and r.scale > 0 and r.vector]
        if picked:
            dim = len(rows[picked[0]].vector)
            picked = [i for i in picked if len(rows[i].vector) == dim]
            ints = np.frombuffer(b"".join(rows[i].vector for i in picked), dtype=np.int8).reshape(len(picked), dim)
            scales = np.array([rows[i].scale for i in picked], dtype=np.float32)[:, None]
            corpus.vector_rows = np.array(picked, dtype=np.int64)
            corpus.vectors = np.ascontiguousarray(ints.astype(np.float32) * scales)
        return corpus

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

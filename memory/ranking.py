"""Ranking helpers shared by the hybrid searches (``memory_search`` in memory/search.py, ``history_search`` in
memory/history_index.py): the best scores of a scan, and reciprocal rank fusion of a keyword and a vector
ranking, ``sum(1 / (60 + rank))``, so neither score scale has to be calibrated against the other."""

from __future__ import annotations

import numpy as np

#: The reciprocal rank fusion constant (Cormack et al.); larger flattens the head of each ranking.
RRF_K = 60


def top(scores: np.ndarray, limit: int, above: float) -> list[int]:
    """Indices of the ``limit`` highest scores greater than ``above``, best first (ties: older first)."""
    if not len(scores):
        return []
    k = min(limit, len(scores))
    part = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    order = sorted(part.tolist(), key=lambda i: (-float(scores[i]), i))
    return [i for i in order if scores[i] > above]


def fuse(*rankings: list[int], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: ``(item, score)`` best first; ties keep the earlier-listed ranking's order."""
    scores: dict[int, float] = {}
    first: dict[int, tuple[int, int]] = {}  # where an item was first listed: (which ranking, its rank there)
    for which, ranking in enumerate(rankings):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            first.setdefault(item, (rank, which))
    # On a tie the better rank wins, then the earlier-listed ranking: the keyword ranking comes first, so a passage
    # the words find (one stored a moment ago, not embedded yet) is not put behind one only the vectors find.
    return sorted(scores.items(), key=lambda item: (-item[1], first[item[0]]))

"""Reciprocal Rank Fusion: score(d) = Σ over retrievers of 1 / (k + rank of d in that retriever).

Ranks start at 1. A document missing from a retriever's list adds nothing for it. Ties are broken
deterministically: higher score, then the better best-rank, then the document id.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass
class Fused:
    doc_id: str
    score: float
    ranks: dict[str, int] = field(default_factory=dict)  # retriever → rank (1-based)


def rrf(lists: Mapping[str, Sequence[str]], k: int = 60) -> list[Fused]:
    if k <= 0:
        raise ValueError("k must be > 0")
    fused: dict[str, Fused] = {}
    for retriever, ids in lists.items():
        seen: set[str] = set()
        for position, doc_id in enumerate(ids, start=1):
            if doc_id in seen:
                continue  # a retriever's duplicate never counts twice
            seen.add(doc_id)
            entry = fused.setdefault(doc_id, Fused(doc_id, 0.0))
            entry.ranks[retriever] = position
            entry.score += 1.0 / (k + position)
    return sorted(fused.values(), key=lambda f: (-f.score, min(f.ranks.values()), f.doc_id))


def normalized(score: float, retrievers: int, k: int = 60) -> float:
    """The score as a fraction of the best possible (rank 1 in every retriever), 0–1."""
    best = retrievers / (k + 1)
    return score / best if best > 0 else 0.0

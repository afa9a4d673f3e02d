"""One search: retrievers (filters pushed down), exact matches pinned, RRF, snippets.

Exact matches come first: a query's `#234`, `!847` or `group/project#12` puts that issue/MR (then
its threads) at the top, and a query's whole code identifiers and paths (`parseJwtClaims`,
`src/auth/login.ts`) put the documents containing all of them next, in BM25 order. Everything
else is ordered by Reciprocal Rank Fusion of the BM25 top-N and the vector top-N.
"""

import time
from dataclasses import dataclass, field
from typing import Any

import tantivy

from gitlab_knowledge import kinds
from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import EmbeddingUnavailable, StoreError, UsageError
from gitlab_knowledge.lexical.analysis import identifier_terms, references
from gitlab_knowledge.lexical.index import LexicalIndex, stored_fields
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.search.rrf import normalized, rrf
from gitlab_knowledge.search.snippets import make_snippet

MODES = ("hybrid", "lexical", "semantic")
UNAVAILABLE = "Embedding service unavailable, using lexical search only"
MAX_LEXICAL_CHARS = 4096
# A reference pins the issue/MR itself before its threads.
TYPE_ORDER = {**{k.name: 0 for k in kinds.ITEM_KINDS}, kinds.DISCUSSION: 1}


@dataclass
class Result:
    rank: int
    score: float
    rrf_score: float
    match: str  # exact_reference | exact_identifier | fused
    ranks: dict[str, int]
    retriever_scores: dict[str, float]
    fields: dict[str, Any]
    snippet: str = ""
    highlights: list[tuple[int, int]] = field(default_factory=list)

    @property
    def doc_id(self) -> str:
        return self.fields["doc_id"]


@dataclass
class Response:
    query: str
    mode: str
    effective_mode: str
    took_ms: float
    embed_ms: float
    total: int
    limit: int
    rrf_k: int
    model: str | None
    filters: Filters
    results: list[Result]
    warnings: list[str]


def _whole_identifiers(text: str) -> list[str]:
    """The query's identifiers as written (not their parts): what an exact match means."""
    terms = identifier_terms(text)
    lowered = text.lower()
    return [t for t in terms if (any(ch in t for ch in "_./:-") or t in lowered.split()) and t in lowered
            and len(t) > 2 and any(ch.isalpha() for ch in t) and _is_whole(t, text)]


def _is_whole(term: str, text: str) -> bool:
    for token in text.split():
        stripped = token.strip(".,;:!?()[]{}'\"`").lower()
        if stripped == term and (any(ch in term for ch in "_./:-") or any(c.isupper() for c in token[1:])):
            return True
    return False


class Searcher:
    """Holds the open indexes and the embedding provider: a process pays their start-up once."""

    def __init__(self, config: Config, provider: str | None = None, model: str | None = None,
                 warm: bool = False) -> None:
        """`warm`: hold the vectors in memory (exact, ~10x faster per query after a ~0.5 s load per
        100K chunks): for processes that search many times. One-shot searches scan LanceDB."""
        self.config = config
        self.warm = warm
        self._memory: Any = None
        self._provider_name = provider
        self._model = model
        self._provider: Any = None
        self._vectors: Any = None
        self._lexical: LexicalIndex | None = None
        self._lexical_error: str | None = None

    # -- lazily opened parts ---------------------------------------------------------------

    def lexical(self) -> LexicalIndex | None:
        if self._lexical is None and self._lexical_error is None:
            try:
                self._lexical = LexicalIndex(self.config.tantivy_dir)
            except StoreError as exc:
                self._lexical_error = str(exc)
        return self._lexical

    def provider(self) -> Any:
        if self._provider is None:
            from gitlab_knowledge.embeddings.provider import get_provider

            self._provider = get_provider(self.config, self._provider_name, self._model)
        return self._provider

    def vectors(self) -> Any:
        if self._vectors is None:
            if not self.config.lancedb_dir.exists():
                return None
            from gitlab_knowledge.embeddings.vectors import VectorStore

            provider = self.provider()
            self._vectors = VectorStore(self.config.lancedb_dir, provider.provider, provider.model)
        return self._vectors if self._vectors.exists() else None

    # -- search -----------------------------------------------------------------------------

    def search(self, query: str, filters: Filters | None = None, mode: str = "hybrid", limit: int = 10) -> Response:
        started = time.perf_counter()
        filters = filters or Filters()
        if mode not in MODES:
            raise UsageError(f"--mode expects one of {', '.join(MODES)}, got {mode!r}")
        text = " ".join((query or "").split())
        if not text:
            raise UsageError("nothing to search for: the query is empty")
        warnings: list[str] = []
        lexical_text = text
        if len(text) > MAX_LEXICAL_CHARS:
            lexical_text = text[:MAX_LEXICAL_CHARS]
            warnings.append(f"query is {len(text):,} characters; keyword search used the first {MAX_LEXICAL_CHARS:,}")
        candidates = self.config.search.candidates
        k = self.config.search.rrf_k

        lexical_hits, semantic_hits, embed_ms = [], [], 0.0
        effective = mode
        if mode in ("hybrid", "semantic"):
            try:
                store = self.vectors()
                if store is None:
                    warnings.append("no embeddings yet for model "
                                    f"{self.provider().provider}/{self.provider().model}; using lexical search only")
                    effective = "lexical"
                else:
                    t0 = time.perf_counter()
                    vector = self.provider().embed_query(text)
                    embed_ms = (time.perf_counter() - t0) * 1000
                    semantic_hits = self._vector_hits(store, vector, filters, candidates)
            except EmbeddingUnavailable as exc:
                warnings.append(UNAVAILABLE)
                warnings.append(str(exc))
                effective = "lexical"
        index = self.lexical()
        if effective in ("hybrid", "lexical"):
            if index is None:
                if effective == "lexical":
                    raise StoreError(self._lexical_error or "no lexical index")
                warnings.append(f"lexical index unavailable ({self._lexical_error}); using semantic search only")
                effective = "semantic"
            else:
                lexical_hits = index.search(lexical_text, filters, candidates)

        lists: dict[str, list[str]] = {}
        if effective in ("hybrid", "lexical"):
            lists["lexical"] = [h.doc_id for h in lexical_hits]
        if effective in ("hybrid", "semantic"):
            lists["semantic"] = [h.doc_id for h in semantic_hits]
        fused = rrf(lists, k)
        fields = {h.doc_id: h.fields for h in semantic_hits}
        fields.update({h.doc_id: h.fields for h in lexical_hits})
        scores: dict[str, dict[str, float]] = {}
        for h in lexical_hits:
            scores.setdefault(h.doc_id, {})["lexical"] = h.score
        for h in semantic_hits:
            scores.setdefault(h.doc_id, {})["semantic"] = round(h.similarity, 6)
        excerpts = {h.doc_id: h.excerpt for h in semantic_hits}

        pinned = self._exact(index, lexical_text, filters, fields, lexical_hits) if index else []
        by_id = {f.doc_id: f for f in fused}
        ordered: list[tuple[str, str]] = [(doc_id, how) for doc_id, how in pinned]
        pinned_ids = {doc_id for doc_id, _ in pinned}
        ordered += [(f.doc_id, "fused") for f in fused if f.doc_id not in pinned_ids]
        total = len(ordered)
        results = []
        for position, (doc_id, how) in enumerate(ordered[:limit], start=1):
            entry = by_id.get(doc_id)
            rrf_score = entry.score if entry else 0.0
            score = 1.0 if how != "fused" else self._score(effective, rrf_score, len(lists), k,
                                                              scores.get(doc_id, {}), lexical_hits)
            results.append(Result(rank=position, score=round(score, 4), rrf_score=round(rrf_score, 6), match=how,
                                  ranks=dict(entry.ranks) if entry else {}, retriever_scores=scores.get(doc_id, {}),
                                  fields=fields[doc_id]))
        self._snippets(index, lexical_text, results, excerpts, {h.doc_id: h.chunk for h in semantic_hits})
        took = (time.perf_counter() - started) * 1000
        model = None
        if effective != "lexical" and self._provider is not None:
            model = f"{self._provider.provider}/{self._provider.model}"
        return Response(query=text, mode=mode, effective_mode=effective, took_ms=round(took, 2),
                        embed_ms=round(embed_ms, 2), total=total, limit=limit, rrf_k=k, model=model,
                        filters=filters, results=results, warnings=warnings)

    def _vector_hits(self, store: Any, vector: Any, filters: Filters, limit: int) -> list[Any]:
        from gitlab_knowledge.search.semantic import MemoryVectors, search_vectors

        if not self.warm:
            return search_vectors(store, vector, filters, limit)
        if self._memory is None:
            self._memory = MemoryVectors(store)
        return self._memory.search(vector, filters, limit)

    @staticmethod
    def _score(mode: str, rrf_score: float, retrievers: int, k: int, own: dict[str, float],
               lexical_hits: list[Any]) -> float:
        """0–1 for display: hybrid = RRF as a share of the best possible; a single retriever
        shows its own measure (cosine similarity, or BM25 relative to the top hit)."""
        if mode == "semantic":
            return max(0.0, own.get("semantic", 0.0))
        if mode == "lexical":
            top = lexical_hits[0].score if lexical_hits else 0.0
            return own.get("lexical", 0.0) / top if top > 0 else 0.0
        return normalized(rrf_score, max(retrievers, 1), k)

    def _exact(self, index: LexicalIndex, text: str, filters: Filters, fields: dict[str, dict[str, Any]],
               lexical_hits: list[Any]) -> list[tuple[str, str]]:
        """Documents that exactly match the query's references and whole identifiers."""
        searcher = index.index.searcher()
        must_filters = [(tantivy.Occur.Must, q) for q in index.filter_queries(filters)]
        out: list[tuple[str, str]] = []
        seen: set[str] = set()

        def run(query: tantivy.Query, limit: int) -> list[dict[str, Any]]:
            found = searcher.search(tantivy.Query.boolean_query([(tantivy.Occur.Must, query), *must_filters]),
                                    limit=limit, count=False).hits
            return [stored_fields(searcher.doc(address)) for _score, address in found]

        for project, kind, iid in references(text):
            ref = kinds.kind(kind).ref(iid, project)
            docs = run(index._term("refs", ref), 50)
            docs.sort(key=lambda d: (TYPE_ORDER.get(d["source_type"], 2), d["project"] or "", d["created_at"] or 0,
                                     d["doc_id"]))
            for doc in docs:
                if doc["doc_id"] not in seen:
                    seen.add(doc["doc_id"])
                    fields.setdefault(doc["doc_id"], doc)
                    out.append((doc["doc_id"], "exact_reference"))
        idents = _whole_identifiers(text)
        if idents:
            query = tantivy.Query.boolean_query([(tantivy.Occur.Must, index._term("idents", t)) for t in idents])
            docs = run(query, 50)
            lexical_rank = {h.doc_id: i for i, h in enumerate(lexical_hits)}
            docs.sort(key=lambda d: (lexical_rank.get(d["doc_id"], len(lexical_rank)), d["doc_id"]))
            for doc in docs:
                if doc["doc_id"] not in seen:
                    seen.add(doc["doc_id"])
                    fields.setdefault(doc["doc_id"], doc)
                    out.append((doc["doc_id"], "exact_identifier"))
        return out

    def _snippets(self, index: LexicalIndex | None, text: str, results: list[Result], excerpts: dict[str, str],
                  chunks: dict[str, int]) -> None:
        bodies = index.bodies([r.doc_id for r in results]) if index else {}
        made = {r.doc_id: make_snippet(bodies.get(r.doc_id, ""), text) for r in results}
        # In-memory hits carry no text: fetch the matching chunk of those that need it, at once.
        missing = {r.doc_id: chunks[r.doc_id] for r in results
                   if not made[r.doc_id][1] and r.doc_id in chunks and not excerpts.get(r.doc_id)}
        if missing and self._vectors is not None:
            excerpts = {**excerpts, **self._vectors.excerpts(missing)}
        for result in results:
            snippet, ranges = made[result.doc_id]
            excerpt = excerpts.get(result.doc_id)
            if not ranges and excerpt:
                # Matched by meaning, not by words: show the passage whose vector matched.
                snippet, ranges = make_snippet(excerpt, text)
            result.snippet, result.highlights = snippet, ranges


def parent_kind(fields: dict[str, Any]) -> kinds.Kind:
    """The kind of the issue/MR a result is (or is a thread on)."""
    try:
        return kinds.kind(fields.get("parent_type") or kinds.ISSUE.name)
    except KeyError:
        return kinds.ISSUE


def reference_of(fields: dict[str, Any]) -> str:
    return parent_kind(fields).ref(fields.get("iid"))

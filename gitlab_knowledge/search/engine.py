"""One search: retrievers (filters pushed down), exact matches pinned, RRF, snippets.

Exact matches come first (search/pinned.py): a query's `#234`, `!847` or `group/project#12` puts
that issue/MR at the top, then the items it closes or is closed by, then its threads; a query's
whole code identifiers and paths (`parseJwtClaims`, `src/auth/login.ts`) put the documents
containing all of them next, in BM25 order. Everything else is ordered by Reciprocal Rank Fusion
of the BM25 top-N and the vector top-N. Graph filters (`--path`, `--participant`) are resolved to
document ids before the retrievers run (search/graph_filters.py).
"""

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gitlab_knowledge import kinds
from gitlab_knowledge.documents.columns import DocFields
from gitlab_knowledge.errors import EmbeddingUnavailable, StoreError
from gitlab_knowledge.lexical.analysis import query_words, word_analyzer
from gitlab_knowledge.lexical.index import LexicalIndex
from gitlab_knowledge.search import relevance
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.search.graph_filters import resolve
from gitlab_knowledge.search.lexical_retriever import LexicalHit, search_lexical
from gitlab_knowledge.search.pinned import exact_matches, linked_items
from gitlab_knowledge.search.query_plan import plan
from gitlab_knowledge.search.query_text import check_finite, embedding_text, keyword_text, query_text
from gitlab_knowledge.search.rrf import Fused, normalized, rrf
from gitlab_knowledge.search.snippets import make_snippet

if TYPE_CHECKING:  # LanceDB and numpy load on a search's first semantic step, not at import
    from gitlab_knowledge.search.semantic import MemoryVectors, SemanticHit
    from gitlab_knowledge.search.tolerance import Expansion
    from gitlab_knowledge.workspace import Workspace

UNAVAILABLE = "Embedding service unavailable, using lexical search only"
RECHECK_SECONDS = 30.0  # a long-lived searcher answering from another model's table looks again this often


@dataclass
class Result:
    rank: int
    score: float
    rrf_score: float
    match: str  # exact_reference | linked | exact_identifier | fused
    ranks: dict[str, int]
    retriever_scores: dict[str, float]
    fields: DocFields
    snippet: str = ""
    highlights: list[tuple[int, int]] = field(default_factory=list)
    weak: bool = False  # no retriever vouches for it (search/relevance.py)
    linked: bool = False  # `similar`: the asked-about item's own text references it (a link, not a likeness)

    @property
    def doc_id(self) -> str:
        return self.fields.doc_id


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
    no_good_match: str | None = None  # why nothing is shown although documents were ranked
    phrases: list[str] = field(default_factory=list)  # the query's "quoted phrases" (search/query_plan.py)
    excluded: list[str] = field(default_factory=list)  # its -excluded words and phrases
    expanded: "list[Expansion]" = field(default_factory=list)  # words no document holds, searched as others


@dataclass
class _Retrieved:
    """What the retrievers found for one search, and the mode that could actually run."""

    mode: str
    lexical: list[LexicalHit] = field(default_factory=list)
    semantic: "list[SemanticHit]" = field(default_factory=list)
    embed_ms: float = 0.0


@dataclass
class _Fusion:
    """The retrievers' lists fused: the RRF order, each document's fields and own scores."""

    lists: dict[str, list[str]]
    ranked: list[Fused]
    fields: dict[str, DocFields]
    scores: dict[str, dict[str, float]]

    @property
    def by_id(self) -> dict[str, Fused]:
        return {f.doc_id: f for f in self.ranked}


class Searcher:
    """Holds the open indexes and the embedding provider: a process pays their start-up once.
    All three come from the workspace (`Workspace.searcher`), never from the settings directly."""

    def __init__(self, workspace: "Workspace", provider: str | None = None, model: str | None = None,
                 warm: bool = False) -> None:
        """`warm`: hold the vectors in memory (exact, ~10x faster per query after a ~0.5 s load per
        100K chunks): for processes that search many times. One-shot searches scan LanceDB."""
        self.workspace = workspace
        self.config = workspace.config
        self.warm = warm
        self._memory: MemoryVectors | None = None
        self._provider_name = provider
        self._model = model
        self._provider: Any = None
        self._vectors: Any = None
        self._lexical: LexicalIndex | None = None
        self._lexical_error: str | None = None
        self._switch_note: str | None = None  # answering from another model's table, and why
        self._chosen_at = 0.0

    # -- lazily opened parts ---------------------------------------------------------------

    def lexical(self) -> LexicalIndex | None:
        if self._lexical is None and self._lexical_error is None:
            try:
                self._lexical = self.workspace.lexical()
            except StoreError as exc:
                self._lexical_error = str(exc)
        return self._lexical

    def provider(self) -> Any:
        if self._provider is None:
            self._provider = self.workspace.embedder(self._provider_name, self._model)
        return self._provider

    def vectors(self) -> Any:
        if self._vectors is None or (self._switch_note and time.monotonic() - self._chosen_at > RECHECK_SECONDS):
            if not self.config.lancedb_dir.exists():
                return None
            self._choose_table()
            provider = self.provider()
            self._vectors = self.workspace.vectors(provider.provider, provider.model)
            self._memory = None
        return self._vectors if self._vectors.reader() is not None else None

    def _choose_table(self) -> None:
        """The configured model's table once it is complete; until then the most complete other
        one (embeddings/tables.py), so a model switch never leaves search without vectors. A model
        asked for by name (`--model`) is used as it is."""
        from gitlab_knowledge.embeddings.tables import answering_table

        self._chosen_at, self._switch_note = time.monotonic(), None
        if self._provider_name is not None:
            return
        configured = self.workspace.embedder()
        index = self.lexical()
        info, note = answering_table(self.config.lancedb_dir, (configured.provider, configured.model),
                                     index.count() if index else 0)
        if note and info is not None:
            self._provider, self._switch_note = self.workspace.embedder(info.provider, info.model), note
        else:
            self._provider = configured

    # -- search: resolve filters -> retrieve -> fuse -> pin -> order -> floor -> snippets ----

    def search(self, query: str, filters: Filters | None = None, mode: str = "hybrid", limit: int = 10,
               floor: bool = True, vector: Any = None, group: bool = False, typed: bool = True,
               pin: bool = True) -> Response:
        """`floor=False` keeps results below the relevance floor (search/relevance.py) unmarked;
        `vector` is the query's embedding when the caller has it already (`similar`: the item's);
        `group` keeps each issue/MR's best-ranked document only (its item or one thread);
        `typed=False`: the query is a document's text (`similar`), searched as it is: no URLs,
        phrases, exclusions or typo tolerance read into it (search/query_plan.py);
        `pin=False` ranks the query's references and identifiers like its words (`similar`: an
        item's text is the query, and what it mentions is not what it is like)."""
        started = time.perf_counter()
        filters = filters or Filters()
        text = query_text(query, mode)
        warnings: list[str] = []
        filters, graph_warnings = resolve(self.workspace, filters)
        warnings += graph_warnings
        index = self.lexical()
        planned = plan(index if typed else None, text, filters, self.config.gitlab.url, warnings, typed)
        filters, lexical_text = planned.filters, keyword_text(planned.keyword, warnings)
        got = self._retrieve(mode, planned.semantic, lexical_text, filters, vector, warnings)
        fusion = self._fuse(got)
        ranked = [h.doc_id for h in got.lexical] or [h.doc_id for h in got.semantic]
        pinned = exact_matches(index, lexical_text, filters, fusion.fields, ranked,
                               lambda ids: linked_items(self.workspace, ids, warnings)) if index and pin else []
        bodies = _BodyCache(index)
        ordered = self._order(index, lexical_text, pinned, fusion, bodies, group)
        results = self._results(ordered[:limit], fusion, got)
        self._snippets(lexical_text, results, {h.doc_id: h.excerpt for h in got.semantic},
                       {h.doc_id: h.chunk for h in got.semantic}, bodies)
        total = len(ordered)
        no_good_match = self._floor(index, lexical_text, results, bodies) if floor else None
        if no_good_match and got.mode != "lexical":
            results, total = [], 0
        # Keywords alone cannot tell a paraphrase from nonsense: lexical mode keeps its weak
        # matches, each marked, under the top-level reason.
        took = (time.perf_counter() - started) * 1000
        model = None
        if got.mode != "lexical" and self._provider is not None:
            model = f"{self._provider.provider}/{self._provider.model}"
        return Response(query=text, mode=mode, effective_mode=got.mode, took_ms=round(took, 2),
                        embed_ms=round(got.embed_ms, 2), total=total, limit=limit,
                        rrf_k=self.config.search.rrf_k, model=model, filters=filters, results=results,
                        warnings=warnings, no_good_match=no_good_match, phrases=planned.phrases,
                        excluded=planned.excluded, expanded=planned.expanded)

    def _retrieve(self, mode: str, text: str, lexical_text: str, filters: Filters, vector: Any,
                  warnings: list[str]) -> _Retrieved:
        """Each retriever's top candidates; a retriever that cannot run leaves the other one to
        answer alone, with a warning (the mode that ran is `_Retrieved.mode`)."""
        candidates = self.config.search.candidates
        got = _Retrieved(mode)
        if mode in ("hybrid", "semantic"):
            self._retrieve_semantic(got, text, filters, vector, candidates, warnings)
        index = self.lexical()
        if got.mode in ("hybrid", "lexical"):
            if index is None:
                if got.mode == "lexical":
                    raise StoreError(self._lexical_error or "no lexical index")
                warnings.append(f"lexical index unavailable ({self._lexical_error}); using semantic search only")
                got.mode = "semantic"
            else:
                got.lexical = search_lexical(index, lexical_text, filters, candidates)
        return got

    def _retrieve_semantic(self, got: _Retrieved, text: str, filters: Filters, vector: Any, candidates: int,
                           warnings: list[str]) -> None:
        try:
            store = self.vectors()
            if store is None:
                warnings.append("no embeddings yet for model "
                                f"{self.provider().provider}/{self.provider().model}; using lexical search only")
                got.mode = "lexical"
                return
            if self._switch_note:
                warnings.append(self._switch_note)
            t0 = time.perf_counter()
            if vector is None:
                vector = self.provider().embed_query(embedding_text(text, warnings))
            got.embed_ms = (time.perf_counter() - t0) * 1000
            store.check_query(vector)  # another size than the table's: keywords, with a warning
            check_finite(vector)
            got.semantic = self._vector_hits(store, vector, filters, candidates)
        except EmbeddingUnavailable as exc:
            warnings.append(UNAVAILABLE)
            warnings.append(str(exc))
            got.mode = "lexical"

    def _fuse(self, got: _Retrieved) -> _Fusion:
        """RRF of the lists of the retrievers that ran; a lexical hit's fields win over a semantic one's."""
        lists: dict[str, list[str]] = {}
        if got.mode in ("hybrid", "lexical"):
            lists["lexical"] = [h.doc_id for h in got.lexical]
        if got.mode in ("hybrid", "semantic"):
            lists["semantic"] = [h.doc_id for h in got.semantic]
        fields = {h.doc_id: h.fields for h in got.semantic}
        fields.update({h.doc_id: h.fields for h in got.lexical})
        scores: dict[str, dict[str, float]] = {}
        for h in got.lexical:
            scores.setdefault(h.doc_id, {})["lexical"] = h.score
        for s in got.semantic:
            scores.setdefault(s.doc_id, {})["semantic"] = round(s.similarity, 6)
        return _Fusion(lists, rrf(lists, self.config.search.rrf_k), fields, scores)

    @staticmethod
    def _order(index: LexicalIndex | None, text: str, pinned: list[tuple[str, str]], fusion: _Fusion,
               bodies: "_BodyCache", group: bool) -> list[tuple[str, str]]:
        """(document id, how) in the order shown: the pinned documents, then the fused ones with
        thin threads below their items (search/relevance.py); `group`: each issue/MR once."""
        pinned_ids = {doc_id for doc_id, _ in pinned}
        analyzer = index.words if index else word_analyzer()
        terms = query_words(analyzer, text)

        def says_more(thread_notes: str, item_text: str) -> bool:
            return relevance.coverage(terms, set(analyzer.analyze(thread_notes))) > \
                relevance.coverage(terms, set(analyzer.analyze(item_text)))

        ordered = list(pinned) + [(doc_id, "fused") for doc_id in relevance.items_before_threads(
            [f.doc_id for f in fusion.ranked if f.doc_id not in pinned_ids], fusion.fields, bodies.get, says_more)]
        return relevance.one_per_item(ordered, fusion.fields) if group else ordered

    def _results(self, shown: list[tuple[str, str]], fusion: _Fusion, got: _Retrieved) -> list[Result]:
        by_id = fusion.by_id
        results = []
        for position, (doc_id, how) in enumerate(shown, start=1):
            entry = by_id.get(doc_id)
            rrf_score = entry.score if entry else 0.0
            own = fusion.scores.get(doc_id, {})
            score = 1.0 if how != "fused" else self._score(got.mode, rrf_score, len(fusion.lists),
                                                              self.config.search.rrf_k, own, got.lexical)
            results.append(Result(rank=position, score=round(score, 4), rrf_score=round(rrf_score, 6), match=how,
                                  ranks=dict(entry.ranks) if entry else {}, retriever_scores=own,
                                  fields=fusion.fields[doc_id]))
        return results

    def _vector_hits(self, store: Any, vector: Any, filters: Filters, limit: int) -> "list[SemanticHit]":
        from gitlab_knowledge.search.semantic import MemoryVectors, search_vectors

        if not self.warm:
            return search_vectors(store, vector, filters, limit)
        if self._memory is None:
            self._memory = MemoryVectors(store)
        return self._memory.search(vector, filters, limit)

    @staticmethod
    def _score(mode: str, rrf_score: float, retrievers: int, k: int, own: dict[str, float],
               lexical_hits: list[LexicalHit]) -> float:
        """0–1 for display: hybrid = RRF as a share of the best possible; a single retriever
        shows its own measure (cosine similarity, or BM25 relative to the top hit)."""
        if mode == "semantic":
            return max(0.0, own.get("semantic", 0.0))
        if mode == "lexical":
            top = lexical_hits[0].score if lexical_hits else 0.0
            return own.get("lexical", 0.0) / top if top > 0 else 0.0
        return normalized(rrf_score, max(retrievers, 1), k)

    @staticmethod
    def _floor(index: LexicalIndex | None, text: str, results: list[Result], bodies: "_BodyCache") -> str | None:
        """Mark the results no retriever vouches for as weak; the reason when all of them are."""
        analyzer = index.words if index else word_analyzer()
        terms = query_words(analyzer, text)
        if not results or not relevance.judged(terms):
            return None
        texts = bodies.get([r.doc_id for r in results]) if index else {}
        best_sim: float | None = None
        best_cov: float | None = None
        for r in results:
            similarity = r.retriever_scores.get("semantic")
            covered = relevance.coverage(terms, set(analyzer.analyze(texts[r.doc_id]))) if r.doc_id in texts else None
            r.weak = relevance.is_weak(r.match, similarity, covered)
            if similarity is not None:
                best_sim = max(best_sim or 0.0, similarity)
            if covered is not None:
                best_cov = max(best_cov or 0.0, covered)
        if all(r.weak for r in results):
            return relevance.reason(best_sim, best_cov)
        return None

    def _snippets(self, text: str, results: list[Result], excerpts: dict[str, str], chunks: dict[str, int],
                  bodies: "_BodyCache") -> None:
        texts = bodies.get([r.doc_id for r in results])
        made = {r.doc_id: make_snippet(texts.get(r.doc_id, ""), text) for r in results}
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


class _BodyCache:
    """Documents' stored texts from the lexical index, each looked up once per search."""

    def __init__(self, index: LexicalIndex | None) -> None:
        self.index = index
        self.texts: dict[str, str] = {}

    def get(self, doc_ids: list[str]) -> dict[str, str]:
        missing = [d for d in doc_ids if d not in self.texts]
        if missing and self.index is not None:
            self.texts.update(self.index.bodies(missing))
        return {d: self.texts[d] for d in doc_ids if d in self.texts}


def parent_kind(fields: relevance.ByName) -> kinds.Kind:
    """The kind of the issue/MR a result is (or is a thread on)."""
    try:
        return kinds.kind(fields.get("parent_type") or kinds.ISSUE.name)
    except KeyError:
        return kinds.ISSUE


def reference_of(fields: relevance.ByName) -> str:
    return kinds.document_ref(fields.get("parent_type"), fields.get("iid"), fields.get("url"))

"""Exact matches, pinned before the fused ranking.

A query's `#234`, `!847` or `group/project#12` (or a pasted URL of a synced issue/MR, read as its
reference: search/query_plan.py `urls_as_references`) pins that issue/MR, then the items linked to it by
closing (the MR that closes the issue, the issue an MR closes: `item_references` rows of kind
closes or closed_by, in either direction), then the item's own threads. Someone asking about an
issue wants the change that fixed it next, before the issue's comment threads. A query that is
exactly an issue's or MR's title (its words, whatever the case and punctuation) pins that item
next: a title is the item's name, as a reference is its number, and other documents repeating
those words (the MR whose `Closes:` line names the issue, a thread under its header) are not it.
The query's whole code identifiers and paths (`parseJwtClaims`, `src/auth/login.ts`) pin the
documents containing all of them next, in BM25 order (the vectors' order in semantic mode).

Links live in the DuckDB store (the lexical index does not know which mention closes what), read
through one short connection per query that pins an item. A store that cannot be read in time
(a sync is writing it) costs the links only, with a warning: a search without references or graph filters never opens DuckDB.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import tantivy

from gitlab_knowledge import kinds
from gitlab_knowledge.documents.columns import DOC_ID, DocFields
from gitlab_knowledge.errors import StoreBusyError, StoreError
from gitlab_knowledge.lexical.analysis import code_identifiers, references, title_key
from gitlab_knowledge.lexical.index import LexicalIndex
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.search.lexical_retriever import filter_queries

if TYPE_CHECKING:
    from gitlab_knowledge.workspace import Workspace

PIN_MAX_WORDS = 24
LINK_KINDS = ("closes", "closed_by")
LINK_WAIT_SECONDS = 2.0  # a sync holds the store for one page commit at a time: a short wait usually gets in
# A reference pins the issue/MR itself before its threads.
TYPE_ORDER = {**{k.name: 0 for k in kinds.ITEM_KINDS}, kinds.DISCUSSION: 1}

# Both directions: the item wrote the link (an MR's "Closes #234"; an issue's system note "closed
# via merge request !847", recorded as closed_by) or another item wrote it about this one.
LINKED_SQL = f"""
    SELECT item, linked FROM (
        SELECT i.id AS item, t.id AS linked FROM documents i
        JOIN item_references r ON r.source_type = i.source_type AND r.source_id = i.parent_id
        JOIN documents t ON t.source_type = r.target_type AND t.project_id = r.target_project_id
                        AND t.parent_iid = r.target_iid
        WHERE list_contains($items, i.id) AND r.kind IN {LINK_KINDS}
        UNION
        SELECT i.id, s.id FROM documents i
        JOIN item_references r ON r.target_type = i.source_type AND r.target_project_id = i.project_id
                              AND r.target_iid = i.parent_iid
        JOIN documents s ON s.source_type = r.source_type AND s.parent_id = r.source_id
        WHERE list_contains($items, i.id) AND r.kind IN {LINK_KINDS}
    ) WHERE item <> linked
"""

Linker = Callable[[list[str]], dict[str, list[str]]]


def linked_items(workspace: "Workspace", item_ids: list[str], warnings: list[str]) -> dict[str, list[str]]:
    """item document id → the ids of the item documents it closes or is closed by. A store that
    cannot be read adds a warning and links nothing."""
    if not item_ids:
        return {}
    try:
        with workspace.read(LINK_WAIT_SECONDS) as con:
            found = con.execute(LINKED_SQL, {"items": item_ids}).fetchall()
    except (StoreBusyError, StoreError) as exc:
        warnings.append(f"items linked to the referenced ones are not shown: {exc}")
        return {}
    out: dict[str, list[str]] = {}
    for item, linked in sorted(found):
        out.setdefault(item, []).append(linked)
    return out


def pinned_identifiers(text: str) -> list[str]:
    """The code identifiers an exact match pins (analysis.code_identifiers: not capitalised or
    hyphenated words). None for a long query: a pasted issue's identifiers are incidental, and
    requiring all of them would pin whatever happens to share them."""
    if len(text.split()) > PIN_MAX_WORDS:
        return []
    return code_identifiers(text)


def _reference_order(doc: DocFields) -> tuple[Any, ...]:
    return TYPE_ORDER.get(doc["source_type"], 2), doc["project"] or "", doc["created_at"] or 0, doc["doc_id"]


def exact_matches(index: LexicalIndex, text: str, filters: Filters, fields: dict[str, DocFields],
                  ranked: list[str], linker: Linker) -> list[tuple[str, str]]:
    """(document id, how) of the documents pinned first: `exact_reference`, `linked` (closes /
    closed by a referenced item), `exact_title` or `exact_identifier`. Every one passes `filters`.
    Their stored fields are added to `fields`. `ranked`: document ids in the retrievers' order
    (BM25's when it ran), which orders the items of one title and the identifier matches."""
    searcher = index.searcher()
    must_filters = [(tantivy.Occur.Must, q) for q in filter_queries(index, filters)]
    out: list[tuple[str, str]] = []
    seen: set[str] = set()

    def run(query: tantivy.Query, limit: int, filtered: bool = True) -> list[DocFields]:
        clauses = [(tantivy.Occur.Must, query), *(must_filters if filtered else [])]
        return [doc for _score, doc in index.find(tantivy.Query.boolean_query(clauses), limit, searcher)]

    def pin(docs: list[DocFields], how: str) -> None:
        for doc in docs:
            if doc["doc_id"] not in seen:
                seen.add(doc["doc_id"])
                fields.setdefault(doc["doc_id"], doc)
                out.append((doc["doc_id"], how))

    for project, kind, iid in references(text):
        ref = index.term("refs", kinds.kind(kind).ref(iid, project))
        docs = sorted(run(ref, 50), key=_reference_order)
        pin([d for d in docs if d["source_type"] != kinds.DISCUSSION], "exact_reference")
        # Links are followed from the referenced item even when a filter leaves the item itself
        # out: `#234 --type mr` asks for the merge request that closed #234.
        items = sorted((d for d in run(ref, 50, filtered=False) if d["source_type"] != kinds.DISCUSSION),
                       key=_reference_order)
        links = linker([d["doc_id"] for d in items]) if items else {}
        for item in items:
            ids = [i for i in links.get(item["doc_id"], []) if i not in seen]
            if ids:
                # Through the index with the filters: a linked item a filter leaves out stays out.
                query = tantivy.Query.term_set_query(index.schema, DOC_ID, ids)
                pin(sorted(run(query, len(ids)), key=_reference_order), "linked")
        pin([d for d in docs if d["source_type"] == kinds.DISCUSSION], "exact_reference")
    rank = {doc_id: i for i, doc_id in enumerate(ranked)}
    key = title_key(text)
    if key:
        # Items sharing a title (an MR named after the issue it closes) in the retrievers' order.
        docs = run(index.term("title_key", key), 50)
        docs.sort(key=lambda d: (rank.get(d["doc_id"], len(rank)), *_reference_order(d)))
        pin(docs, "exact_title")
    idents = pinned_identifiers(text)
    if idents:
        query = tantivy.Query.boolean_query([(tantivy.Occur.Must, index.term("idents", t)) for t in idents])
        docs = run(query, 50)
        docs.sort(key=lambda d: (rank.get(d["doc_id"], len(rank)), d["doc_id"]))
        pin(docs, "exact_identifier")
    return out

"""`similar REF`: the issues and merge requests most like a given one (duplicates, prior art).

The item is found in the lexical index (finding it opens no DuckDB); its own text (title and
description, without the header's reference and state lines) is the keyword query, and its stored
vector (its first window: title and the start of the description) is the semantic query, so
nothing is embedded again. The two are fused like any search, with the same filters; the item and
its own threads are left out. Unless `--type` says otherwise, only issues and MRs are returned.

The ranking is by likeness alone: the references in the item's text are not pinned first as a
search pins a query's `#12` (they are what the item mentions, not what it is like). A result the
item's own text references is marked `linked`, beside its score.
"""

import dataclasses
import re

import numpy as np

from gitlab_knowledge import kinds
from gitlab_knowledge.documents.columns import DocFields
from gitlab_knowledge.errors import AmbiguousReference, BadReference, StoreError, UsageError
from gitlab_knowledge.lexical.analysis import references
from gitlab_knowledge.lexical.index import LexicalIndex
from gitlab_knowledge.search.engine import Response, Searcher
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.search.relevance import item_key
from gitlab_knowledge.search.snippets import body_of

_DOC = re.compile(r"^(" + "|".join(re.escape(k.name) for k in kinds.ITEM_KINDS) + r"):\S+$")
FETCH = 100  # results asked of the search before the item's own documents are taken out


def _item_doc(index: LexicalIndex, ref: str, project: str | None) -> DocFields:
    """The stored fields of the issue/MR document a reference names."""
    ref = ref.strip()
    if _DOC.match(ref):
        term = index.term("doc_id", ref)
    else:
        parsed = kinds.parse_reference(ref)
        if parsed is None:
            raise BadReference("similar", ref, "#IID, !IID, group/project#IID, an issue/MR URL or a document id")
        term = index.term("refs", parsed.kind.ref(parsed.iid, parsed.project or project))
    docs = [doc for _score, doc in index.find(term, 1000)]
    docs = [d for d in docs if d["source_type"] != kinds.DISCUSSION]
    if not docs:
        raise UsageError(f"no {ref} in the index" + (f" of {project}" if project else "") + ": sync first?")
    if len(docs) > 1:
        raise AmbiguousReference(ref, [d["project"] for d in docs], written_as="group/project#IID")
    return docs[0]


def similar(searcher: Searcher, ref: str, filters: Filters | None = None, mode: str = "hybrid",
            limit: int = 10, project: str | None = None) -> Response:
    """The issues/MRs most like the one `ref` names (see the module docstring)."""
    filters = filters or Filters()
    index = searcher.lexical()
    if index is None:
        raise StoreError("no lexical index yet: run `python -m gitlab_knowledge sync`")
    source = _item_doc(index, ref, project or filters.project)
    text = index.bodies([source["doc_id"]]).get(source["doc_id"], "")
    query = "\n".join(filter(None, [source.get("title") or "", body_of(text) if "\n\n" in text else ""])) \
        or source.get("title") or ref
    # Its references out of the keyword query: a `#234` there would match #234's own reference
    # field, a link scored as likeness (the result is marked `linked` instead).
    query = _without_references(query) or query
    if not filters.types:
        filters = dataclasses.replace(filters, types=tuple(k.name for k in kinds.ITEM_KINDS))
    vector = _stored_vector(searcher, source["doc_id"]) if mode != "lexical" else None
    response = searcher.search(query, filters, mode, FETCH, vector=vector, typed=False, pin=False)
    own = item_key(source)
    others = [r for r in response.results if item_key(r.fields) != own]
    kept = others[:limit]
    mentioned = {(ref_project or source["project"], kind, iid) for ref_project, kind, iid in references(text)}
    for rank, result in enumerate(kept, start=1):
        result.rank = rank
        result.linked = item_key(result.fields) in mentioned
    response.total = max(len(others), response.total - (len(response.results) - len(others)))
    response.results = kept
    response.limit = limit
    response.query = f"similar to {source['project']}{kinds.document_ref(source['parent_type'], source['iid'], source['url'])}"
    return response


def _without_references(text: str) -> str:
    spans = [(start, end) for _ref, start, end in kinds.find_references(text)]
    for start, end in reversed(spans):
        text = text[:start] + " " + text[end:]
    return text.strip()


def _stored_vector(searcher: Searcher, doc_id: str) -> np.ndarray | None:
    """The item's first-window vector from the configured model's table (None: not embedded yet,
    and search embeds the text instead)."""
    store = searcher.vectors()
    if store is None:
        return None
    rows = store.rows_for([doc_id]).to_pylist()
    first = min(rows, key=lambda r: r["chunk"], default=None)
    return np.asarray(first["vector"], dtype=np.float32) if first else None

"""The Tantivy index: schema, writes (one writer at a time), per-project state, BM25 search.

Queries are built from terms, never parsed: a user's `AND(`, `field:value` or unbalanced quote is
just text here, so lexical syntax can never make a search fail.
"""

import contextlib
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tantivy

from gitlab_knowledge.errors import StoreBusyError, StoreError
from gitlab_knowledge.lexical.analysis import (
    IDENT_ANALYZER,
    WORD_ANALYZER,
    ident_analyzer,
    identifier_terms,
    query_words,
    references,
    word_analyzer,
)
from gitlab_knowledge.search.filters import Filters

SCHEMA_VERSION = "1"
VERSION_FILE = "gitlab_knowledge_schema"
RAW_FIELDS = ("doc_id", "source_type", "project", "parent_type", "author", "state", "labels", "refs", "mentions",
              "content_hash", "meta_hash", "url", "parent_title")
SIGIL = {"issue": "#", "merge_request": "!"}
BOOST = {"title": 2.0, "body": 1.0, "ident_whole": 4.0, "ident_part": 1.0, "ref": 30.0, "mention": 2.0}


def build_schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    for name in RAW_FIELDS:
        sb.add_text_field(name, stored=True, tokenizer_name="raw")
    sb.add_text_field("title", stored=True, tokenizer_name=WORD_ANALYZER)
    sb.add_text_field("body", stored=True, tokenizer_name=WORD_ANALYZER)
    sb.add_text_field("idents", stored=False, tokenizer_name=IDENT_ANALYZER)
    sb.add_integer_field("iid", stored=True, indexed=True, fast=True)
    sb.add_date_field("created_at", stored=True, indexed=True, fast=True)
    sb.add_date_field("updated_at", stored=True, indexed=True, fast=True)
    sb.add_boolean_field("confidential", stored=True, indexed=True, fast=True)
    sb.add_boolean_field("internal", stored=True, indexed=True, fast=True)
    return sb.build()


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _naive(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    return None


@dataclass
class LexicalHit:
    doc_id: str
    score: float
    fields: dict[str, Any]


def own_refs(row: dict[str, Any]) -> list[str]:
    sigil = SIGIL[row["parent_type"]]
    return [f"{sigil}{row['parent_iid']}", f"{row['project_path']}{sigil}{row['parent_iid']}"]


def mentioned_refs(text: str, project: str) -> list[str]:
    out = []
    for ref_project, kind, iid in references(text):
        out.append(f"{ref_project or project}{SIGIL[kind]}{iid}")
        if ref_project is None or ref_project == project:
            out.append(f"{SIGIL[kind]}{iid}")
    return sorted(set(out))


class LexicalIndex:
    def __init__(self, directory: Path, *, create: bool = False) -> None:
        self.dir = directory
        self.schema = build_schema()
        version = directory / VERSION_FILE
        if not (directory / "meta.json").exists() or not version.exists():
            if not create:
                raise StoreError(f"no lexical index at {directory} yet: run `python -m gitlab_knowledge sync`")
        elif version.read_text().strip() != SCHEMA_VERSION:
            if not create:
                raise StoreError(f"the lexical index at {directory} has an old layout: run a sync to rebuild it")
            shutil.rmtree(directory)  # rebuilt from the documents table by the caller
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self.index = tantivy.Index(self.schema, path=str(directory), reuse=True)
            if create:
                version.write_text(SCHEMA_VERSION)
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot open the lexical index {directory}: {exc}") from None
        self.words = word_analyzer()
        self.index.register_tokenizer(WORD_ANALYZER, self.words)
        self.index.register_tokenizer(IDENT_ANALYZER, ident_analyzer())

    # -- writes -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def writer(self) -> Iterator[Any]:
        try:
            writer = self.index.writer(heap_size=64_000_000, num_threads=1)
        except ValueError as exc:
            if "LockBusy" in str(exc) or "lock" in str(exc).lower():
                raise StoreBusyError(f"the lexical index {self.dir} is being written by another process") from None
            raise StoreError(f"cannot write the lexical index {self.dir}: {exc}") from None
        try:
            yield writer
        except BaseException:
            with contextlib.suppress(Exception):
                writer.rollback()
            raise
        finally:
            with contextlib.suppress(Exception):
                writer.wait_merging_threads()
        self.index.reload()

    def document(self, row: dict[str, Any]) -> tantivy.Document:
        doc = tantivy.Document()
        doc.add_text("doc_id", row["id"])
        doc.add_text("source_type", row["source_type"])
        doc.add_text("project", row["project_path"])
        doc.add_text("parent_type", row["parent_type"])
        doc.add_text("author", row["author_username"] or "")
        doc.add_text("state", row["state"] or "")
        for label in row["labels"] or []:
            doc.add_text("labels", label)
        for ref in own_refs(row):
            doc.add_text("refs", ref)
        for ref in mentioned_refs(row["content_text"], row["project_path"]):
            doc.add_text("mentions", ref)
        doc.add_text("content_hash", row["content_hash"])
        doc.add_text("meta_hash", row["meta_hash"])
        doc.add_text("url", row["url"] or "")
        doc.add_text("parent_title", row["parent_title"] or "")
        # A thread's header repeats its parent's title; only issues and MRs score on `title`.
        doc.add_text("title", row["title"] or "" if row["source_type"] != "discussion" else "")
        doc.add_text("body", row["content_text"])
        doc.add_text("idents", " ".join(identifier_terms(row["content_text"])))
        doc.add_integer("iid", int(row["parent_iid"]))
        for name in ("created_at", "updated_at"):
            if row.get(name) is not None:
                doc.add_date(name, _aware(row[name]))
        doc.add_boolean("confidential", bool(row["confidential"]))
        doc.add_boolean("internal", bool(row["internal"]))
        return doc

    # -- reads ------------------------------------------------------------------------------

    def _term(self, field: str, value: Any) -> tantivy.Query:
        return tantivy.Query.term_query(self.schema, field, value)

    def state(self, project: str | None = None) -> dict[str, tuple[str, str]]:
        """doc_id → (content_hash, meta_hash) of the indexed documents (of one project)."""
        searcher = self.index.searcher()
        if searcher.num_docs == 0:
            return {}
        query = self._term("project", project) if project else tantivy.Query.all_query()
        hits = searcher.search(query, limit=max(searcher.num_docs, 1), count=False).hits
        out = {}
        for _score, address in hits:
            stored = searcher.doc(address)
            out[stored["doc_id"][0]] = (stored["content_hash"][0], stored["meta_hash"][0])
        return out

    def count(self, project: str | None = None) -> int:
        searcher = self.index.searcher()
        if project is None:
            return searcher.num_docs
        return searcher.search(self._term("project", project), limit=1, count=True).count

    def filter_queries(self, filters: Filters) -> list[tantivy.Query]:
        must = []
        if filters.types:
            must.append(tantivy.Query.term_set_query(self.schema, "source_type", list(filters.types)))
        for field, value in (("project", filters.project), ("author", filters.author), ("state", filters.state)):
            if value:
                must.append(self._term(field, value))
        for label in filters.labels:
            must.append(self._term("labels", label))
        if filters.after or filters.before:
            must.append(tantivy.Query.range_query(
                self.schema, "created_at", tantivy.FieldType.Date, _aware(filters.after_dt), _aware(filters.before_dt),
                include_lower=True, include_upper=filters.before is None))
        if filters.exclude_confidential:
            must.append(self._term("confidential", False))
        if filters.exclude_internal:
            must.append(self._term("internal", False))
        return must

    def text_query(self, text: str) -> tantivy.Query | None:
        """The scoring part of a query, or None when the text has nothing to search for."""
        should: list[tantivy.Query] = []

        def add(field: str, value: str, boost: float) -> None:
            query = self._term(field, value)
            should.append(tantivy.Query.boost_query(query, boost) if boost != 1.0 else query)

        for term in query_words(self.words, text):
            add("title", term, BOOST["title"])
            add("body", term, BOOST["body"])
        for term in dict.fromkeys(identifier_terms(text)):
            whole = any(ch in term for ch in "_./:-") or term in text.lower().split()
            add("idents", term, BOOST["ident_whole"] if whole else BOOST["ident_part"])
        for project, kind, iid in references(text):
            sigil = SIGIL[kind]
            add("refs", f"{project}{sigil}{iid}" if project else f"{sigil}{iid}", BOOST["ref"])
            add("mentions", f"{project}{sigil}{iid}" if project else f"{sigil}{iid}", BOOST["mention"])
        if not should:
            return None
        return tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in should])

    def search(self, text: str, filters: Filters, limit: int) -> list[LexicalHit]:
        scoring = self.text_query(text)
        if scoring is None:
            return []
        clauses = [(tantivy.Occur.Must, scoring)] + [(tantivy.Occur.Must, q) for q in self.filter_queries(filters)]
        searcher = self.index.searcher()
        result = searcher.search(tantivy.Query.boolean_query(clauses), limit=limit, count=False)
        hits = []
        for score, address in result.hits:
            fields = stored_fields(searcher.doc(address))
            hits.append(LexicalHit(fields["doc_id"], float(score), fields))
        return hits

    def bodies(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """The full stored text of these documents (for snippets)."""
        searcher = self.index.searcher()
        out = {}
        for doc_id in doc_ids:
            found = searcher.search(self._term("doc_id", doc_id), limit=1, count=False).hits
            if found:
                out[doc_id] = searcher.doc(found[0][1])["body"][0]
        return out


def stored_fields(stored: tantivy.Document) -> dict[str, Any]:
    data = stored.to_dict()

    def one(name: str) -> Any:
        values = data.get(name) or []
        return values[0] if values else None

    return {
        "doc_id": one("doc_id"), "source_type": one("source_type"), "project": one("project"),
        "parent_type": one("parent_type"), "iid": one("iid"), "title": one("parent_title") or None,
        "url": one("url") or None,
        "author": one("author") or None, "labels": list(data.get("labels") or []), "state": one("state") or None,
        "created_at": _naive(one("created_at")), "updated_at": _naive(one("updated_at")),
        "confidential": bool(one("confidential")), "internal": bool(one("internal")),
    }

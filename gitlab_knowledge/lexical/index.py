"""The Tantivy index: schema, writes (one writer at a time), per-project state, read primitives.

What a search asks of it (BM25 scoring, filters as clauses) is search/lexical_retriever.py; this
module reads only by exact terms and hands out stored fields.

The index records the format it was written in (FORMAT_FILE: FORMAT_VERSION and a fingerprint of
the schema's fields). The writer wipes an index of another format and the lexical layer, finding
it empty, indexes every document again; a reader refuses it until then. The fingerprint notices a
field added or changed; bump FORMAT_VERSION for what it cannot see: what `document()` puts into a
field, or how the analyzers make terms.
"""

import contextlib
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, overload

import tantivy

from gitlab_knowledge import kinds
from gitlab_knowledge.documents.columns import COLUMNS, ColumnType, DocFields
from gitlab_knowledge.errors import StoreBusyError, StoreError
from gitlab_knowledge.lexical.analysis import (
    IDENT_ANALYZER,
    WORD_ANALYZER,
    ident_analyzer,
    identifier_terms,
    references,
    title_key,
    word_analyzer,
)

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
FORMAT_FILE = "gitlab_knowledge_format.json"
# The index's own fields (the metadata columns follow, from documents/columns.py's COLUMNS).
OWN_FIELDS = (("doc_id", "raw"), ("refs", "raw"), ("mentions", "raw"), ("content_hash", "raw"), ("meta_hash", "raw"),
              ("title", "words"), ("body", "words"), ("idents", "idents"), ("title_key", "key"))
_ADD_FIELD: dict[str, Callable[[tantivy.SchemaBuilder, str], Any]] = {
    "raw": lambda sb, name: sb.add_text_field(name, stored=True, tokenizer_name="raw"),
    "words": lambda sb, name: sb.add_text_field(name, stored=True, tokenizer_name=WORD_ANALYZER),
    "idents": lambda sb, name: sb.add_text_field(name, stored=False, tokenizer_name=IDENT_ANALYZER),
    "key": lambda sb, name: sb.add_text_field(name, stored=False, tokenizer_name="raw", index_option="basic"),
    ColumnType.TEXT: lambda sb, name: sb.add_text_field(name, stored=True, tokenizer_name="raw"),
    ColumnType.TEXT_LIST: lambda sb, name: sb.add_text_field(name, stored=True, tokenizer_name="raw"),
    ColumnType.INT: lambda sb, name: sb.add_integer_field(name, stored=True, indexed=True, fast=True),
    ColumnType.TIMESTAMP: lambda sb, name: sb.add_date_field(name, stored=True, indexed=True, fast=True),
    ColumnType.BOOL: lambda sb, name: sb.add_boolean_field(name, stored=True, indexed=True, fast=True),
}


def schema_fields() -> list[tuple[str, str]]:
    """(field, how it is indexed) of every field of the index."""
    return [*OWN_FIELDS, *((c.field, str(c.type)) for c in COLUMNS)]


def build_schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    for name, how in schema_fields():
        _ADD_FIELD[how](sb, name)
    return sb.build()


def index_format() -> dict[str, Any]:
    """What FORMAT_FILE says of an index this code writes."""
    fields = json.dumps(schema_fields(), separators=(",", ":"))
    return {"format": FORMAT_VERSION, "fields": hashlib.sha256(fields.encode()).hexdigest()[:16]}


def read_format(directory: Path) -> dict[str, Any] | None:
    """The format recorded beside the index at `directory`, or None (no marker, or an unreadable one)."""
    try:
        found = json.loads((directory / FORMAT_FILE).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _write_format(directory: Path) -> None:
    # Write-then-rename: a reader never sees half a marker and takes it for another format.
    tmp = directory / (FORMAT_FILE + ".tmp")
    tmp.write_text(json.dumps(index_format()))
    os.replace(tmp, directory / FORMAT_FILE)


@overload
def as_utc(value: datetime) -> datetime: ...


@overload
def as_utc(value: None) -> None: ...


def as_utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _naive(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    return None


def _cannot_write(exc: BaseException) -> bool:
    text = str(exc)
    return "Lockfile" in text or "Read-only file system" in text or "Permission denied" in text


def _open_read_only(schema: tantivy.Schema, directory: Path) -> tantivy.Index:
    """Open an index in a directory this process cannot write (a read-only mount, another user's
    store). Tantivy's reader takes a lock file beside the index, so it is opened through a private
    directory of symlinks to the index files, where that lock file can live; the files themselves
    are only read. The symlink directory goes when the process ends."""
    import atexit
    import tempfile

    shadow = Path(tempfile.mkdtemp(prefix="gk-tantivy-ro-"))
    atexit.register(shutil.rmtree, shadow, True)
    try:
        for entry in directory.iterdir():
            if not entry.name.startswith(".tantivy-"):
                (shadow / entry.name).symlink_to(entry)
        return tantivy.Index(schema, path=str(shadow), reuse=True)
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot open the lexical index {directory} read-only: {exc}") from None


def own_refs(row: dict[str, Any]) -> list[str]:
    if kinds.keyed(row["parent_type"]) is not None:
        return []  # no sigil, no iid: a wiki page is found by its words, not a reference
    kind = kinds.kind(row["parent_type"])
    return [kind.ref(row["parent_iid"]), kind.ref(row["parent_iid"], row["project_path"])]


def mentioned_refs(text: str, project: str) -> list[str]:
    out = []
    for ref_project, kind, iid in references(text):
        out.append(kinds.kind(kind).ref(iid, ref_project or project))
        if ref_project is None or ref_project == project:
            out.append(kinds.kind(kind).ref(iid))
    return sorted(set(out))


class LexicalIndex:
    def __init__(self, directory: Path, *, create: bool = False) -> None:
        """`create`: the writer's side, which creates the index and rebuilds one of another format."""
        self.dir = directory
        self.schema = build_schema()
        exists = (directory / "meta.json").exists()
        current = read_format(directory) == index_format()
        if not create and not exists:
            raise StoreError(f"no lexical index at {directory} yet: run `python -m gitlab_knowledge sync`")
        if not create and not current:
            raise StoreError(f"the lexical index at {directory} was written in another format: "
                             "the next `python -m gitlab_knowledge sync` rebuilds it")
        if exists and not current:
            # Emptied here, refilled by the lexical layer: its diff finds every document missing.
            log.warning("the lexical index at %s was written in another format: rebuilding it", directory)
            shutil.rmtree(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self.index = tantivy.Index(self.schema, path=str(directory), reuse=True)
            if create and not current:
                _write_format(directory)
        except (OSError, ValueError) as exc:
            if create or not _cannot_write(exc):
                raise StoreError(f"cannot open the lexical index {directory}: {exc}") from None
            self.index = _open_read_only(self.schema, directory)
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
        for column in COLUMNS:
            _ADD_VALUE[column.type](doc, column.field, row[column.source])
        for ref in own_refs(row):
            doc.add_text("refs", ref)
        for ref in mentioned_refs(row["content_text"], row["project_path"]):
            doc.add_text("mentions", ref)
        doc.add_text("content_hash", row["content_hash"])
        doc.add_text("meta_hash", row["meta_hash"])
        # A thread's header repeats its parent's title; only issues and MRs score on `title`.
        doc.add_text("title", row["title"] or "" if row["source_type"] != "discussion" else "")
        doc.add_text("body", row["content_text"])
        doc.add_text("idents", " ".join(identifier_terms(row["content_text"])))
        # An issue's or MR's title as one term: a query that is exactly a title finds its item
        # (search/pinned.py), whatever the BM25 of other documents repeating those words.
        key = title_key(row["title"]) if row["source_type"] != "discussion" else None
        if key:
            doc.add_text("title_key", key)
        return doc

    # -- reads ------------------------------------------------------------------------------

    def term(self, field: str, value: Any) -> tantivy.Query:
        """Documents whose `field` holds exactly `value` (a term of the field's analyzer)."""
        return tantivy.Query.term_query(self.schema, field, value)

    def searcher(self) -> tantivy.Searcher:
        """A reader at the index's last commit: several queries on one see the same documents."""
        return self.index.searcher()

    def find(self, query: tantivy.Query, limit: int,
             searcher: tantivy.Searcher | None = None) -> list[tuple[float, DocFields]]:
        """(score, stored fields) of the best `limit` documents matching `query`."""
        if searcher is None:
            searcher = self.index.searcher()
        hits = searcher.search(query, limit=limit, count=False).hits
        return [(float(score), stored_fields(searcher.doc(address))) for score, address in hits]

    def state(self, project: str | None = None) -> dict[str, tuple[str, str]]:
        """doc_id → (content_hash, meta_hash) of the indexed documents (of one project)."""
        return self._state(self.index.searcher(), project)

    def states(self, projects: Sequence[str]) -> dict[str, dict[str, tuple[str, str]]]:
        """`state` of each of `projects`, on one reader (a check of a batch of many projects
        opened one per project)."""
        searcher = self.index.searcher()
        return {project: self._state(searcher, project) for project in projects}

    def _state(self, searcher: tantivy.Searcher, project: str | None) -> dict[str, tuple[str, str]]:
        if searcher.num_docs == 0:
            return {}
        query = self.term("project", project) if project else tantivy.Query.all_query()
        hits = searcher.search(query, limit=max(searcher.num_docs, 1), count=False).hits
        out = {}
        for _score, address in hits:
            stored = searcher.doc(address)
            out[stored["doc_id"][0]] = (stored["content_hash"][0], stored["meta_hash"][0])
        return out

    def count(self, project: str | None = None) -> int:
        searcher = self.index.searcher()
        if project is None:
            return int(searcher.num_docs)
        # tantivy's stub omits SearchResult.count (the extension has it)
        return int(searcher.search(self.term("project", project), limit=1, count=True).count)  # type: ignore[attr-defined]

    def bodies(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """The full stored text of these documents (for snippets)."""
        searcher = self.index.searcher()
        out = {}
        for doc_id in doc_ids:
            found = searcher.search(self.term("doc_id", doc_id), limit=1, count=False).hits
            if found:
                out[doc_id] = searcher.doc(found[0][1])["body"][0]
        return out


def stored_fields(stored: tantivy.Document) -> DocFields:
    data = stored.to_dict()
    return DocFields(doc_id=_first(data, "doc_id"), **{c.name: _READ_VALUE[c.type](data, c.field) for c in COLUMNS})


def _add_text(doc: tantivy.Document, field: str, value: Any) -> None:
    doc.add_text(field, value or "")


def _add_texts(doc: tantivy.Document, field: str, values: Any) -> None:
    for value in values or []:
        doc.add_text(field, value)


def _add_date(doc: tantivy.Document, field: str, value: Any) -> None:
    if value is not None:
        doc.add_date(field, as_utc(value))


_ADD_VALUE: dict[ColumnType, Callable[[tantivy.Document, str, Any], None]] = {
    ColumnType.TEXT: _add_text,
    ColumnType.TEXT_LIST: _add_texts,
    ColumnType.INT: lambda doc, field, value: doc.add_integer(field, int(value)),
    ColumnType.TIMESTAMP: _add_date,
    ColumnType.BOOL: lambda doc, field, value: doc.add_boolean(field, bool(value)),
}


def _first(data: dict[str, list[Any]], field: str) -> Any:
    values = data.get(field) or []
    return values[0] if values else None


# An empty text was stored for a missing one (Tantivy has no null).
_READ_VALUE: dict[ColumnType, Callable[[dict[str, list[Any]], str], Any]] = {
    ColumnType.TEXT: lambda data, field: _first(data, field) or None,
    ColumnType.TEXT_LIST: lambda data, field: list(data.get(field) or []),
    ColumnType.INT: _first,
    ColumnType.TIMESTAMP: lambda data, field: _naive(_first(data, field)),
    ColumnType.BOOL: lambda data, field: bool(_first(data, field)),
}

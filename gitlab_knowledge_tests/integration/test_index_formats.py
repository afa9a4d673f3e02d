"""The lexical index and the vector table record their format: the writer rebuilds an index of
another format (the layer then re-indexes everything), a reader treats it as unusable."""

import hashlib
import json
import logging

import numpy as np
import pytest

from gitlab_knowledge.config import Config
from gitlab_knowledge.documents.columns import COLUMNS, Column, ColumnType
from gitlab_knowledge.embeddings import refresh as embeddings
from gitlab_knowledge.embeddings import vectors
from gitlab_knowledge.embeddings.embedded import EmbeddedProvider
from gitlab_knowledge.embeddings.provider import Chunk
from gitlab_knowledge.errors import StoreError
from gitlab_knowledge.lexical import index as lexical_index
from gitlab_knowledge.lexical import refresh as lexical
from gitlab_knowledge.search.engine import Searcher
from gitlab_knowledge.store.db import read_connection
from gitlab_knowledge.workspace import Workspace


class TinyProvider:
    """Deterministic vectors (seeded by the text) under the embedded model's name and size, so it
    writes and searches the table the synced store already has."""

    provider = EmbeddedProvider.provider
    model = EmbeddedProvider.MODEL
    dims = 384

    def _vector(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        vector = np.random.default_rng(seed).standard_normal(self.dims).astype(np.float32)
        return vector / np.linalg.norm(vector)

    def embed_documents(self, texts: list[str]) -> list[list[Chunk]]:
        return [[Chunk(self._vector(t), t[:200])] for t in texts]

    def embed_query(self, text: str) -> np.ndarray:
        return self._vector(text)

    def check(self) -> str:
        return "tiny"


def _documents(config: Config, project: str | None = None) -> dict[str, tuple[str, str]]:
    sql = "SELECT id, content_hash, meta_hash FROM documents" + (" WHERE project_path = ?" if project else "")
    with read_connection(config.duckdb_path) as con:
        return {r[0]: (r[1], r[2]) for r in con.execute(sql, [project] if project else []).fetchall()}


def _searcher(config: Config) -> Searcher:
    # The configured model embeds the queries: a TinyProvider set on the searcher here never took,
    # as choosing the table replaced it with the configured model before the first embedding.
    return Workspace(config).searcher()


# -- the lexical index ----------------------------------------------------------------------


def test_lexical_index_of_another_format_is_refused_then_rebuilt(synced, monkeypatch, caplog):
    directory = synced.tantivy_dir
    assert lexical_index.LexicalIndex(directory).count() == len(_documents(synced))
    assert json.loads((directory / lexical_index.FORMAT_FILE).read_text()) == lexical_index.index_format()

    monkeypatch.setattr(lexical_index, "FORMAT_VERSION", lexical_index.FORMAT_VERSION + 1)
    with pytest.raises(StoreError) as err:
        lexical_index.LexicalIndex(directory)
    assert "another format" in str(err.value) and "sync" in str(err.value) and "\n" not in str(err.value)

    # Search degrades as with any unusable lexical index: semantic only, or a one-line error.
    response = _searcher(synced).search("authentication", mode="hybrid")
    assert response.effective_mode == "semantic" and response.results
    assert any("lexical index unavailable" in w and "another format" in w for w in response.warnings)
    with pytest.raises(StoreError):
        _searcher(synced).search("authentication", mode="lexical")

    with caplog.at_level(logging.WARNING, logger=lexical_index.__name__):
        assert lexical_index.LexicalIndex(directory, create=True).count() == 0
    assert "another format" in caplog.text
    assert lexical_index.read_format(directory) == lexical_index.index_format()

    workspace = Workspace(synced)
    for project in synced.projects:
        stats = lexical.refresh(workspace, project)
        assert stats.indexed == stats.documents == len(_documents(synced, project))
    index = lexical_index.LexicalIndex(directory)
    assert index.state() == _documents(synced)
    assert _searcher(synced).search("authentication", mode="lexical").results


def test_lexical_index_without_a_marker_is_rebuilt_by_the_writer(synced):
    directory = synced.tantivy_dir
    (directory / lexical_index.FORMAT_FILE).unlink()
    with pytest.raises(StoreError, match="another format"):
        lexical_index.LexicalIndex(directory)
    assert lexical_index.LexicalIndex(directory, create=True).count() == 0
    assert lexical_index.LexicalIndex(directory).count() == 0  # the marker is back: readable, and empty


def test_a_field_added_to_the_lexical_schema_is_another_format(synced, monkeypatch):
    before = lexical_index.index_format()
    monkeypatch.setattr(lexical_index, "COLUMNS", (*COLUMNS, Column("extra", "state", ColumnType.TEXT)))
    assert lexical_index.index_format()["fields"] != before["fields"]
    with pytest.raises(StoreError, match="another format"):
        lexical_index.LexicalIndex(synced.tantivy_dir)


# -- the vector table -----------------------------------------------------------------------


def _store(config: Config) -> vectors.VectorStore:
    return vectors.VectorStore(config.lancedb_dir, TinyProvider.provider, TinyProvider.model)


def test_vector_table_of_another_format_is_absent_then_rebuilt(synced, monkeypatch, caplog):
    store = _store(synced)
    assert store.exists() and store.document_state() == _documents(synced)
    assert store.table().schema.metadata[vectors.FORMAT_KEY] == str(vectors.FORMAT_VERSION).encode()

    monkeypatch.setattr(vectors, "FORMAT_VERSION", vectors.FORMAT_VERSION + 1)
    assert not store.exists() and store.table() is None
    assert store.document_state() == {} and store.count() == (0, 0)

    # Search degrades as when there are no embeddings for the model: keywords only.
    response = _searcher(synced).search("authentication", mode="hybrid")
    assert response.effective_mode == "lexical" and response.results
    assert any(w.startswith("no embeddings yet for model") for w in response.warnings)
    warm = Workspace(synced).searcher(warm=True)
    assert warm.search("authentication", mode="semantic").effective_mode == "lexical"

    workspace = Workspace(synced)
    first, *rest = synced.projects
    with caplog.at_level(logging.WARNING, logger=vectors.__name__):
        stats = embeddings.refresh(workspace, first, provider=TinyProvider())
    assert "another format" in caplog.text
    assert stats.embedded == stats.documents == len(_documents(synced, first))
    assert store.document_state() == _documents(synced, first)  # the other projects' rows went with the table
    for project in rest:
        assert embeddings.refresh(workspace, project, provider=TinyProvider()).embedded == len(
            _documents(synced, project))
    assert store.document_state() == _documents(synced)
    assert store.table().schema.metadata[vectors.FORMAT_KEY] == str(vectors.FORMAT_VERSION).encode()

    response = _searcher(synced).search("authentication", mode="hybrid")
    assert response.effective_mode == "hybrid" and not response.warnings
    # Unchanged documents stay put on the next run.
    assert embeddings.refresh(workspace, first, provider=TinyProvider()).embedded == 0


def test_a_column_added_to_the_vector_table_is_another_format(synced, monkeypatch):
    store = _store(synced)
    assert vectors.is_current(store.table().schema)
    monkeypatch.setattr(vectors, "COLUMNS", (*COLUMNS, Column("extra", "state", ColumnType.TEXT)))
    assert not store.exists()


def test_a_table_written_before_formats_were_recorded_is_kept_not_re_embedded(synced):
    # A store of the release before this one: the same columns, no format key. Its layout is
    # format 1's, so it is adopted as it is (re-embedding a whole table costs hours).
    store = _store(synced)
    rows = store.table().to_arrow()
    store._db.drop_table(store.name)
    store._db.create_table(store.name, data=rows.replace_schema_metadata(None))
    assert vectors.FORMAT_KEY not in (store._open().schema.metadata or {})
    assert store.exists() and store.document_state() == _documents(synced)
    for project in synced.projects:
        assert embeddings.refresh(Workspace(synced), project, provider=TinyProvider()).embedded == 0

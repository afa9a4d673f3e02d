"""Versioned documents: a builder (or chunking) version bump rebuilds the documents, their vectors
and lexical entries on the next sync, and `index status` calls them stale until then; migration 4
marks the documents of an older store with the version that wrote them, so upgrading rebuilds
nothing."""

from pathlib import Path
from typing import Any

import pytest

from gitlab_knowledge.documents import build
from gitlab_knowledge.documents.refresh import DocumentStats
from gitlab_knowledge.embeddings.refresh import EmbedStats
from gitlab_knowledge.index_status import index_status
from gitlab_knowledge.lexical.refresh import LexicalStats
from gitlab_knowledge.store.db import write_connection
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.helpers import INDEX_LAYERS, rows, run_layers, scalar
from gitlab_knowledge_tests.integration.test_migrations import import_fixture, query


def _status(config: Any, project: str) -> dict[str, Any]:
    return next(p for p in index_status(Workspace(config))["projects"] if p["project"] == project)


def test_a_builder_version_bump_rebuilds_documents_vectors_and_lexical_entries(synced, monkeypatch):
    config = synced
    project = config.projects[0]
    documents = scalar(config, "SELECT count(*) FROM documents WHERE project_path = ?", [project])
    before = _status(config, project)
    assert before["vectors"]["indexed"] == before["lexical"]["indexed"] == documents > 0

    monkeypatch.setattr(build, "BUILDER_VERSION", build.BUILDER_VERSION + 1)
    stale = _status(config, project)
    assert stale["vectors"]["stale"] == stale["lexical"]["stale"] == documents
    assert stale["vectors"]["indexed"] == stale["lexical"]["indexed"] == 0
    # explain agrees with index status (one notion of fresh).
    from gitlab_knowledge.explain import explain

    doc_id = rows(config, "SELECT id FROM documents WHERE project_path = ? LIMIT 1", [project])[0][0]
    stale_doc = explain(Workspace(config), doc_id)
    assert stale_doc.verdict == "stale" and any("builder version" in r for r in stale_doc.reasons)

    outcome = run_layers(config, [project], INDEX_LAYERS)[0]
    docs, vectors, lexical = outcome.stats(DocumentStats), outcome.stats(EmbedStats), outcome.stats(LexicalStats)
    assert docs.content_changed == documents and docs.new == docs.deleted == 0
    assert vectors.embedded == documents and lexical.indexed == documents
    after = _status(config, project)
    assert after["vectors"]["indexed"] == after["lexical"]["indexed"] == documents
    assert after["vectors"]["stale"] == after["lexical"]["stale"] == 0
    assert scalar(config, "SELECT count(*) FROM documents WHERE project_path = ? AND builder_version = ?",
                  [project, build.document_version()]) == documents
    # Once rebuilt, the next run has nothing to do.
    again = run_layers(config, [project], INDEX_LAYERS)[0]
    assert again.stats(DocumentStats).content_changed == 0 and again.stats(EmbedStats).embedded == 0
    assert explain(Workspace(config), doc_id).verdict == "fresh"


def test_migration_4_marks_stored_documents_with_the_version_that_wrote_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = import_fixture(tmp_path / "data" / "gitlab_knowledge.duckdb")
    documents = query(store, "SELECT count(*) FROM documents")[0][0]
    assert documents > 0
    with write_connection(store):
        pass
    assert query(store, "SELECT builder_version, count(*) FROM documents GROUP BY 1") == [
        (build.BASELINE_VERSION, documents)]
    # The baseline version hashes the bare text, as the store's documents were hashed: the
    # documents layer found nothing to rebuild after the upgrade (until a later builder version).
    builder, chunking = build.BASELINE_VERSION.split(".")
    monkeypatch.setattr(build, "BUILDER_VERSION", int(builder))
    monkeypatch.setattr(build, "CHUNKING_VERSION", int(chunking))
    assert build.document_version() == build.BASELINE_VERSION
    sample = query(store, "SELECT content_text, content_hash FROM documents LIMIT 20")
    assert all(build.content_hash(text) == digest for text, digest in sample)


@pytest.mark.parametrize("version,expected", [("1.1", "indexed"), ("0.9", "stale"), (None, "stale")])
def test_index_status_compares_through_the_builder_version(version, expected):
    from gitlab_knowledge.freshness import compare, document_hashes

    documents = {"d": document_hashes("h", "m", version, "1.1")}
    counts = compare(documents, {"d": ("h", "m")}).counts()
    assert counts[expected] == 1

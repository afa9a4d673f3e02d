"""Documents, embeddings and the lexical index kept in step with every sync (real DuckDB, LanceDB,
Tantivy and the real embedded model)."""

import pytest

from gitlab_knowledge.embeddings import refresh as embeddings
from gitlab_knowledge.embeddings.embedded import EmbeddedProvider
from gitlab_knowledge.embeddings.ollama_provider import OllamaProvider
from gitlab_knowledge.embeddings.vectors import VectorStore
from gitlab_knowledge.errors import EmbeddingUnavailable
from gitlab_knowledge.lexical.index import LexicalIndex
from gitlab_knowledge_sandbox import SandboxGitLab
from gitlab_knowledge_tests.helpers import index_all, rows, run_layers, scalar, sync, sync_all, workspace
from gitlab_knowledge_tests.support.fake_ollama import FakeOllama


@pytest.fixture(scope="module")
def provider() -> EmbeddedProvider:
    return EmbeddedProvider()


def vectors(config, model: str = EmbeddedProvider.MODEL, provider: str = "embedded") -> VectorStore:
    return VectorStore(config.lancedb_dir, provider, model)


def assert_layers_agree(config) -> int:
    documents = scalar(config, "SELECT count(*) FROM documents")
    expected = scalar(config, "SELECT (SELECT count(*) FROM issues) + (SELECT count(*) FROM merge_requests) "
                              "+ (SELECT count(*) FROM discussions)")
    assert documents == expected
    assert vectors(config).count()[0] == documents
    assert LexicalIndex(config.tantivy_dir).count() == documents
    stored = {r[0]: r[1] for r in rows(config, "SELECT id, content_hash FROM documents")}
    assert {k: v[0] for k, v in vectors(config).document_state().items()} == stored
    assert {k: v[0] for k, v in LexicalIndex(config.tantivy_dir).state().items()} == stored
    return documents


def test_one_sync_leaves_documents_vectors_and_lexical_index_consistent(tiny_sandbox, make_config, provider):
    # The tiny dataset: a first index embeds every document whatever their number, and the small
    # dataset's first embedding is what the session's small_store already pays once.
    config = make_config(tiny_sandbox)
    sync_all(config)
    first = index_all(config, provider)
    documents = assert_layers_agree(config)
    assert sum(r["embeddings"].embedded for r in first.values()) == documents
    again = index_all(config, provider)  # nothing changed: nothing is embedded or indexed again
    assert sum(r["embeddings"].embedded for r in again.values()) == 0
    assert sum(r["lexical"].indexed for r in again.values()) == 0
    assert sum(r["documents"].new + r["documents"].content_changed for r in again.values()) == 0


def test_editing_one_note_re_embeds_exactly_that_threads_document(sandbox, synced, provider):
    config = synced
    project = config.projects[0]
    issue = next(i for i in sandbox.state.list_items(project, "issues") if i["user_notes_count"] > 1)
    thread = next(t for t in sandbox.state.discussions(project, "issues", issue["iid"]) if not t["notes"][0]["system"])
    note = next(n for n in thread["notes"] if not n["system"])
    sandbox.clock.advance(3600)
    sandbox.state.edit_note(project, "issues", issue["iid"], note["id"], "Edited: we settled on Redis streams")
    sync(config, project)
    result = index_all(config, provider)[project]
    assert result["embeddings"].embedded == 1
    assert result["lexical"].indexed >= 1  # the issue's own metadata (updated_at) moved too
    changed = rows(config, "SELECT id FROM documents WHERE content_text LIKE '%we settled on Redis streams%'")
    assert changed == [(f"discussion:{thread['id']}",)]
    assert_layers_agree(config)


def test_deleting_an_issue_removes_its_documents_from_every_store(sandbox, synced, provider):
    config = synced
    project = config.projects[0]
    victim = next(i for i in sandbox.state.list_items(project, "issues") if i["user_notes_count"] > 0)
    doc_ids = {r[0] for r in rows(config, "SELECT id FROM documents WHERE parent_type = 'issue' AND parent_id = ?",
                                  [victim["id"]])}
    assert len(doc_ids) >= 2  # the issue and at least one thread
    sandbox.state.delete(project, "issues", victim["iid"])
    sync(config, project, full=True)
    result = index_all(config, provider)[project]
    assert result["documents"].deleted == len(doc_ids)
    assert result["embeddings"].deleted == len(doc_ids) and result["lexical"].deleted == len(doc_ids)
    assert not doc_ids & {r[0] for r in rows(config, "SELECT id FROM documents")}
    assert not doc_ids & set(vectors(config).document_state())
    assert not doc_ids & set(LexicalIndex(config.tantivy_dir).state())
    assert_layers_agree(config)


class FlakyProvider:
    """The real embedded model, except that any batch holding a poisoned document fails."""

    def __init__(self, inner: EmbeddedProvider, poison: str) -> None:
        self.inner, self.poison = inner, poison
        self.provider, self.model = inner.provider, inner.model
        self.calls = 0

    @property
    def dims(self) -> int:
        return self.inner.dims

    def embed_documents(self, texts):
        self.calls += 1
        if self.poison in texts:
            raise EmbeddingUnavailable("simulated: the provider choked on this batch")
        return self.inner.embed_documents(texts)


def test_a_failing_batch_is_retried_once_then_recorded_and_the_rest_embedded(tiny_sandbox, make_config, provider):
    # The tiny dataset: the real model embeds every document but one batch, and how many proves nothing.
    config = make_config(tiny_sandbox)
    project = config.projects[0]
    sync_all(config)
    run_layers(config, [project], ["search_documents"])
    total = scalar(config, "SELECT count(*) FROM documents WHERE project_path = ?", [project])
    poisoned_doc = rows(config, "SELECT id, content_text FROM documents WHERE project_path = ? ORDER BY id LIMIT 1 "
                                "OFFSET 5", [project])[0]
    flaky = FlakyProvider(provider, poisoned_doc[1])
    stats = embeddings.refresh(workspace(config), project, provider=flaky, batch_size=4, sleep=lambda s: None)
    assert stats.failed == 4 and stats.retried_batches == 1  # one batch of four, tried twice
    assert stats.embedded == total - 4
    failures = vectors(config).failures(project)
    assert poisoned_doc[0] in failures and len(failures) == 4
    assert "choked" in failures[poisoned_doc[0]]["error"]
    assert vectors(config).count(project)[0] == total - 4
    # The provider recovers: the next run embeds exactly the four, and the failures are cleared.
    stats = embeddings.refresh(workspace(config), project, provider=provider, batch_size=4)
    assert stats.embedded == 4 and stats.failed == 0
    assert vectors(config).failures(project) == {}
    assert vectors(config).count(project)[0] == total


def test_provider_down_records_everything_quickly_and_keeps_the_documents(sandbox, make_config):
    config = make_config(sandbox)
    project = config.projects[0]
    sync_all(config)
    from gitlab_knowledge.lexical import refresh as lexical

    run_layers(config, [project], ["search_documents"])
    down = OllamaProvider(host="http://127.0.0.1:9", timeout=2)  # the discard port: nothing listens
    stats = embeddings.refresh(workspace(config), project, provider=down, batch_size=8, sleep=lambda s: None)
    documents = scalar(config, "SELECT count(*) FROM documents WHERE project_path = ?", [project])
    assert stats.failed == documents and stats.embedded == 0
    assert "not reachable" in stats.errors[0]
    assert stats.retried_batches <= 3  # the circuit opened after three batches failed in a row
    assert lexical.refresh(workspace(config), project).indexed == documents  # keyword search still gets everything


def test_a_second_models_table_is_built_beside_the_first(sandbox, synced, provider):
    config = synced
    project = config.projects[0]
    with FakeOllama() as fake:
        ollama = OllamaProvider(host=fake.url)
        stats = embeddings.refresh(workspace(config), project, provider=ollama)
        assert stats.embedded == scalar(config, "SELECT count(*) FROM documents WHERE project_path = ?", [project])
        second = vectors(config, "nomic-embed-text", "ollama")
        assert second.name != vectors(config).name
        assert second.count(project)[0] == vectors(config).count(project)[0]
        from gitlab_knowledge.workspace import Workspace

        fakes = Workspace(config, embedder_factory=lambda _c, name, _m: ollama if name == "ollama" else provider)
        for searcher in (fakes.searcher(), fakes.searcher(provider="ollama", model="nomic-embed-text")):
            response = searcher.search("redis cache", mode="semantic", limit=5)
            assert response.results and response.effective_mode == "semantic"
        assert response.model == "ollama/nomic-embed-text"


def test_documents_record_their_provenance(sandbox, synced, provider):
    config = synced
    missing = scalar(config, """
        SELECT count(*) FROM documents d
        WHERE len(d.raw_payload_ids) = 0 OR d.sync_run_id IS NULL
           OR EXISTS (SELECT 1 FROM unnest(d.raw_payload_ids) u(rid)
                      WHERE rid NOT IN (SELECT id FROM raw_payloads WHERE deleted_at IS NULL))""")
    assert missing == 0
    threads = scalar(config, "SELECT count(*) FROM documents WHERE source_type = 'discussion' "
                             "AND len(raw_payload_ids) <> 2")
    assert threads == 0


def test_sync_with_equal_labels_filters_in_document_labels(sandbox: SandboxGitLab, synced, provider):
    config = synced
    mismatched = scalar(config, """
        SELECT count(*) FROM documents d
        WHERE list_sort(coalesce(d.labels, []))
           <> list_sort(coalesce((SELECT list(label_name) FROM document_labels l WHERE l.document_id = d.id), []))""")
    assert mismatched == 0

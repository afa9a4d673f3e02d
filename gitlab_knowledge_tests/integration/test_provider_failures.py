"""An embedding provider that answers nonsense or not at all: stored vectors are never lost, the
`embed` command says so with exit 6, and a search waits seconds, not a minute, before it answers
by keyword."""

import io
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

from gitlab_knowledge.cli import main as cli_main
from gitlab_knowledge.defs.runner import run_embed
from gitlab_knowledge.embeddings import ollama_provider
from gitlab_knowledge.embeddings.embedded import EmbeddedProvider
from gitlab_knowledge.embeddings.ollama_provider import OllamaProvider
from gitlab_knowledge.embeddings.provider import Chunk
from gitlab_knowledge.embeddings.refresh import EmbedStats
from gitlab_knowledge.embeddings.vectors import VectorStore
from gitlab_knowledge.errors import EmbeddingUnavailable
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.helpers import scalar, shared_instance, workspace
from gitlab_knowledge_tests.support.fake_ollama import FakeOllama


class Nonsense:
    """The embedded model's table, filled by a provider that answers with the wrong vectors."""

    provider, model, dims = "embedded", EmbeddedProvider.MODEL, 384

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def embed_documents(self, texts: list[str]) -> list[list[Chunk]]:
        vector = {"wrong size": np.ones(512, np.float32) / 512 ** 0.5,
                  "NaN": np.full(384, np.nan, np.float32)}.get(self.kind)
        if self.kind == "wrong count":
            return [[Chunk(np.ones(384, np.float32) / 384 ** 0.5, t)] for t in texts[1:]]
        return [[Chunk(vector, t)] for t in texts]


@pytest.mark.parametrize("kind", ["wrong size", "NaN", "wrong count"])
def test_a_provider_answering_nonsense_costs_no_stored_vector(synced, kind):
    store = VectorStore(synced.lancedb_dir, "embedded", EmbeddedProvider.MODEL)
    before = store.count()
    assert before[0] > 0
    results = run_embed(workspace(synced, Nonsense(kind)), list(synced.projects), everything=True,
                        instance=shared_instance())
    assert all(o.success for o in results), [o.message for o in results]
    stats = [o.stats(EmbedStats) for o in results]
    assert sum(s.failed for s in stats) == sum(s.documents for s in stats) > 0
    assert all(s.embedded == 0 for s in stats)
    assert store.count() == before  # every old vector is still there
    title = scalar(synced, "SELECT title FROM documents WHERE source_type = 'issue' ORDER BY id LIMIT 1")
    response = Workspace(synced).searcher().search(title, mode="semantic")
    assert response.effective_mode == "semantic" and response.results


def test_embed_exits_6_when_documents_could_not_be_embedded(synced, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the run's Dagster instance lives under the data directory
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:9")  # nothing listens there
    path = tmp_path / "gitlab_knowledge.toml"
    path.write_text(f'projects = {list(synced.projects)!r}\n[gitlab]\nurl = "{synced.gitlab.url}"\n'
                    f'[storage]\ndata_dir = "{synced.data_dir}"\n'.replace("'", '"'))
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        code = cli_main(["--config", str(path), "embed", "--model", "ollama:nomic-embed-text"])
    assert code == EmbeddingUnavailable.exit_code == 6
    errors = [line for line in err.getvalue().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "could not be embedded" in errors[0] and "Ollama" in errors[0], err.getvalue()


def test_a_hung_ollama_delays_a_query_by_the_short_query_timeout(monkeypatch):
    monkeypatch.setattr(ollama_provider, "QUERY_TIMEOUT_S", 0.5)
    with FakeOllama() as fake:
        provider = OllamaProvider(fake.url, timeout=60)  # documents may take a minute; a query may not
        fake.hang(30)
        with pytest.raises(EmbeddingUnavailable) as info:
            provider.embed_query("why redis")
        assert "within 0.5s" in str(info.value), info.value  # the query's timeout, not the documents' minute
        fake.hang(0)


def test_a_query_vector_of_another_size_falls_back_to_keywords_with_a_warning(synced):
    class Resized(Nonsense):
        def embed_query(self, text: str) -> np.ndarray:
            return np.ones(512, np.float32) / 512 ** 0.5

    # This model's table, by name; the model behind the name now gives 512 dimensions.
    searcher = Workspace(synced, embedder_factory=lambda *_: Resized("wrong size")).searcher(
        provider="embedded", model=EmbeddedProvider.MODEL)
    title = scalar(synced, "SELECT title FROM documents WHERE source_type = 'issue' ORDER BY id LIMIT 1")
    response = searcher.search(title, mode="hybrid")
    assert response.effective_mode == "lexical" and response.results
    assert any("512-dimensional" in w for w in response.warnings), response.warnings


def test_a_hung_ollama_costs_one_timeout_not_one_per_batch(synced, monkeypatch):
    from gitlab_knowledge.embeddings import refresh as embeddings
    from gitlab_knowledge.workspace import Workspace

    monkeypatch.setattr(embeddings, "HUNG_S", 0.3)
    with FakeOllama() as fake:
        fake.hang(30)
        stats = embeddings.refresh(Workspace(synced), synced.projects[0], everything=True, batch_size=8,
                                   provider=OllamaProvider(fake.url, timeout=0.5), sleep=lambda _s: None)
        fake.hang(0)
    assert stats.failed == stats.to_embed > 8 and stats.embedded == 0
    assert len(fake.embed_bodies) == 1  # one timeout: the other batches are recorded without waiting

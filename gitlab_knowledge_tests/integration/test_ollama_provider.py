"""The Ollama provider against a fake Ollama speaking `/api/embed` over real sockets on 127.0.0.1."""

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import ollama
import pytest

from gitlab_knowledge.config import Config, parse_config
from gitlab_knowledge.embeddings.embedded import EmbeddedProvider
from gitlab_knowledge.embeddings.ollama_provider import EXCERPT_CHARS, OllamaProvider
from gitlab_knowledge.embeddings.providers import get_provider
from gitlab_knowledge.errors import EmbeddingUnavailable
from gitlab_knowledge_tests.support.fake_ollama import FakeOllama, fake_embedding

MODELS = {"nomic-embed-text": 768, "mxbai-embed-large": 1024, "custom-embed": 512}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx would route 127.0.0.1 through a proxy from the environment; ollama reads these too.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "OLLAMA_HOST", "OLLAMA_API_KEY", "GITLAB_KNOWLEDGE_EMBEDDING"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    with FakeOllama(models=MODELS) as server:
        yield server


@pytest.fixture
def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unit(vector: list[float]) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float32)
    return array / np.linalg.norm(array)


def inputs(fake: FakeOllama) -> list[list[str]]:
    return [body["input"] for body in fake.embed_bodies]


# -- vectors ------------------------------------------------------------------------------------------


def test_documents_are_unit_normalised_with_the_models_dims(fake: FakeOllama) -> None:
    texts = ["we chose Redis for the session cache", "the dark mode uses CSS variables"]
    chunks = OllamaProvider(fake.url).embed_documents(texts)
    assert [len(c) for c in chunks] == [1, 1]
    for text, (chunk,) in zip(texts, chunks, strict=True):
        assert chunk.vector.shape == (768,) and chunk.vector.dtype == np.float32
        assert np.linalg.norm(chunk.vector) == pytest.approx(1.0, abs=1e-5)
        raw = fake_embedding("search_document: " + text, 768)
        assert np.linalg.norm(raw) > 1.5  # the server's vectors are not unit length: the provider normalised
        np.testing.assert_allclose(chunk.vector, unit(raw), atol=1e-6)


def test_query_is_unit_normalised_and_ranks_like_the_model(fake: FakeOllama) -> None:
    provider = OllamaProvider(fake.url)
    query = provider.embed_query("redis session cache")
    assert query.shape == (768,) and np.linalg.norm(query) == pytest.approx(1.0, abs=1e-5)
    near, far = (c[0].vector for c in provider.embed_documents(
        ["we chose Redis for the session cache", "the dark mode uses CSS variables"]))
    assert float(query @ near) > float(query @ far)
    np.testing.assert_array_equal(provider.embed_query("redis session cache"), query)


def test_mxbai_has_1024_dims_and_no_prefix(fake: FakeOllama) -> None:
    provider = OllamaProvider(fake.url, model="mxbai-embed-large")
    assert provider.dims == 1024
    (chunk,), = provider.embed_documents(["a document"])
    query = provider.embed_query("a question")
    assert chunk.vector.shape == query.shape == (1024,)
    assert inputs(fake) == [["a document"], ["a question"]]
    assert [b["model"] for b in fake.embed_bodies] == ["mxbai-embed-large"] * 2


# -- what is sent --------------------------------------------------------------------------------------


def test_nomic_documents_and_queries_get_their_task_prefixes(fake: FakeOllama) -> None:
    provider = OllamaProvider(fake.url)
    provider.embed_documents(["first doc", "second doc"])
    provider.embed_query("what was decided")
    assert inputs(fake) == [["search_document: first doc", "search_document: second doc"],
                            ["search_query: what was decided"]]


def test_a_tagged_nomic_model_is_still_prefixed(fake: FakeOllama) -> None:
    provider = OllamaProvider(fake.url, model="nomic-embed-text:latest")
    assert provider.dims == 768
    provider.embed_query("q")
    assert fake.embed_bodies == [{"model": "nomic-embed-text:latest", "input": ["search_query: q"],
                                  "truncate": True, "options": {"num_ctx": 8192}}]


def test_requests_raise_num_ctx_and_ask_to_truncate(fake: FakeOllama) -> None:
    provider = OllamaProvider(fake.url)
    provider.embed_documents(["doc"])
    provider.embed_query("query")
    provider.check()
    assert len(fake.embed_bodies) == 3
    for body in fake.embed_bodies:
        assert body["model"] == "nomic-embed-text"
        assert body["options"] == {"num_ctx": 8192}
        assert body["truncate"] is True
        assert isinstance(body["input"], list)
        assert "keep_alive" not in body and "dimensions" not in body


def test_documents_are_sent_in_batches_of_batch_size(fake: FakeOllama) -> None:
    texts = [f"document number {i} about topic {i % 7}" for i in range(70)]
    chunks = OllamaProvider(fake.url).embed_documents(texts)
    assert [len(i) for i in inputs(fake)] == [32, 32, 6]
    assert [t for batch in inputs(fake) for t in batch] == ["search_document: " + t for t in texts]
    # Results come back in input order, one chunk per text.
    assert [len(c) for c in chunks] == [1] * 70
    for text, (chunk,) in zip(texts, chunks, strict=True):
        np.testing.assert_allclose(chunk.vector, unit(fake_embedding("search_document: " + text, 768)), atol=1e-6)
        assert chunk.text == text


def test_a_smaller_batch_size_is_respected(fake: FakeOllama) -> None:
    OllamaProvider(fake.url, batch_size=10).embed_documents([f"t{i}" for i in range(25)])
    assert [len(i) for i in inputs(fake)] == [10, 10, 5]


def test_no_texts_means_no_request(fake: FakeOllama) -> None:
    assert OllamaProvider(fake.url).embed_documents([]) == []
    assert fake.requests == []


def test_one_chunk_per_document_with_its_text_capped_at_1500_chars(fake: FakeOllama) -> None:
    long = " ".join(f"word{i}" for i in range(2000))  # ~15 KB, far more than one excerpt
    texts = [long, "short text", "x" * EXCERPT_CHARS]
    chunks = OllamaProvider(fake.url).embed_documents(texts)
    assert [len(c) for c in chunks] == [1, 1, 1]
    assert EXCERPT_CHARS == 1500
    assert chunks[0][0].text == long[:1500]
    assert chunks[1][0].text == "short text"
    assert chunks[2][0].text == "x" * 1500
    # The whole document goes to the server (Ollama truncates to num_ctx), not the excerpt.
    assert inputs(fake)[0][0] == "search_document: " + long


def test_an_empty_document_is_embedded_as_a_blank(fake: FakeOllama) -> None:
    (chunk,), = OllamaProvider(fake.url).embed_documents([""])
    assert chunk.text == ""
    assert np.linalg.norm(chunk.vector) == pytest.approx(1.0, abs=1e-5)
    assert inputs(fake) == [["search_document:  "]]


# -- dims --------------------------------------------------------------------------------------------


def test_dims_of_a_known_model_need_no_request(fake: FakeOllama) -> None:
    assert OllamaProvider(fake.url).dims == 768
    assert OllamaProvider(fake.url, model="all-minilm").dims == 384
    assert fake.requests == []


def test_dims_of_an_unknown_model_are_probed_once(fake: FakeOllama) -> None:
    provider = OllamaProvider(fake.url, model="custom-embed")
    assert provider.dims == 512
    assert provider.dims == 512
    assert inputs(fake) == [["dimension probe"]]  # not nomic: no prefix


def test_dims_of_an_unknown_model_are_learnt_from_any_answer(fake: FakeOllama) -> None:
    provider = OllamaProvider(fake.url, model="custom-embed")
    provider.embed_documents(["a", "b"])
    assert provider.dims == 512
    assert len(fake.embed_bodies) == 1


# -- failures ------------------------------------------------------------------------------------------


def test_an_unreachable_server_fails_fast_and_says_how_to_start_ollama(closed_port: int) -> None:
    host = f"http://127.0.0.1:{closed_port}"
    provider = OllamaProvider(host)
    for call in (lambda: provider.embed_query("q"), lambda: provider.embed_documents(["d"]), provider.check,
                 lambda: OllamaProvider(host, model="custom-embed").dims):
        with pytest.raises(EmbeddingUnavailable) as info:
            call()
        message = str(info.value)
        assert "did not answer" not in message  # refused at once, not waited out to a timeout
        assert host in message
        assert "ollama serve" in message and "OLLAMA_HOST" in message
        assert "\n" not in message
        assert info.value.exit_code == 6


def test_a_server_that_went_away_is_unavailable(fake: FakeOllama) -> None:
    provider = OllamaProvider(fake.url)
    provider.embed_query("works")
    fake.stop()
    with pytest.raises(EmbeddingUnavailable, match="not reachable"):
        provider.embed_query("fails")


def test_an_unknown_model_says_to_pull_it(fake: FakeOllama) -> None:
    provider = OllamaProvider(fake.url, model="no-such-embedder")
    with pytest.raises(EmbeddingUnavailable) as info:
        provider.embed_documents(["d"])
    assert "ollama pull no-such-embedder" in str(info.value)
    with pytest.raises(EmbeddingUnavailable, match="ollama pull no-such-embedder"):
        provider.check()
    with pytest.raises(EmbeddingUnavailable, match="ollama pull no-such-embedder"):
        _ = provider.dims


@pytest.mark.parametrize("status", [500, 503])
def test_an_http_error_names_the_status_and_the_next_call_recovers(fake: FakeOllama, status: int) -> None:
    provider = OllamaProvider(fake.url)
    fake.fail_next(1, status=status, error="llama runner process has terminated: exit status 2")
    with pytest.raises(EmbeddingUnavailable) as info:
        provider.embed_documents(["d"])
    message = str(info.value)
    assert str(status) in message
    assert "llama runner process has terminated" in message
    assert "nomic-embed-text" in message
    assert len(provider.embed_documents(["d"])) == 1


def test_a_failure_in_a_later_batch_is_unavailable(fake: FakeOllama) -> None:
    provider = OllamaProvider(fake.url, batch_size=2)
    provider.embed_documents(["warm"])
    fake.reset()
    fake.fail_next(1)
    with pytest.raises(EmbeddingUnavailable, match="500"):
        provider.embed_documents(["a", "b", "c"])
    assert len(fake.embed_bodies) == 1


def test_a_hung_server_times_out_as_unavailable(fake: FakeOllama) -> None:
    provider = OllamaProvider(fake.url, timeout=0.5)
    fake.hang(30)
    with pytest.raises(EmbeddingUnavailable) as info:  # not httpx.ReadTimeout
        provider.embed_query("q")
    assert fake.stalled.is_set()  # the server held the request: the client gave up on its timeout...
    assert "within 0.5s" in str(info.value)  # ...and that one, not a longer one
    assert fake.url in str(info.value) and "did not answer" in str(info.value)
    fake.hang(0)
    assert provider.embed_query("q").shape == (768,)


def test_a_server_dying_mid_request_is_unavailable(fake: FakeOllama) -> None:
    provider = OllamaProvider(fake.url, timeout=30)
    fake.hang(60)
    killer = threading.Thread(target=lambda: fake.stalled.wait(5) and fake.stop(), daemon=True)
    killer.start()
    with pytest.raises(EmbeddingUnavailable) as info:  # not httpx.RemoteProtocolError
        provider.embed_query("q")
    assert fake.url in str(info.value) and "did not answer" not in str(info.value)  # not waited out to 30 s
    killer.join(5)


def test_the_timeout_message_states_the_timeout(fake: FakeOllama) -> None:
    provider = OllamaProvider(fake.url, timeout=0.5)
    fake.hang(30)
    with pytest.raises(EmbeddingUnavailable) as info:
        provider.embed_query("q")
    assert "0.5" in str(info.value)


def test_check_describes_the_provider_in_one_line(fake: FakeOllama) -> None:
    line = OllamaProvider(fake.url).check()
    assert line == f"ollama nomic-embed-text at {fake.url} (768 dims)"
    assert OllamaProvider(fake.url, model="mxbai-embed-large").check().endswith("(1024 dims)")
    assert inputs(fake) == [["search_query: doctor"], ["doctor"]]


# -- the fake itself (what the tests above rely on) ------------------------------------------------------


def test_the_fake_answers_the_official_client_like_ollama(fake: FakeOllama) -> None:
    client = ollama.Client(host=fake.url)
    names = sorted(m.model or "" for m in client.list().models)
    assert names == ["custom-embed:latest", "mxbai-embed-large:latest", "nomic-embed-text:latest"]
    single = client.embed(model="nomic-embed-text", input="one text")
    assert len(single.embeddings) == 1 and len(single.embeddings[0]) == 768
    assert single.prompt_eval_count and single.total_duration
    assert httpx.get(fake.url + "/api/version").json()["version"]
    assert httpx.get(fake.url + "/").text == "Ollama is running"
    with pytest.raises(ollama.ResponseError) as info:
        client.embed(model="llama-nope", input=["x"])
    assert info.value.status_code == 404
    assert info.value.error == 'model "llama-nope" not found, try pulling it first'


def test_stopping_the_fake_ends_a_stall(fake: FakeOllama) -> None:
    fake.hang(60)
    outcome: list[Any] = []

    def call() -> None:
        try:
            outcome.append(ollama.Client(host=fake.url, timeout=30).embed(model="nomic-embed-text", input="x"))
        except Exception as exc:  # noqa: BLE001 - whatever the client raises is the outcome
            outcome.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    assert fake.stalled.wait(5)
    fake.stop()
    thread.join(60)
    assert not thread.is_alive() and isinstance(outcome[0], Exception)
    assert not isinstance(outcome[0], httpx.TimeoutException), outcome  # ended by the stop, not by the 30 s timeout


# -- choosing the provider from the config ----------------------------------------------------------------


def make_config(tmp_path: Path, embedding: dict[str, Any] | None = None, **env: str) -> Config:
    doc: dict[str, Any] = {"gitlab": {"url": "https://gitlab.example.com"}, "projects": ["group/project"],
                           "storage": {"data_dir": str(tmp_path / "data")}}
    if embedding is not None:
        doc["embedding"] = embedding
    return parse_config(doc, tmp_path, env, "test")


def test_get_provider_picks_ollama_from_the_config(fake: FakeOllama, tmp_path: Path) -> None:
    config = make_config(tmp_path, {"provider": "ollama", "ollama_host": fake.url})
    provider = get_provider(config)
    assert isinstance(provider, OllamaProvider)
    assert (provider.provider, provider.model, provider.host) == ("ollama", "nomic-embed-text", fake.url)
    assert provider.embed_query("q").shape == (768,)
    assert len(fake.embed_bodies) == 1


def test_get_provider_passes_model_batch_size_and_timeout(fake: FakeOllama, tmp_path: Path) -> None:
    config = make_config(tmp_path, {"provider": "ollama", "ollama_host": fake.url, "model": "mxbai-embed-large",
                                    "batch_size": 4, "timeout": 7})
    provider = get_provider(config)
    assert isinstance(provider, OllamaProvider)
    assert (provider.model, provider.batch_size, provider.timeout) == ("mxbai-embed-large", 4, 7.0)
    provider.embed_documents([f"d{i}" for i in range(9)])
    assert [len(i) for i in inputs(fake)] == [4, 4, 1]


def test_environment_picks_ollama_and_its_host(fake: FakeOllama, tmp_path: Path) -> None:
    other = "http://127.0.0.1:9"  # the config's host loses to OLLAMA_HOST
    config = make_config(tmp_path, {"ollama_host": other}, GITLAB_KNOWLEDGE_EMBEDDING="ollama",
                         OLLAMA_HOST=fake.url)
    provider = get_provider(config)
    assert isinstance(provider, OllamaProvider) and provider.host == fake.url
    assert provider.check() == f"ollama nomic-embed-text at {fake.url} (768 dims)"


def test_ollama_host_without_a_scheme_is_accepted(fake: FakeOllama, tmp_path: Path) -> None:
    config = make_config(tmp_path, GITLAB_KNOWLEDGE_EMBEDDING="ollama", OLLAMA_HOST=f"127.0.0.1:{fake.port}")
    provider = get_provider(config)
    assert isinstance(provider, OllamaProvider) and provider.host == fake.url
    assert provider.embed_query("q").shape == (768,)


def test_get_provider_can_be_told_ollama_over_an_embedded_config(fake: FakeOllama, tmp_path: Path) -> None:
    config = make_config(tmp_path, {"ollama_host": fake.url})
    assert isinstance(get_provider(config), EmbeddedProvider)  # the default, not loaded yet
    provider = get_provider(config, provider="ollama", model="custom-embed")
    assert isinstance(provider, OllamaProvider) and provider.model == "custom-embed"
    assert provider.dims == 512


def test_ollama_host_without_a_port_means_ollamas_default_port(tmp_path: Path) -> None:
    try:
        server = FakeOllama(port=11434).start()
    except OSError:
        pytest.skip("port 11434 is in use on this machine")
    try:
        config = make_config(tmp_path, GITLAB_KNOWLEDGE_EMBEDDING="ollama", OLLAMA_HOST="127.0.0.1")
        provider = get_provider(config)
        assert provider.embed_query("q").shape == (768,)
    finally:
        server.stop()

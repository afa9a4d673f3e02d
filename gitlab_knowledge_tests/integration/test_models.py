"""Model lifecycle: `models list` / `models drop`, `embedding.models` kept current by sync, and a
switch of the configured model with search answering from vectors throughout."""

import dataclasses
import json
import threading

import jsonschema

from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import REPO, forked, subprocess_env
from gitlab_knowledge_tests.helpers import run_layers
from gitlab_knowledge_tests.support.fake_ollama import FakeOllama

SCHEMA = json.loads((REPO / "gitlab_knowledge" / "embeddings" / "models_schema.json").read_text())
EMBEDDED = "embedded/all-MiniLM-L6-v2-int8"
OLLAMA = "ollama/nomic-embed-text"


def _with_embedding(config, **changes):
    return dataclasses.replace(config, embedding=dataclasses.replace(config.embedding, **changes))


def test_switching_models_never_leaves_search_without_vectors(synced):
    first, second = synced.projects[0], synced.projects[1]
    with FakeOllama() as fake:
        # Sync keeps the models of `embedding.models` current beside the configured one: here the
        # Ollama table is built one project at a time while the configured model is still embedded.
        keeping = _with_embedding(synced, models=("ollama",), ollama_host=fake.url)
        switched = _with_embedding(keeping, provider="ollama")
        seen: list[tuple[str, str | None, tuple[str, ...]]] = []
        stop = threading.Event()

        def search_all_along() -> None:
            while not stop.is_set():
                response = Workspace(switched).searcher().search("websocket reconnects", limit=3)
                seen.append((response.effective_mode, response.model, tuple(response.warnings)))

        searching = threading.Thread(target=search_all_along)
        searching.start()
        try:
            run_layers(keeping, [first], ["document_embeddings"])
            partial = Workspace(switched).searcher().search("websocket reconnects", limit=3)
            run_layers(keeping, [second], ["document_embeddings"])
            complete = Workspace(switched).searcher().search("websocket reconnects", limit=3)
        finally:
            stop.set()
            searching.join(60)
    assert partial.model == EMBEDDED and any("answering from embedded" in w for w in partial.warnings)
    assert complete.model == OLLAMA and not complete.warnings
    assert len(seen) >= 2
    # Every query was answered from vectors: the old table until the new one was complete.
    assert all(mode == "hybrid" and model in (EMBEDDED, OLLAMA) for mode, model, _ in seen), seen
    # Asked for by name, a model is used as it is (here: its table is complete).
    assert Workspace(switched).searcher(provider="ollama", model="nomic-embed-text").vectors() is not None


def _cli(args, config_path):
    return forked(["gitlab_knowledge", "--config", str(config_path), *args], env=subprocess_env(), timeout=300)


def test_models_list_and_drop(sample, tmp_path):
    import shutil

    # A private copy: dropping a table must not change the session's sample store.
    data = tmp_path / "data"
    shutil.copytree(sample.config.data_dir, data)
    path = tmp_path / "gitlab_knowledge.toml"
    path.write_text(sample.config_path.read_text().replace(str(sample.config.data_dir), str(data)))
    listed = _cli(["models", "list", "--json"], path)
    assert listed.returncode == 0, listed.stderr
    report = json.loads(listed.stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    tables = {f"{t['provider']}:{t['model']}": t for t in report["tables"]}
    assert set(tables) == {"embedded:all-MiniLM-L6-v2-int8", "ollama:nomic-embed-text"}
    assert tables["embedded:all-MiniLM-L6-v2-int8"]["configured"] and \
        tables["embedded:all-MiniLM-L6-v2-int8"]["coverage_pct"] == 100.0
    assert all(t["documents"] == report["documents"] > 0 and t["disk_bytes"] > 0 for t in tables.values())
    assert _cli(["models", "list"], path).stdout.count(":") >= 2

    refused = _cli(["models", "drop", "embedded"], path)
    assert refused.returncode == 2 and "configured model" in refused.stderr
    dropped = _cli(["models", "drop", "ollama:nomic-embed-text", "--json"], path)
    assert dropped.returncode == 0, dropped.stderr
    assert json.loads(dropped.stdout)["dropped"] == "ollama:nomic-embed-text"
    after = json.loads(_cli(["models", "list", "--json"], path).stdout)
    assert [t["provider"] for t in after["tables"]] == ["embedded"]
    again = _cli(["models", "drop", "ollama:nomic-embed-text"], path)
    assert again.returncode == 2 and again.stderr.startswith("error: no vector table")

"""The workspace seam: a whole Dagster run on a GitLab and an embedder handed in as the
`workspace` resource, with no socket and no model; and the typed stats read back from the run."""

import json
import os
from pathlib import Path
from urllib.parse import parse_qs, parse_qsl, urlsplit

import dagster as dg
import httpx
import numpy as np
import pytest

from gitlab_knowledge.cli import main as cli_main
from gitlab_knowledge.config import parse_config
from gitlab_knowledge.defs import defs
from gitlab_knowledge.defs.runner import run_sync
from gitlab_knowledge.documents.refresh import DocumentStats
from gitlab_knowledge.embeddings.provider import Chunk
from gitlab_knowledge.embeddings.refresh import EmbedStats
from gitlab_knowledge.embeddings.vectors import VectorStore
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.lexical.index import LexicalIndex
from gitlab_knowledge.sync.stats import RawStats
from gitlab_knowledge.workspace import Workspace, private_dir
from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET
from gitlab_knowledge_sandbox.api import Api, ApiRequest
from gitlab_knowledge_sandbox.dataset import load_dataset
from gitlab_knowledge_sandbox.state import SandboxState
from gitlab_knowledge_tests.helpers import scalar


class InProcessGitLab:
    """The sandbox's API answering httpx requests in this process (an httpx.MockTransport)."""

    def __init__(self) -> None:
        self.api = Api(SandboxState(load_dataset(SAMPLE_DATASET)))
        self.requests: list[str] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request.url.path)
        if request.headers.get("PRIVATE-TOKEN") != DEFAULT_TOKEN:
            return httpx.Response(401, json={"message": "401 Unauthorized"})
        route = self.api.resolve(request.url.raw_path.decode().split("?")[0])
        if route is None:
            return httpx.Response(404, json={"error": "404 Not Found"})
        query = urlsplit(str(request.url)).query
        answer = self.api.handle(route, ApiRequest(
            method=request.method, path=request.url.raw_path.decode().split("?")[0],
            query=parse_qs(query, keep_blank_values=True), query_pairs=parse_qsl(query, keep_blank_values=True),
            body={}, base_url=f"{request.url.scheme}://{request.url.host}"))
        return httpx.Response(answer.status, json=answer.body, headers=answer.headers)

    def client(self, config) -> GitLabClient:
        return GitLabClient(config.gitlab, config.token(), transport=httpx.MockTransport(self.handle))


class FakeEmbedder:
    """A deterministic 8-dimensional embedder that counts what it was asked to embed."""

    provider, model, dims = "fake", "counting-8", 8

    def __init__(self) -> None:
        self.texts = 0

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dims, dtype=np.float32)
        for word in text.lower().split():
            vector[hash(word) % self.dims] += 1.0
        return vector / (np.linalg.norm(vector) or 1.0)

    def embed_documents(self, texts: list[str]) -> list[list[Chunk]]:
        self.texts += len(texts)
        return [[Chunk(self._vector(t), t[:200])] for t in texts]

    def embed_query(self, text: str) -> np.ndarray:
        return self._vector(text)

    def check(self) -> str:
        return "fake"


def _workspace(tmp_path, gitlab: InProcessGitLab, embedder: FakeEmbedder) -> Workspace:
    config = parse_config({"gitlab": {"url": "http://gitlab.invalid", "rate_limit": 0},
                           "projects": ["acme/platform", "acme/web-app"],
                           "storage": {"data_dir": str(tmp_path / "data")}}, tmp_path, {}, "test")
    return Workspace(config, gitlab_factory=gitlab.client, embedder_factory=lambda _c, _p=None, _m=None: embedder)


def test_the_whole_job_runs_on_a_gitlab_and_an_embedder_given_as_resources(tmp_path, token_env):
    gitlab, embedder = InProcessGitLab(), FakeEmbedder()
    workspace = _workspace(tmp_path, gitlab, embedder)
    project = "acme/platform"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("gitlab_projects", [project])
        result = dg.materialize(list(defs.assets), resources={"workspace": workspace}, partition_key=project,
                                instance=instance)
        assert result.success
        materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialized == {"raw_gitlab_payloads", "normalized_gitlab", "knowledge_graph", "search_documents",
                            "document_embeddings", "lexical_index"}
    assert gitlab.requests and all(path.startswith("/api/v4/") for path in gitlab.requests)
    config = workspace.config
    documents = scalar(config, "SELECT count(*) FROM documents WHERE project_path = ?", [project])
    assert documents > 0 and embedder.texts == documents
    assert VectorStore(config.lancedb_dir, "fake", "counting-8").count(project)[0] == documents
    assert LexicalIndex(config.tantivy_dir).count(project) == documents


def test_the_runner_returns_typed_stats_and_the_error_the_step_raised(tmp_path, token_env, monkeypatch):
    gitlab, embedder = InProcessGitLab(), FakeEmbedder()
    workspace = _workspace(tmp_path, gitlab, embedder)
    with dg.instance_for_test() as instance:
        outcomes = run_sync(workspace, ["acme/platform"], instance=instance)
        raw = outcomes[0].stats(RawStats)
        assert outcomes[0].success and raw.items_new == raw.items_fetched > 0
        assert raw.api_calls == len(gitlab.requests)
        assert outcomes[0].stats(EmbedStats).embedded == outcomes[0].stats(DocumentStats).new == embedder.texts
        # A wrong token fails the raw step with AuthError: the outcome carries it, typed, with its exit code.
        monkeypatch.setenv("GITLAB_TOKEN", "not-the-token")
        failed = run_sync(workspace, ["acme/platform", "acme/web-app"], instance=instance)
    from gitlab_knowledge.errors import AuthError

    assert len(failed) == 1, "an auth failure is not about one project: the rest are not attempted"
    assert isinstance(failed[0].error, AuthError) and failed[0].exit_code == AuthError.exit_code == 3
    assert "not-the-token" not in (failed[0].message or "")
    assert failed[0].stats(RawStats) == RawStats()  # the failed step reported nothing


def fresh_clone_data_dir(tmp_path: Path) -> Path:
    """`data/` as a clone checks it out: its README and .gitignore, mode 0755 (git tracks no 0700)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "README.md").write_text("# data/\n")
    (data / ".gitignore").write_text("*\n")
    data.chmod(0o755)
    return data


def test_a_clones_0755_data_directory_is_made_private_by_the_workspace(tmp_path):
    data = fresh_clone_data_dir(tmp_path)
    assert private_dir(data) == data
    assert data.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_data_directory_holding_another_users_files_is_left_for_doctor_to_name(tmp_path):
    data = fresh_clone_data_dir(tmp_path)
    os.chown(data / "README.md", 65534, 65534)
    private_dir(data)
    assert data.stat().st_mode & 0o777 == 0o755


def test_doctor_on_a_fresh_clones_data_directory_does_not_warn_about_permissions(tmp_path, token_env, capsys):
    data = fresh_clone_data_dir(tmp_path)
    config = tmp_path / "gitlab_knowledge.toml"
    config.write_text(f'projects = ["a/b"]\n[gitlab]\nurl = "http://127.0.0.1:9"\nmax_retries = 0\ntimeout = 2\n'
                      f'[storage]\ndata_dir = "{data}"\n', encoding="utf-8")
    cli_main(["--config", str(config), "doctor", "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["permissions"]["status"] == "ok", checks["permissions"]
    assert data.stat().st_mode & 0o777 == 0o700

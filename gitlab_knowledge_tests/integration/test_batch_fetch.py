"""A batch fetches several projects at once (sync/many.py): bounded by `sync.projects_in_flight`,
counted where the sandbox serves the requests (over 127.0.0.1), and each project's stored rows
are what a batch fetching one project at a time stores; a failure that is not about one project
(the token refused) stops the batch."""

import dataclasses
from pathlib import Path

import pytest
import tomli_w

from gitlab_knowledge.config import load_config
from gitlab_knowledge.defs.many_projects import Batch, Carried, carry
from gitlab_knowledge.errors import AuthError
from gitlab_knowledge.layers import LAYERS, RAW
from gitlab_knowledge.store.db import read_connection
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import project_paths

PROJECTS = 6
IN_FLIGHT = 3


@pytest.fixture(scope="module")
def six_projects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("six-projects")
    generate_dataset(out, projects=PROJECTS, issues=12, mrs=6, seed=24, threads_per_parent_mean=1.0)
    return out


def workspace_for(sb: SandboxGitLab, data: Path, in_flight: int) -> Workspace:
    path = data.parent / f"{data.name}.toml"
    path.write_text(tomli_w.dumps({"projects": project_paths(sb), "sync": {"projects_in_flight": in_flight},
                                   "gitlab": {"url": sb.url, "rate_limit": 0, "max_retries": 0, "timeout": 5},
                                   "storage": {"data_dir": str(data)}}), encoding="utf-8")
    return Workspace(load_config(str(path)))


def run(workspace: Workspace, projects: list[str]) -> tuple[Batch, list[tuple[str, str]]]:
    batch = Batch({p: Carried(p) for p in projects})
    order = [(project, layer.name) for project, layer, _ in carry(workspace, projects, batch)]
    return batch, order


def stored(workspace: Workspace) -> dict[str, list[tuple]]:
    """What a sync stores, without what differs between two syncs of the same data (when, which run)."""
    with read_connection(workspace.config.duckdb_path) as con:
        return {
            "raw": con.execute("SELECT project_id, resource_type, gitlab_key, parent_id, position, updated_at, "
                               "payload_hash, deleted_at IS NULL FROM raw_payloads ORDER BY ALL").fetchall(),
            "issues": con.execute("SELECT project_id, iid, title, state, updated_at FROM issues ORDER BY ALL").fetchall(),
            "merge_requests": con.execute("SELECT project_id, iid, title, updated_at FROM merge_requests "
                                          "ORDER BY ALL").fetchall(),
            "notes": con.execute("SELECT id, project_id, discussion_id, body FROM notes ORDER BY ALL").fetchall(),
            "cursors": con.execute("SELECT project_id, resource_type, updated_at_cursor FROM sync_cursors "
                                   "ORDER BY ALL").fetchall(),
            "documents": con.execute("SELECT id, project_path, content_hash FROM documents ORDER BY ALL").fetchall(),
            "runs": con.execute("SELECT project_path, project_id, status FROM sync_runs ORDER BY ALL").fetchall(),
        }


def test_a_batch_fetches_at_most_its_bound_of_projects_at_once_and_stores_what_one_at_a_time_does(
        six_projects, tmp_path, token_env):
    # Each request is served in 20 ms, so a project's ~12 calls one after another span a while
    # and fetches that overlap are seen overlapping by the server.
    with SandboxGitLab(dataset=six_projects, latency_ms=20) as sb:
        projects = project_paths(sb)
        assert len(projects) == PROJECTS
        together = workspace_for(sb, tmp_path / "together", IN_FLIGHT)
        batch, order = run(together, projects)
        assert batch.unfinished == []
        assert 1 < sb.in_flight.most_projects <= IN_FLIGHT, sb.in_flight.most_projects
        # Every layer of every project is reported, each project's raw layer first.
        assert sorted(order) == sorted((p, layer.name) for p in projects for layer in LAYERS)
        for project in projects:
            assert [name for p, name in order if p == project][0] == RAW.name
        # Each project's calls are its own (the shared client counts them per project).
        calls = [batch.carried[p].metadata[RAW.asset]["api_calls"] for p in projects]
        assert all(0 < c < 40 for c in calls), calls

        sb.in_flight.reset()
        one_by_one = workspace_for(sb, tmp_path / "one_by_one", 1)
        batch, _ = run(one_by_one, projects)
        assert batch.unfinished == []
        assert sb.in_flight.most_projects == 1
    assert stored(together) == stored(one_by_one)


def test_a_refused_token_stops_every_fetch_of_the_batch(six_projects, tmp_path, token_env):
    with SandboxGitLab(dataset=six_projects, token="another-token") as sb:
        projects = project_paths(sb)
        batch, order = run(workspace_for(sb, tmp_path / "data", IN_FLIGHT), projects)
    assert isinstance(batch.stopped, AuthError)
    assert order == []
    assert sorted(batch.unfinished) == sorted(projects)
    assert any(c.attempted and isinstance(c.error, AuthError) for c in batch.carried.values())


def test_a_client_that_cannot_be_made_fails_the_first_project_and_stops_the_rest(six_projects, tmp_path, token_env):
    from gitlab_knowledge.errors import ConfigError

    with SandboxGitLab(dataset=six_projects) as sb:
        projects = project_paths(sb)
        workspace = workspace_for(sb, tmp_path / "data", IN_FLIGHT)

        def no_client(config):
            raise ConfigError("config field gitlab.ca_bundle: not a readable PEM certificate file")

        batch, order = run(dataclasses.replace(workspace, gitlab_factory=no_client), projects)
    assert order == []
    assert isinstance(batch.stopped, ConfigError)
    assert batch.carried[projects[0]].attempted and isinstance(batch.carried[projects[0]].error, ConfigError)
    assert sorted(batch.unfinished) == sorted(projects)

"""What a failed run says in Dagster: an expected failure (GitLab unreachable, the token refused,
a project GitLab does not have, the embedding provider down) is one line, without a Python stack
trace, in the step's failure event, the run's failure event and a tag the run list shows; a bug
keeps its trace. An embedding outage fails the run (the UI and the sensor's backoff see a failed
run), while the lexical index beside it is still brought up to date."""

import shutil

import dagster as dg
import pytest

from gitlab_knowledge.config import Config, parse_config
from gitlab_knowledge.defs.failures import FAILURE_TAG
from gitlab_knowledge.defs.runner import ProjectOutcome, run_embed, run_sync
from gitlab_knowledge.embeddings.embedded import EmbeddedProvider
from gitlab_knowledge.errors import AuthError, EmbeddingUnavailable, GitLabError, KnowledgeError
from gitlab_knowledge.index_status import index_status
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import TOKEN_ENV
from gitlab_knowledge_tests.helpers import workspace


def failure_events(instance: dg.DagsterInstance, outcome: ProjectOutcome) -> tuple[list, list]:
    steps = [r.dagster_event.event_specific_data
             for r in instance.all_logs(outcome.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)]
    runs = [r.dagster_event.event_specific_data
            for r in instance.all_logs(outcome.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)]
    return steps, runs


def assert_one_line(instance: dg.DagsterInstance, outcome: ProjectOutcome, error: type[KnowledgeError]) -> str:
    assert isinstance(outcome.error, error), outcome.error
    steps, runs = failure_events(instance, outcome)
    assert len(steps) == 1 and len(runs) == 1
    step = steps[0]
    line = step.user_failure_data.description
    assert line == str(outcome.error) and "\n" not in line and "Traceback" not in line
    assert step.error.message == line and step.error.stack == [] and step.error.cause is None
    assert runs[0].error is None or (runs[0].error.message == line and runs[0].error.stack == [])
    run = instance.get_run_by_id(outcome.run_id)
    assert run.status == dg.DagsterRunStatus.FAILURE and run.tags[FAILURE_TAG] == line
    return line


class Down:
    """The embedded model's table, with its provider unreachable."""

    provider, model, dims = "embedded", EmbeddedProvider.MODEL, 384

    def embed_documents(self, texts: list[str]) -> list:
        raise EmbeddingUnavailable("Ollama at http://127.0.0.1:9 is not reachable")


def test_gitlab_unreachable_is_one_line_without_a_trace(tmp_path, token_env):
    config = parse_config({"gitlab": {"url": "http://127.0.0.1:9", "max_retries": 0, "timeout": 2},
                           "projects": ["a/b"], "storage": {"data_dir": str(tmp_path / "data")}}, tmp_path, {}, "test")
    instance = dg.DagsterInstance.ephemeral()
    outcome, = run_sync(Workspace(config), ["a/b"], instance=instance)
    assert "connection error" in assert_one_line(instance, outcome, GitLabError)


def test_a_refused_token_and_an_unknown_project_are_one_line(sandbox, make_config, monkeypatch):
    instance = dg.DagsterInstance.ephemeral()
    config: Config = make_config(sandbox)
    missing = parse_config({"gitlab": {"url": sandbox.url, "rate_limit": 0, "max_retries": 0},
                            "projects": ["nobody/nothing"], "storage": {"data_dir": str(config.data_dir)}},
                           config.data_dir.parent, {}, "test")
    outcome, = run_sync(Workspace(missing), ["nobody/nothing"], instance=instance)
    assert "nobody/nothing" in assert_one_line(instance, outcome, KnowledgeError)
    monkeypatch.setenv(TOKEN_ENV, "glpat-not-the-right-one")
    outcome, = run_sync(Workspace(config), [config.projects[0]], instance=instance)
    assert_one_line(instance, outcome, AuthError)


def test_a_bug_keeps_its_trace(tmp_path, token_env, monkeypatch):
    def broken(*_args, **_kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr("gitlab_knowledge.sync.engine.refresh", broken)
    config = parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": ["a/b"],
                           "storage": {"data_dir": str(tmp_path / "data")}}, tmp_path, {}, "test")
    instance = dg.DagsterInstance.ephemeral()
    outcome, = run_sync(Workspace(config), ["a/b"], instance=instance)
    assert isinstance(outcome.error, ZeroDivisionError)
    (step,), _runs = failure_events(instance, outcome)
    assert step.user_failure_data is None
    assert any("broken" in frame for frame in (step.error.cause or step.error).stack)


@pytest.mark.parametrize("job", ["embed", "sync"])
def test_an_embedding_outage_fails_the_run_and_the_lexical_index_still_follows(synced, job):
    instance = dg.DagsterInstance.ephemeral()
    ws = workspace(synced, Down())
    project = synced.projects[0]
    if job == "embed":
        outcome, = run_embed(ws, [project], everything=True, instance=instance)
    else:
        # Every document lacks its vector and its lexical entry: the lexical index is rebuilt
        # beside the failing embeddings step.
        shutil.rmtree(synced.tantivy_dir)
        shutil.rmtree(synced.lancedb_dir)
        outcome, = run_sync(ws, [project], selection=["document_embeddings", "lexical_index"], instance=instance)
    line = assert_one_line(instance, outcome, EmbeddingUnavailable)
    assert outcome.exit_code == 6 and "could not be embedded" in line and "not reachable" in line
    stats = outcome.error.embed_stats[0]
    # Each document that could not be embedded is recorded, to be retried.
    assert stats.failed == stats.documents == len(ws.vectors("embedded", EmbeddedProvider.MODEL).failures(project)) > 0
    if job == "sync":
        status = next(p for p in index_status(Workspace(synced))["projects"] if p["project"] == project)
        assert "lexical_index" in outcome.metadata and status["lexical"]["unindexed"] == 0
    # The run that planned the asset's materialization ended, failed: the lineage shows the
    # asset failed, not "Materializing".
    planned = instance.get_latest_planned_materialization_info(dg.AssetKey("document_embeddings"), project)
    assert planned is not None and planned.run_id == outcome.run_id
    assert instance.get_run_by_id(planned.run_id).status == dg.DagsterRunStatus.FAILURE

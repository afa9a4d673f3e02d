"""The Dagster definitions load, and the sync job materializes a project partition in-process
against the sandbox GitLab."""

import subprocess
import sys

import dagster as dg
import yaml

from gitlab_knowledge.config import load_config
from gitlab_knowledge.defs import defs
from gitlab_knowledge.defs.runner import instance_yaml, run_sync
from gitlab_knowledge.layers import DUCKDB_POOL, LANCEDB_POOL, TANTIVY_POOL
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import REPO, subprocess_env, write_config_file
from gitlab_knowledge_tests.helpers import scalar

ASSETS = {"raw_gitlab_payloads": ("raw", DUCKDB_POOL), "normalized_gitlab": ("normalized", DUCKDB_POOL),
          "knowledge_graph": ("normalized", DUCKDB_POOL), "search_documents": ("documents", DUCKDB_POOL), "document_embeddings": ("index", LANCEDB_POOL),
          "lexical_index": ("index", TANTIVY_POOL)}


def test_definitions_load_with_the_layers_groups_pools_and_partitions():
    graph = defs.resolve_asset_graph()
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert keys == set(ASSETS)
    for name, (group, pool) in ASSETS.items():
        node = graph.get(dg.AssetKey(name))
        assert node.group_name == group
        assert node.pools == {pool}
        assert node.kinds
        assert isinstance(node.partitions_def, dg.DynamicPartitionsDefinition)
        assert node.partitions_def.name == "gitlab_projects"
        assert node.description
    parents = {name: {p.to_user_string() for p in graph.get(dg.AssetKey(name)).parent_keys} for name in ASSETS}
    assert parents == {"raw_gitlab_payloads": set(), "normalized_gitlab": {"raw_gitlab_payloads"},
                       "knowledge_graph": {"normalized_gitlab"},
                       "search_documents": {"normalized_gitlab", "knowledge_graph"}, "document_embeddings": {"search_documents"},
                       "lexical_index": {"search_documents"}}
    assert defs.resolve_job_def("sync_project") and defs.resolve_job_def("embed_project")


def test_workspace_loads_with_the_dagster_cli():
    result = subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
                            cwd=REPO, capture_output=True, text=True, env=subprocess_env(), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_instance_settings_match_the_repository_dagster_yaml(tmp_path):
    repo = yaml.safe_load((REPO / "dagster.yaml").read_text())
    generated = yaml.safe_load(instance_yaml(tmp_path))
    text = yaml.safe_dump(repo).replace("data/dagster", str(tmp_path))
    assert generated == yaml.safe_load(text)


def test_the_sync_job_materializes_a_partition_in_process(sandbox, tmp_path, token_env):
    # Only the config file's path travels through Dagster run config (never the token).
    path = write_config_file(tmp_path / "gitlab_knowledge.toml", sandbox, tmp_path / "data")
    config = load_config(path)
    project = config.projects[0]
    with dg.instance_for_test() as instance:
        outcomes = run_sync(Workspace.load(path), [project], instance=instance)
        assert [o.success for o in outcomes] == [True], outcomes[0].message
        evaluations = {}
        for record in instance.all_logs(outcomes[0].run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
            evaluation = record.dagster_event.event_specific_data
            evaluations[evaluation.check_name] = evaluation
        assert len(evaluations) == 14
        failed = {n: e.metadata for n, e in evaluations.items() if not e.passed}
        # Only the other project is stale: it has never been synced.
        assert set(failed) == {"projects_synced_recently"}, failed
        assert evaluations["projects_synced_recently"].severity == dg.AssetCheckSeverity.WARN
        assert evaluations["vectors_match_documents"].metadata["scope"].value == project
        assert set(outcomes[0].metadata) == set(ASSETS)
        raw = outcomes[0].metadata["raw_gitlab_payloads"]
        assert raw["items_new"] == raw["items_fetched"] > 0 and raw["api_calls"] > 0
        assert "| issues |" in raw["summary"]
        for name in ASSETS:
            record = instance.get_latest_materialization_event(dg.AssetKey(name))
            assert record is not None and record.dagster_event.partition == project
        assert project in instance.get_dynamic_partitions("gitlab_projects")
        run = instance.get_run_by_id(outcomes[0].run_id)
        assert run.tags["dagster/partition"] == project and run.tags["gitlab_knowledge/trigger"] == "cli"
        assert token_env not in str(run.run_config)
    documents = scalar(config, "SELECT count(*) FROM documents WHERE project_path = ?", [project])
    assert documents == outcomes[0].metadata["lexical_index"]["lexical_index_documents"] > 0
    assert scalar(config, "SELECT count(DISTINCT dagster_run_id) FROM documents") == 1


def test_runs_the_daemon_launches_log_at_info_not_debug():
    from gitlab_knowledge.defs.jobs import QUIET_LOGS

    # A run request without run config (the sensor's) gets the job's config for its partition.
    for name in ("sync_project", "embed_project"):
        config = defs.resolve_job_def(name).partitioned_config.get_run_config_for_partition_key("acme/p")
        assert config["loggers"] == QUIET_LOGS["loggers"], name


def test_the_freshness_job_every_15_minutes_logs_at_info_too():
    from gitlab_knowledge.defs.jobs import QUIET_LOGS

    config = defs.resolve_job_def("sync_freshness").run_config  # unpartitioned: its config as is
    assert config is not None and config["loggers"] == QUIET_LOGS["loggers"]


def test_the_instance_never_shows_dagsters_sign_up_dialog(tmp_path):
    # On localhost a fresh instance pops a newsletter dialog over the UI a second after load; it
    # covered the partition picker the 300-partition UI test clicks (seen in a clean-clone CI run).
    import dagster as dg

    (tmp_path / "dagster.yaml").write_text(instance_yaml(tmp_path))
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.nux_enabled is False

"""Two runs launched at once through the real daemon: a project's sync is never doubled (one run
per partition at a time), and steps that write DuckDB never overlap across runs (the pool)."""

from itertools import combinations

from gitlab_knowledge.layers import DUCKDB_POOL
from gitlab_knowledge_sandbox import SandboxGitLab
from gitlab_knowledge_tests.conftest import subprocess_env, write_config_file
from gitlab_knowledge_tests.support.dagster_dev import DagsterDev

DUCKDB_STEPS = {"raw_gitlab_payloads", "normalized_gitlab", "search_documents"}


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_runs_launched_at_once_never_double_a_project_or_share_the_duckdb_writer(small_dataset, tmp_path):
    assert DUCKDB_POOL == "gitlab_knowledge_duckdb"
    with SandboxGitLab(dataset=small_dataset, latency_ms=20) as sb:
        config = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data")
        first, second = [p["path_with_namespace"] for p in sb.state.list_projects(order_by="id", sort="asc")]
        env = subprocess_env(GITLAB_KNOWLEDGE_CONFIG=str(config), GITLAB_KNOWLEDGE_AUTOMATION="off")
        with DagsterDev(tmp_path, env) as dagster:
            for project in (first, second):
                dagster.add_partition(project)
            runs = {"a1": dagster.launch("sync_project", first), "a2": dagster.launch("sync_project", first),
                    "b1": dagster.launch("sync_project", second)}
            statuses = {name: dagster.wait_run(run_id, timeout=300) for name, run_id in runs.items()}
            assert set(statuses.values()) == {"SUCCESS"}, (statuses, dagster.log.read_text()[-4000:])
            timings = {name: dagster.timings(run_id) for name, run_id in runs.items()}
    a1, a2 = timings["a1"], timings["a2"]
    assert not overlap((a1["startTime"], a1["endTime"]), (a2["startTime"], a2["endTime"])), "a project synced twice at once"
    steps = [(name, s["stepKey"], (s["startTime"], s["endTime"])) for name, t in timings.items()
             for s in t["stepStats"] if s["stepKey"] in DUCKDB_STEPS]
    assert len(steps) == 9
    for (r1, k1, w1), (r2, k2, w2) in combinations(steps, 2):
        if r1 != r2:
            assert not overlap(w1, w2), f"{r1}.{k1} and {r2}.{k2} wrote DuckDB at the same time"

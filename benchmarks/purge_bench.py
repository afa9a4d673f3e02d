"""Where a `purge_removed_projects` run's time goes, on a synced store of many projects.

    python -m benchmarks.purge_bench --config HOME/gitlab_knowledge.toml [--behind 30]

The store is copied first (the purge removes a project). One project of the configured groups is
marked as having left them (as discovery records an archived project), then purged twice, each on
its own copy: by the purge functions alone (`purge.py`: find, vectors, lexical, DuckDB), and by the
op job in process on a Dagster instance with the pools at one slot, each step's time read from the
run's events. `--behind S` holds the three stores' pool slots for S seconds before the job starts,
as a batch run that took them first does: the job's wall time is then that wait plus its own.
`groups_bench --purge` runs this on the store its first sync built.
"""

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def _copy(config_path: Path, into: Path) -> Path:
    from gitlab_knowledge.config import load_config

    config = load_config(config_path)
    shutil.copytree(config.data_dir, into / "data")
    text = config_path.read_text(encoding="utf-8")
    copied = into / "gitlab_knowledge.toml"
    # data_dir may be written relative to the config's directory or absolute: name the copy absolutely.
    lines = [f'data_dir = "{into / "data"}"' if line.strip().startswith("data_dir") else line for line in text.splitlines()]
    copied.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return copied


def _mark_left(config_path: Path) -> tuple[int, str]:
    """The last member of the first group leaves it, as discovery records an archived project."""
    from gitlab_knowledge.config import load_config
    from gitlab_knowledge.store import groups

    config = load_config(config_path)
    record = groups.load_record(config.data_dir)
    entry = record["groups"][groups.group_key(config.groups.paths[0])]
    gone = entry["projects"].pop()
    record["left"][str(gone["id"])] = {"path": gone["path"], "why": "archived"}
    groups.save_record(config.data_dir, record)
    return int(gone["id"]), str(gone["path"])


def functions(config_path: Path) -> dict[str, float]:
    from gitlab_knowledge import purge
    from gitlab_knowledge.config import load_config
    from gitlab_knowledge.store import groups
    from gitlab_knowledge.workspace import Workspace

    project_id, _path = _mark_left(config_path)
    workspace = Workspace(load_config(config_path))
    out: dict[str, float] = {}
    started = time.perf_counter()
    with workspace.read() as con:
        [found] = [p for p in purge.removed_projects(con, [], keep_ids=[m.project_id for m in groups.members(workspace.config)])
                   if p.project_id == project_id]
    out["find"] = time.perf_counter() - started
    for name, step in (("vectors", purge.purge_vectors), ("lexical", purge.purge_lexical), ("duckdb", purge.purge_store)):
        started = time.perf_counter()
        step(workspace, found)
        out[name] = time.perf_counter() - started
    return out


def job(config_path: Path, behind: float) -> dict[str, Any]:
    import dagster as dg

    from gitlab_knowledge.config import load_config
    from gitlab_knowledge.defs import build_defs
    from gitlab_knowledge.defs.discovery import PURGE_JOB
    from gitlab_knowledge.defs.run_slots import holding_pools
    from gitlab_knowledge.layers import DUCKDB_POOL, LANCEDB_POOL, TANTIVY_POOL
    from gitlab_knowledge.workspace import Workspace

    project_id, _path = _mark_left(config_path)
    workspace = Workspace(load_config(config_path))
    home = config_path.parent / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("concurrency:\n  pools:\n    default_limit: 1\ntelemetry:\n  enabled: false\n")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        held = threading.Event()

        def hold() -> None:  # a batch run that took the three pools first
            with holding_pools(instance, "a-batch-run", "sync_each_project", [DUCKDB_POOL, TANTIVY_POOL, LANCEDB_POOL]):
                held.set()
                time.sleep(behind)

        holder = threading.Thread(target=hold)
        if behind:
            holder.start()
            held.wait()
        definition = build_defs(workspace).resolve_job_def(PURGE_JOB)
        started = time.perf_counter()
        result = definition.execute_in_process(
            run_config={"ops": {"find_removed": {"config": {"project_ids": [project_id]}}}}, instance=instance)
        wall = time.perf_counter() - started
        if behind:
            holder.join()
        assert result.success and result.output_for_node("purge_store") == 1
        events = [r.event_log_entry for r in instance.get_records_for_run(result.run_id).records]
    run_start = events[0].timestamp
    steps: dict[str, dict[str, float]] = {}
    for entry in events:
        kind = entry.dagster_event.event_type_value if entry.dagster_event else ""
        if kind == "STEP_START" and entry.step_key:
            steps[entry.step_key] = {"started_after_s": entry.timestamp - run_start, "start": entry.timestamp}
        elif kind == "STEP_SUCCESS" and entry.step_key:
            steps[entry.step_key]["ran_s"] = entry.timestamp - steps[entry.step_key].pop("start")
    return {"wall_s": wall, "behind_s": behind, "steps": steps}


def table(result: dict[str, Any]) -> str:
    rows = ["| purge of one project | s |", "|---|---:|"]
    for name, seconds in result["functions"].items():
        rows.append(f"| function: {name} | {seconds:.2f} |")
    for run in result["runs"]:
        label = "op job, pools free" if not run["behind_s"] else f"op job, pools held {run['behind_s']:g} s first"
        rows.append(f"| {label}: wall | {run['wall_s']:.2f} |")
        for step, times in run["steps"].items():
            rows.append(f"| ↳ {step} (started +{times['started_after_s']:.2f} s) | {times.get('ran_s', float('nan')):.2f} |")
    return "\n".join(rows)


def measure(config_path: Path, behind: float = 0.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="purge-bench-") as scratch:
        root = Path(scratch)
        (root / "f").mkdir()
        result: dict[str, Any] = {"functions": functions(_copy(config_path, root / "f")), "runs": []}
        for n, wait in enumerate([0.0, behind] if behind else [0.0]):
            (root / f"j{n}").mkdir()
            result["runs"].append(job(_copy(config_path, root / f"j{n}"), wait))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.purge_bench")
    parser.add_argument("--config", type=Path, required=True, help="a synced store's config with groups")
    parser.add_argument("--behind", type=float, default=0.0, help="also purge behind a holder of the pools for S s")
    args = parser.parse_args(argv)
    result = measure(args.config.resolve(), args.behind)
    print(json.dumps(result, indent=1))
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a sync run's time goes: the fixed cost of a run, next to the work it does.

Against the bundled sample (two projects) on a sandbox GitLab, through the real CLI (`python -m
gitlab_knowledge sync`, a new process each time, as a user or a cron job runs it):

- a no-op sync of both projects, and a one-note sync (a note added to one project, that project
  synced), each `--repeat` times; medians are reported, with the load average (the machine may be
  shared: compare before/after figures taken in the same conditions), and the CPU time of the
  no-op sync's and the batch run's processes (an embedding worker they start included);
- each run's breakdown from its Dagster event log: run start to first step, each step (asset or
  check) as Dagster timed it, the layer's own time inside the asset steps (`*duration_s` metadata),
  and what is left: Dagster's own overhead;
- the costs outside any run, measured in fresh processes: interpreter + imports of the definitions,
  opening the Dagster instance, loading the embedding model, opening each store.

    python -m benchmarks.run_cost_bench [--repeat 3] [--projects N --generated]
    python -m benchmarks.run_cost_bench --note-batch 30

`--note-batch N`: N generated projects synced once, then one note added to each and the batch run
naming all N (what the change sensor launches after such a tick), in a new process under cProfile:
its wall time, its CPU time (its embedding worker's included) and where it went, stage by stage
(the cumulative time of each stage's function).

`--generated N` syncs a generated dataset of N small projects instead (first sync and no-op sync
of all of them; the fixed cost per project is what a many-project sync pays N times).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab, generate_dataset

PY = sys.executable
REPO = Path(__file__).resolve().parents[1]
PRODUCT = [REPO]  # the checkout whose gitlab_knowledge the CLI processes run (`--product`)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITLAB", "DAGSTER_HOME"))}
    env.update({"GITLAB_TOKEN": DEFAULT_TOKEN, "NO_COLOR": "1",
                "PYTHONPATH": os.pathsep.join([str(PRODUCT[0]), str(PRODUCT[0] / "sandbox")])})
    return env


def cli(config: Path, *args: str) -> tuple[float, dict[str, Any]]:
    """One CLI sync in a new process (cwd: the config's directory, so the Dagster instance is the
    data directory's): its wall time and its --json output."""
    started = time.monotonic()
    proc = subprocess.run([PY, "-m", "gitlab_knowledge", "sync", "--config", str(config), "--json", *args],
                          cwd=config.parent, env=_env(), capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"sync failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return wall, json.loads(proc.stdout)


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's ended children and of theirs, once reaped: a
    sync's or batch run's own and its embedding worker's (embeddings/ahead_worker.py)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def fresh_process(code: str) -> float:
    """Wall time of a new interpreter running `code`."""
    started = time.monotonic()
    subprocess.run([PY, "-c", code], env=_env(), check=True, capture_output=True, timeout=600)
    return time.monotonic() - started


def run_breakdown(instance: Any, run_id: str) -> dict[str, float]:
    """From a run's event log: seconds before the first step, in each step, after the last, and the
    layers' own time inside the asset steps."""
    import dagster as dg

    records = instance.get_records_for_run(run_id, limit=100000).records
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    run_start = run_end = None
    layer = 0.0
    for record in records:
        entry = record.event_log_entry
        event = entry.dagster_event
        if event is None:
            continue
        kind, ts = event.event_type, entry.timestamp
        if kind == dg.DagsterEventType.RUN_START:
            run_start = ts
        elif kind in (dg.DagsterEventType.RUN_SUCCESS, dg.DagsterEventType.RUN_FAILURE):
            run_end = ts
        elif kind == dg.DagsterEventType.STEP_START:
            starts[event.step_key] = ts
        elif kind in (dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE):
            ends[event.step_key] = ts
        elif kind == dg.DagsterEventType.ASSET_MATERIALIZATION:
            mat = entry.asset_materialization
            for key, value in (mat.metadata if mat else {}).items():
                if key.endswith("duration_s"):
                    layer += float(getattr(value, "value", value))
    if run_start is None or run_end is None or not starts:
        return {}
    asset_steps = sum(ends.get(k, run_end) - s for k, s in starts.items() if "check" not in k and "caught_up" not in k
                      and k in _asset_steps())
    check_steps = sum(ends.get(k, run_end) - s for k, s in starts.items() if k not in _asset_steps())
    return {"run_s": run_end - run_start, "before_first_step_s": min(starts.values()) - run_start,
            "after_last_step_s": run_end - max(ends.values() or [run_end]), "asset_steps_s": asset_steps,
            "layers_own_s": layer, "check_steps_s": check_steps, "steps": len(starts)}


def _asset_steps() -> set[str]:
    from gitlab_knowledge.layers import LAYERS

    return {layer.asset for layer in LAYERS}


def median_dict(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for r in rows for k in r}
    return {k: round(statistics.median([r[k] for r in rows if k in r]), 2) for k in sorted(keys)}


def sum_runs(instance: Any, projects: list[dict[str, Any]]) -> dict[str, float]:
    total: dict[str, float] = defaultdict(float)
    runs = {p["dagster_run_id"] for p in projects}
    for run_id in runs:
        for k, v in run_breakdown(instance, run_id).items():
            total[k] += v
    total["runs"] = len(runs)
    return dict(total)


def outside_costs(config: Path) -> dict[str, float]:
    """Fixed costs outside any run, each in a new interpreter (medians of 3)."""
    setup = (f"import os,time; os.environ['GITLAB_TOKEN']={DEFAULT_TOKEN!r}; "
             "from gitlab_knowledge.config import load_config; from gitlab_knowledge.workspace import Workspace; "
             f"w=Workspace(load_config({str(config)!r})); t=time.monotonic(); ")
    codes = {
        "interpreter_s": "pass",
        "import_definitions_s": "import gitlab_knowledge.defs",
        "open_instance_s": setup.replace("t=time.monotonic(); ", "")
        + "from gitlab_knowledge.defs.runner import dagster_instance; import gitlab_knowledge.defs; "
          "t=time.monotonic(); dagster_instance(w.config); print(time.monotonic()-t)",
        "model_load_s": setup + "e=w.embedder(); e.embed_documents(['warm up']); print(time.monotonic()-t)",
        "duckdb_write_open_s": setup + "c=w.write().__enter__(); print(time.monotonic()-t)",
        "tantivy_open_s": setup.replace("t=time.monotonic(); ", "") + "import gitlab_knowledge.lexical.index as li; "
          "t=time.monotonic(); li.LexicalIndex(w.config.tantivy_dir); print(time.monotonic()-t)",
    }
    out: dict[str, float] = {}
    for name, code in codes.items():
        samples = []
        for _ in range(3):
            if "print(" in code:
                proc = subprocess.run([PY, "-c", code], env=_env(), capture_output=True, text=True, timeout=600)
                if proc.returncode != 0:
                    break
                samples.append(float(proc.stdout.strip().splitlines()[-1]))
            else:
                samples.append(fresh_process(code))
        if samples:
            out[name] = round(statistics.median(samples), 2)
    return out


def write_config(path: Path, url: str, projects: list[str]) -> Path:
    import tomli_w

    path.write_text(tomli_w.dumps({"projects": projects, "gitlab": {"url": url, "rate_limit": 0},
                                   "storage": {"data_dir": str(path.parent / "data")}}), encoding="utf-8")
    return path


def bench(dataset: Path, repeat: int, one_note: bool) -> dict[str, Any]:
    import dagster as dg

    from gitlab_knowledge.config import load_config

    os.environ["GITLAB_TOKEN"] = DEFAULT_TOKEN
    result: dict[str, Any] = {"load_average": [round(x, 2) for x in os.getloadavg()], "repeat": repeat}
    with tempfile.TemporaryDirectory() as tmp, SandboxGitLab(dataset=dataset) as sb:
        projects = [p["path_with_namespace"] for p in sb.state.list_projects(order_by="id", sort="asc")]
        config = write_config(Path(tmp) / "gitlab_knowledge.toml", sb.url, projects)
        wall, first = cli(config)
        result["projects"] = len(projects)
        result["first_sync_s"] = round(wall, 2)
        # The CLI ran in the config's directory (no dagster.yaml there): its instance is the data
        # directory's, whatever directory this benchmark runs from.
        instance = dg.DagsterInstance.from_config(str(load_config(str(config)).dagster_home))
        result["first_sync_runs"] = {k: round(v, 2) for k, v in sum_runs(instance, first["projects"]).items()}
        noop, noop_runs, note, note_runs, batch, batch_runs = [], [], [], [], [], []
        noop_cpu, batch_cpu = [], []
        for i in range(repeat):
            cpu = children_cpu()
            wall, out = cli(config)
            noop_cpu.append(children_cpu() - cpu)
            noop.append(wall)
            noop_runs.append(sum_runs(instance, out["projects"]))
            if one_note:
                project = projects[0]
                issue = sb.state.list_items(project, "issues")[0]
                sb.clock.advance(3600)
                sb.state.add_note(project, "issues", issue["iid"], f"one more note, number {i}")
                wall, out = cli(config, "--project", project)
                note.append(wall)
                note_runs.append(sum_runs(instance, out["projects"]))
                # The same change as the change sensor syncs it: a batch run naming the project.
                sb.clock.advance(3600)
                sb.state.add_note(project, "issues", issue["iid"], f"one more note for the batch, number {i}")
                cpu = children_cpu()
                wall, run_id = batch_process(config, project)
                batch_cpu.append(children_cpu() - cpu)
                batch.append(wall)
                batch_runs.append(batch_breakdown(instance, run_id))
        result["noop_sync_s"] = round(statistics.median(noop), 2)
        result["noop_sync_cpu_s"] = round(statistics.median(noop_cpu), 2)
        result["noop_runs"] = median_dict(noop_runs)
        if one_note:
            result["one_note_sync_s"] = round(statistics.median(note), 2)
            result["one_note_run"] = median_dict(note_runs)
            result["one_note_batch_s"] = round(statistics.median(batch), 2)
            result["one_note_batch_cpu_s"] = round(statistics.median(batch_cpu), 2)
            result["one_note_batch_run"] = median_dict(batch_runs)
        if not one_note:  # many projects: one process per project against one for all
            result.update(per_project_vs_one(sb, config, projects, instance))
        result["outside_runs"] = outside_costs(config)
        result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return result


BATCH_SCRIPT = """
import json, sys, time
from gitlab_knowledge.config import load_config
from gitlab_knowledge.defs import build_defs
from gitlab_knowledge.defs.batch import batch_run_config
from gitlab_knowledge.defs.runner import dagster_instance
from gitlab_knowledge.workspace import Workspace
workspace = Workspace(load_config(sys.argv[1]))
job = build_defs(workspace).resolve_job_def("sync_projects")
result = job.execute_in_process(run_config=batch_run_config([sys.argv[2]]), instance=dagster_instance(workspace.config),
                                tags={"gitlab_knowledge/trigger": "sensor"})
print(json.dumps({"run_id": result.run_id, "success": result.success}))
"""


def batch_process(config: Path, project: str, profile: Path | None = None) -> tuple[float, str]:
    """The change sensor's run for the changed projects (the batch job naming them; several are
    comma-separated), in a new process as the daemon's run worker is: its wall time and run id.
    Any version of the batch job. With `profile`, the process runs under cProfile into that file."""
    started = time.monotonic()
    script = BATCH_SCRIPT.replace("[sys.argv[2]]", "sys.argv[2].split(',')")
    profiled = ["-m", "cProfile", "-o", str(profile)] if profile else []
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(script)
    proc = subprocess.run([PY, *profiled, f.name, str(config), project], cwd=config.parent, env=_env(),
                          capture_output=True, text=True, timeout=1800)
    os.unlink(f.name)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"batch run failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return wall, json.loads(proc.stdout.strip().splitlines()[-1])["run_id"]


def batch_breakdown(instance: Any, run_id: str) -> dict[str, float]:
    """A batch run's breakdown, with the partition runs an older batch started inside it (their
    layers' own time and steps)."""
    import dagster as dg

    out = run_breakdown(instance, run_id)
    for inner in instance.get_runs(dg.RunsFilter(tags={"gitlab_knowledge/batch": run_id})):
        for k, v in run_breakdown(instance, inner.run_id).items():
            if k in ("layers_own_s", "asset_steps_s", "check_steps_s", "steps"):
                out[k] = out.get(k, 0.0) + v
        out["partition_runs"] = out.get("partition_runs", 0.0) + 1
    return out


# The stages of a batch run, by the function whose cumulative time is the stage's (cProfile).
STAGES = {
    "raw fetch (sync/engine.py refresh)": ("gitlab_knowledge/sync/engine.py", "refresh"),
    "  of which waiting on GitLab (event loop select)": ("selectors.py", "select"),
    "  of which project GET + identity": ("gitlab_knowledge/sync/identity.py", "refresh_identity"),
    "normalized": ("gitlab_knowledge/normalized/refresh.py", "refresh"),
    "graph": ("gitlab_knowledge/graph/refresh.py", "refresh"),
    "documents": ("gitlab_knowledge/documents/refresh.py", "refresh"),
    "lexical (all projects)": ("gitlab_knowledge/lexical/refresh.py", "refresh_many"),
    "embeddings (all projects)": ("gitlab_knowledge/embeddings/refresh.py", "refresh_many"),
    "checks (evaluate_partitions)": ("gitlab_knowledge/defs/checks.py", "evaluate_partitions"),
    "store opens (store/db.py _open)": ("gitlab_knowledge/store/db.py", "_open"),
    "the batch step (sync_each_project)": ("gitlab_knowledge/defs/batch.py", "sync_each_project"),
    "the whole run (execute_in_process)": ("dagster/_core/definitions/job_definition.py", "execute_in_process"),
}


def stage_times(profile: Path) -> dict[str, float]:
    """Each stage's cumulative seconds in a cProfile of a batch run (a stage called several times,
    e.g. once per project, is summed; a recursive call is counted once by cProfile)."""
    import pstats

    stats = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]  # the raw table
    out: dict[str, float] = {}
    for stage, (file, name) in STAGES.items():
        out[stage] = round(sum(row[3] for (f, _line, fn), row in stats.items() if fn == name and f.endswith(file)), 2)
    return out


def batch_phases(instance: Any, run_id: str) -> dict[str, float]:
    """A batch run's phases from its event log, in seconds from the step's start: when the last
    project's raw layer, documents layer and embeddings were recorded, when the checks began and
    ended; and each layer's own time summed over the projects (`*duration_s` metadata; the raw
    layer's are each project's fetch, which overlap when fetched concurrently)."""
    import dagster as dg

    start = end = None
    last: dict[str, float] = {}
    own: dict[str, float] = defaultdict(float)
    checks: list[float] = []
    for record in instance.get_records_for_run(run_id, limit=100000).records:
        entry = record.event_log_entry
        event = entry.dagster_event
        if event is None:
            continue
        if event.event_type == dg.DagsterEventType.STEP_START:
            start = entry.timestamp
        elif event.event_type in (dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE):
            end = entry.timestamp
        elif event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION and entry.asset_materialization:
            asset = entry.asset_materialization.asset_key.to_user_string()
            last[asset] = entry.timestamp
            for key, value in entry.asset_materialization.metadata.items():
                if key == "duration_s":
                    own[asset] += float(getattr(value, "value", value))
        elif event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            checks.append(entry.timestamp)
    if start is None or end is None:
        return {}
    out = {f"last {asset} recorded at": round(ts - start, 2) for asset, ts in sorted(last.items(), key=lambda kv: kv[1])}
    if checks:
        out["checks from"], out["checks to"] = round(min(checks) - start, 2), round(max(checks) - start, 2)
    out["step"] = round(end - start, 2)
    out.update({f"{asset} own (sum)": round(v, 2) for asset, v in own.items()})
    return out


def note_batch(count: int, keep: Path | None = None, profiled: bool = True) -> dict[str, Any]:
    """N generated projects synced, a note in each, then the batch run naming them all (profiled,
    unless not `profiled`: cProfile slows Python code, so wall times are taken without it)."""
    import dagster as dg
    import tomli_w  # noqa: F401 - write_config's

    from gitlab_knowledge.config import load_config

    os.environ["GITLAB_TOKEN"] = DEFAULT_TOKEN
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp) / "dataset"
        generate_dataset(dataset, projects=count, issues=3 * count, mrs=count, seed=24, threads_per_parent_mean=1.0)
        with SandboxGitLab(dataset=dataset) as sb:
            projects = [p["path_with_namespace"] for p in sb.state.list_projects(order_by="id", sort="asc")]
            config = write_config(Path(tmp) / "gitlab_knowledge.toml", sb.url, projects)
            first, _ = cli(config)
            load = [round(x, 2) for x in os.getloadavg()]
            touch_all(sb, projects, "one note each")
            profile = (keep or Path(tmp) / "batch.prof") if profiled else None
            cpu = children_cpu()
            wall, run_id = batch_process(config, ",".join(projects), profile)
            cpu = children_cpu() - cpu
            instance = dg.DagsterInstance.from_config(str(load_config(str(config)).dagster_home))
            out = {"projects": len(projects), "first_sync_s": round(first, 1), "batch_wall_s": round(wall, 2),
                   "batch_cpu_s": round(cpu, 2),
                   "load_average": load, "phases_s": batch_phases(instance, run_id)}
            if profile is not None:
                out["stages_s (main thread, cProfile)"] = stage_times(profile)
            return out


def touch_all(sb: SandboxGitLab, projects: list[str], word: str) -> None:
    sb.clock.advance(3600)
    for project in projects:
        issues = sb.state.list_items(project, "issues")
        if issues:
            sb.state.add_note(project, "issues", issues[0]["iid"], f"a note in every project: {word}")


def per_project_vs_one(sb: SandboxGitLab, config: Path, projects: list[str], instance: Any) -> dict[str, Any]:
    """A note in every project, synced by one process per project (what one daemon run per project
    paid), then another note in every project, synced by one process for all of them (the batch)."""
    touch_all(sb, projects, "separately")
    started = time.monotonic()
    outs = [cli(config, "--project", project)[1] for project in projects]
    separate = time.monotonic() - started
    touch_all(sb, projects, "together")
    wall, out = cli(config)
    return {"one_process_per_project_s": round(separate, 2), "one_process_for_all_s": round(wall, 2),
            "per_project_runs": {k: round(v, 2) for k, v in
                                 sum_runs(instance, [p for o in outs for p in o["projects"]]).items()},
            "one_for_all_runs": {k: round(v, 2) for k, v in sum_runs(instance, out["projects"]).items()}}


def print_table(result: dict[str, Any]) -> None:
    print(f"load average {result['load_average']} → {result['load_average_after']}; medians of {result['repeat']}; "
          f"{result['projects']} project(s)")
    print(f"{'first sync (CLI, wall)':44}{result['first_sync_s']:>8.2f} s   runs: {result['first_sync_runs']}")
    print(f"{'no-op sync (CLI, wall)':44}{result['noop_sync_s']:>8.2f} s   CPU {result['noop_sync_cpu_s']:.2f} s")
    for k, v in result["noop_runs"].items():
        print(f"  {'no-op runs: ' + k:42}{v:>8.2f}")
    if "one_note_sync_s" in result:
        print(f"{'one-note sync of one project (CLI, wall)':44}{result['one_note_sync_s']:>8.2f} s")
        for k, v in result["one_note_run"].items():
            print(f"  {'one-note run: ' + k:42}{v:>8.2f}")
        print(f"{'one-note batch run (as the sensor runs it)':44}{result['one_note_batch_s']:>8.2f} s"
              f"   CPU {result['one_note_batch_cpu_s']:.2f} s")
        for k, v in result["one_note_batch_run"].items():
            print(f"  {'one-note batch run: ' + k:42}{v:>8.2f}")
    if "one_process_per_project_s" in result:
        print(f"{'a note in each project, a process per project':44}{result['one_process_per_project_s']:>8.2f} s"
              f"   runs: {result['per_project_runs']}")
        print(f"{'a note in each project, one process for all':44}{result['one_process_for_all_s']:>8.2f} s"
              f"   runs: {result['one_for_all_runs']}")
    for k, v in result["outside_runs"].items():
        print(f"{'new process: ' + k:44}{v:>8.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--generated", type=int, default=0, metavar="N",
                        help="a generated dataset of N small projects instead of the bundled sample")
    parser.add_argument("--note-batch", type=int, default=0, metavar="N",
                        help="N generated projects, a note in each, the batch run naming them all, profiled")
    parser.add_argument("--profile-out", type=Path, help="with --note-batch: keep the cProfile file here")
    parser.add_argument("--no-profile", action="store_true", help="with --note-batch: wall times without cProfile")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--product", type=Path, default=REPO,
                        help="the checkout whose code the measured processes run (an older one, to compare)")
    args = parser.parse_args()
    PRODUCT[0] = args.product.resolve()
    if args.note_batch:
        print(json.dumps(note_batch(args.note_batch, args.profile_out, not args.no_profile), indent=1))
        return 0
    dataset = SAMPLE_DATASET
    with tempfile.TemporaryDirectory() as tmp:
        if args.generated:
            dataset = Path(tmp) / "dataset"
            generate_dataset(dataset, projects=args.generated, issues=4 * args.generated, mrs=2 * args.generated,
                             seed=24, threads_per_parent_mean=2.0)
        result = bench(dataset, args.repeat, one_note=not args.generated)
    print(json.dumps(result) if args.json else "", end="\n" if args.json else "")
    if not args.json:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

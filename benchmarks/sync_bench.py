"""Sync benchmarks: an initial sync against the sandbox, measured against its physical bound.

The bound of a rate-limited sync is calls ÷ rate: no client can make N calls at R per second in
less than N/R seconds. The ratio wall ÷ bound says how much the sync adds on top (page commits,
waiting for the last thread of a page before the next list call, ...).

Run as a subprocess by `python -m benchmarks` (so the rate-limited run has its own interpreter and
its own sandbox process), or by hand:

    python -m benchmarks.sync_bench --dataset DIR --data-dir DIR --rate 10 --latency-ms 50
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gitlab_knowledge.config import parse_config
from gitlab_knowledge_sandbox import DEFAULT_TOKEN


def start_sandbox(dataset: Path, latency_ms: float) -> tuple[subprocess.Popen, str]:
    """A sandbox GitLab in its own process (the sync must not share a GIL with it)."""
    proc = subprocess.Popen([sys.executable, "-m", "gitlab_knowledge_sandbox", "serve", "--data", str(dataset),
                             "--port", "0", "--latency-ms", str(latency_ms)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    url = line.split(" at ", 1)[1].split(" ", 1)[0]
    return proc, url


def sync_projects(url: str, projects: list[str], data_dir: Path, rate: float, concurrency: int) -> dict[str, Any]:
    """The raw layer of the sync job for every project, in-process. `wall_s` is the layer's own time
    (what the bound is about); `run_wall_s` adds Dagster's per-run cost."""
    import dagster as dg

    from gitlab_knowledge.defs.runner import run_sync
    from gitlab_knowledge.sync.stats import RawStats
    from gitlab_knowledge.workspace import Workspace

    os.environ["GITLAB_TOKEN"] = DEFAULT_TOKEN
    config = parse_config({"gitlab": {"url": url, "rate_limit": rate, "concurrency": concurrency},
                           "projects": projects, "storage": {"data_dir": str(data_dir)}}, data_dir, {}, "benchmark")
    started = time.monotonic()
    outcomes = run_sync(Workspace(config), projects, instance=dg.DagsterInstance.ephemeral(),
                        selection=["raw_gitlab_payloads"])
    run_wall = time.monotonic() - started
    failed = [o for o in outcomes if not o.success]
    if failed:
        raise SystemExit(f"{failed[0].project}: {failed[0].message}")
    stats = [o.stats(RawStats) for o in outcomes]
    calls, items = sum(s.api_calls for s in stats), sum(s.items_listed for s in stats)
    wall = sum(s.duration_s for s in stats)
    out = {"wall_s": round(wall, 2), "run_wall_s": round(run_wall, 2), "api_calls": calls,
           "file_list_calls": sum(s.file_calls for s in stats), "items": items,
           "rate": rate, "concurrency": concurrency}
    if rate:
        out["bound_s"] = round(calls / rate, 2)
        out["ratio"] = round(wall / (calls / rate), 4)
    else:
        out["calls_per_s"] = round(calls / wall, 1)
    return out


def run(dataset: Path, data_dir: Path, projects: list[str], *, rate: float, concurrency: int,
        latency_ms: float, repeat_noop: bool = False) -> dict[str, Any]:
    sandbox, url = start_sandbox(dataset, latency_ms)
    try:
        result = {"initial": sync_projects(url, projects, data_dir, rate, concurrency)}
        if repeat_noop:
            result["noop"] = sync_projects(url, projects, data_dir, rate, concurrency)
        return result
    finally:
        sandbox.terminate()
        sandbox.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", required=True, type=Path)
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--noop", action="store_true", help="then a second, no-op incremental sync")
    args = parser.parse_args()
    projects = [p["path_with_namespace"] for p in json.loads((args.dataset / "projects.json").read_text())]
    result = run(args.dataset, args.data_dir, projects, rate=args.rate, concurrency=args.concurrency,
                 latency_ms=args.latency_ms, repeat_noop=args.noop)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

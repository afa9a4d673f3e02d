"""A first `sync` of N generated projects in nested groups (`groups = ["acme"]`) against the same
totals as one project: the wall time of the whole command (every layer, the embedded model), so
what a project costs beyond its data shows. The CLI syncs several projects in one batch run
(defs/batch.py). Issue 24's target is a ratio within 1.2x.

    python -m benchmarks.groups_bench --projects 300 --group-depth 3 --issues 600 --mrs 300 --out DIR [--pairs 3]

Each side runs the CLI in its own process against a sandbox in its own process; `count` (from
`stats --json`) is checked against what the generator wrote. `--purge` then times the purge of one
of the groups' projects on a copy of that store (benchmarks/purge_bench.py). `--latency-ms L` has
both sandboxes answer L ms late: on 127.0.0.1 a call costs only CPU, while across a network each
project's own calls (its listing pages, its project lookup) wait a round trip, which the batch's
projects in flight overlap and one project's sequential pages cannot.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gitlab_knowledge_sandbox import DEFAULT_TOKEN


def _generate(out: Path, name: str, projects: int, depth: int, issues: int, mrs: int, env: dict[str, str]) -> str:
    """The side's dataset, written to `out`/dataset-`name`; what the generator said."""
    return subprocess.run(
        [sys.executable, "-m", "gitlab_knowledge_sandbox", "generate", "--out", str(out / f"dataset-{name}"),
         "--projects", str(projects), "--issues", str(issues), "--mrs", str(mrs), "--seed", "1",
         "--threads-per-parent-mean", "1.0", "--group-depth", str(depth)],
        check=True, env=env, capture_output=True, text=True).stdout.strip()


def _run(out: Path, name: str, depth: int, env: dict[str, str], latency_ms: float = 0.0) -> dict[str, Any]:
    """A first sync of the side's dataset into a new home (`out`/home-`name`, emptied first)."""
    dataset = out / f"dataset-{name}"
    home = out / f"home-{name}"
    shutil.rmtree(home, ignore_errors=True)
    server = subprocess.Popen([sys.executable, "-m", "gitlab_knowledge_sandbox", "serve", "--data", str(dataset),
                               "--port", "0", "--latency-ms", str(latency_ms)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split(" at ", 1)[1].split(" ", 1)[0]
        home.mkdir(parents=True, exist_ok=True)
        chosen = 'groups = ["acme"]' if depth else 'projects = ["acme/platform-api"]'
        (home / "gitlab_knowledge.toml").write_text(
            f'{chosen}\n[gitlab]\nurl = "{url}"\nrate_limit = 0\n[storage]\ndata_dir = "data"\n', encoding="utf-8")
        started = time.monotonic()
        synced = subprocess.run([sys.executable, "-m", "gitlab_knowledge", "sync", "--json"], cwd=home, env=env,
                                capture_output=True, text=True)
        wall = time.monotonic() - started
    finally:
        server.terminate()
        server.wait(timeout=30)
    if synced.returncode:
        raise SystemExit(f"{name}: sync exited {synced.returncode}: {synced.stderr.strip()[-500:]}")
    runs = json.loads(synced.stdout)["projects"]
    stats = json.loads(subprocess.run([sys.executable, "-m", "gitlab_knowledge", "stats", "--json"], cwd=home, env=env,
                                      capture_output=True, text=True, check=True).stdout)
    wrote = {kind: sum(1 for f in (dataset / "projects").glob(f"*/{kind}.jsonl") for line in f.open() if line.strip())
             for kind in ("issues", "merge_requests")}
    counted = {kind: stats["totals"][kind] for kind in wrote}
    if counted != wrote:
        raise SystemExit(f"{name}: the store counts {counted}, the dataset holds {wrote}")
    return {"projects": len(runs), "wall_s": round(wall, 1), "count_equals_dataset": wrote,
            "runs_s": round(sum(r["duration_s"] for r in runs), 1),
            "fetch_s": round(sum(r["sync_s"] or 0 for r in runs), 1),
            "documents": sum(p["documents"] for p in stats["projects"]), "totals": stats["totals"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.groups_bench")
    parser.add_argument("--projects", type=int, default=300)
    parser.add_argument("--group-depth", type=int, default=3)
    parser.add_argument("--issues", type=int, default=600)
    parser.add_argument("--mrs", type=int, default=300)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--latency-ms", type=float, default=0.0,
                        help="each sandbox answer this much later: a GitLab across a network, not on 127.0.0.1")
    parser.add_argument("--purge", action="store_true", help="then time a purge of one project (purge_bench)")
    parser.add_argument("--pairs", type=int, default=1,
                        help="sync both sides this many times, alternating which goes first; the ratio is the "
                             "median of the pairs' (the machine's speed drifts between minutes)")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error(f"--pairs: a whole number of at least 1, got {args.pairs}")
    env = {**os.environ, "GITLAB_TOKEN": DEFAULT_TOKEN}
    env.pop("DAGSTER_HOME", None)
    generated = {"groups": _generate(args.out, "groups", args.projects, args.group_depth, args.issues, args.mrs, env),
                 "one_project": _generate(args.out, "one", 1, 0, args.issues, args.mrs, env)}
    sides = {"groups": ("groups", args.group_depth), "one_project": ("one", 0)}
    result: dict[str, Any] = {"latency_ms": args.latency_ms, "pairs": []}
    for pair in range(args.pairs):
        # Each side goes first in every other pair, so a drift of the machine's speed during a
        # pair does not always favour the same side.
        order = ["groups", "one_project"] if pair % 2 == 0 else ["one_project", "groups"]
        for side in order:
            name, depth = sides[side]
            result[side] = {"generated": generated[side], **_run(args.out, name, depth, env, args.latency_ms)}
        result["pairs"].append({"groups_s": result["groups"]["wall_s"], "one_project_s": result["one_project"]["wall_s"],
                                "ratio": round(result["groups"]["wall_s"] / result["one_project"]["wall_s"], 2)})
    result["ratio"] = round(statistics.median(p["ratio"] for p in result["pairs"]), 2)
    result["load_average"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps(result, indent=1))
    print(table(result))
    if args.purge:
        from benchmarks import purge_bench

        print(purge_bench.table(purge_bench.measure(args.out / "home-groups" / "gitlab_knowledge.toml", behind=30.0)))
    return 0


def table(result: dict[str, Any]) -> str:
    """The two sides as a Markdown table (what docs/ARCHITECTURE.md quotes)."""
    rows = ["| | projects | documents | wall s | layers s | fetch s |", "|---|---:|---:|---:|---:|---:|"]
    for name in ("groups", "one_project"):
        r = result[name]
        rows.append(f"| {name} | {r['projects']} | {r['documents']} | {r['wall_s']} | {r['runs_s']} | {r['fetch_s']} |")
    latency = f", sandbox latency {result['latency_ms']:g} ms" if result.get("latency_ms") else ""
    pairs = result.get("pairs") or []
    if len(pairs) > 1:
        each = "; ".join(f"{p['groups_s']} / {p['one_project_s']} s = {p['ratio']}x" for p in pairs)
        rows.append(f"\nmedian ratio {result['ratio']}x of {len(pairs)} pairs ({each}; the table shows the last) "
                    f"(load average {result['load_average']}{latency})")
    else:
        rows.append(f"\nratio {result['ratio']}x (load average {result['load_average']}{latency})")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())

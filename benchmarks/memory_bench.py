"""Peak memory of a sync that meets one very long issue description, layer by layer.

The bundled sample's acme/platform is synced once (every layer but the embeddings, whose peak is
the model's and whose text is bounded per document); then, for each size, one issue's description
is replaced by SIZE MB of text in the sandbox and each layer of the incremental sync runs in a
process of its own, whose peak RSS (`ru_maxrss`) is reported, with that of a process that only
loads the pipeline (the floor). The sandbox serves from this process, so its copies of the text
are not counted.

    python -m benchmarks.memory_bench [--sizes 10,40,120] [--json]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab

PROJECT = "acme/platform"
TOKEN_ENV = "GITLAB_TOKEN"


def text_of(size_mb: int) -> str:
    """SIZE MB of prose-like ASCII text with references and paths, as a pasted log would be."""
    line = ("Step {n}: the session cache in services/auth/session_cache.py timed out after 30 s "
            "while refreshing tokens for tenant {n}; see #12 and !34 for the retry policy.\n")
    out, size, n = [], 0, 0
    target = size_mb * 2**20
    while size < target:
        chunk = line.format(n=n)
        out.append(chunk)
        size += len(chunk)
        n += 1
    return "".join(out)[:target]


def write_config(path: Path, url: str, data_dir: Path) -> None:
    path.write_text(f'projects = ["{PROJECT}"]\n[gitlab]\nurl = "{url}"\nrate_limit = 0\n'
                    f'[storage]\ndata_dir = "{data_dir}"\n')


LAYERS = ("raw_gitlab_payloads", "normalized_gitlab", "knowledge_graph", "search_documents", "lexical_index")


def child(config: str, layer: str) -> None:
    """In the measured process: run `layer` ("none": only load the pipeline) and print the peak."""
    import resource

    import dagster as dg

    from gitlab_knowledge.defs.runner import run_sync
    from gitlab_knowledge.workspace import Workspace

    workspace = Workspace.load(config)
    if layer != "none":
        selection = list(LAYERS) if layer == "all" else [layer]
        outcome, = run_sync(workspace, [PROJECT], instance=dg.DagsterInstance.ephemeral(), selection=selection)
        if not outcome.success:
            raise SystemExit(f"{layer}: {outcome.message}")
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)


def peak_rss(config: Path, layer: str) -> int:
    """Peak RSS in MB of a process that runs one layer of the sync."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITLAB", "DAGSTER_HOME", "OLLAMA"))}
    env.update({TOKEN_ENV: DEFAULT_TOKEN, "NO_COLOR": "1"})
    done = subprocess.run([sys.executable, "-m", "benchmarks.memory_bench", "--child", str(config), layer],
                          env=env, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def measure(sizes: list[int]) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="gk-membench-") as tmp, SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        base = Path(tmp)
        config = base / "gitlab_knowledge.toml"
        write_config(config, sb.url, base / "data")
        peak_rss(config, "all")
        floor = peak_rss(config, "none")
        issue = sb.state.list_items(PROJECT, "issues")[0]["iid"]
        for size in sizes:
            sb.clock.advance(3600)
            t0 = time.monotonic()
            sb.state.update_issue(PROJECT, issue, description=text_of(size))
            row: dict[str, Any] = {"description_mb": size, "floor_mb": floor}
            row.update({layer: peak_rss(config, layer) for layer in LAYERS})
            row["seconds"] = round(time.monotonic() - t0, 1)
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,40,120", help="description sizes in MB, comma-separated")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("CONFIG", "LAYER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    rows = measure([int(s) for s in args.sizes.split(",")])
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("| description | " + " | ".join(LAYERS) + " |\n| ---: |" + " ---: |" * len(LAYERS))
    for r in rows:
        print(f"| {r['description_mb']} MB | " + " | ".join(f"{r[layer]} MB" for layer in LAYERS) + " |")
    print(f"(peak RSS of a process per layer; one that only loads the pipeline: {rows[0]['floor_mb']} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

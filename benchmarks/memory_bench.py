"""Peak memory of a sync that meets one very long issue description.

The bundled sample is synced once (the baseline row); then, for each size, a copy of that store
syncs incrementally after one issue's description was replaced by SIZE MB of text in the sandbox.
Each sync is `python -m gitlab_knowledge sync --project acme/platform` in a process of its own, and
its peak RSS is what the kernel recorded for it (`wait4`'s ru_maxrss). The sandbox serves from this
process, so its own copies of the text are not counted.

    python -m benchmarks.memory_bench [--sizes 10,40,120] [--json]
"""

import argparse
import json
import os
import shutil
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


def sync_peak_rss(config: Path, workdir: Path) -> tuple[int, float, int]:
    """(exit code, seconds, peak RSS in MB) of one `sync` in its own process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITLAB", "DAGSTER_HOME", "OLLAMA"))}
    env.update({TOKEN_ENV: DEFAULT_TOKEN, "NO_COLOR": "1"})
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "gitlab_knowledge", "--config", str(config), "sync", "--project",
                             PROJECT], cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        print(err.decode(errors="replace")[-2000:], file=sys.stderr)
    return proc.returncode, round(time.monotonic() - t0, 1), usage.ru_maxrss // 1024


def measure(sizes: list[int]) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="gk-membench-") as tmp, SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        base = Path(tmp)
        config = base / "base.toml"
        write_config(config, sb.url, base / "base-data")
        code, seconds, peak = sync_peak_rss(config, base)
        rows.append({"description_mb": 0, "exit_code": code, "seconds": seconds, "peak_rss_mb": peak})
        issue = sb.state.list_items(PROJECT, "issues")[0]["iid"]
        for size in sizes:
            data = base / f"data-{size}"
            shutil.copytree(base / "base-data", data)
            config = base / f"{size}.toml"
            write_config(config, sb.url, data)
            sb.clock.advance(3600)
            sb.state.update_issue(PROJECT, issue, description=text_of(size))
            code, seconds, peak = sync_peak_rss(config, base)
            rows.append({"description_mb": size, "exit_code": code, "seconds": seconds, "peak_rss_mb": peak})
            shutil.rmtree(data)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,40,120", help="description sizes in MB, comma-separated")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = measure([int(s) for s in args.sizes.split(",")])
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print("| description | exit | sync s | peak RSS |\n| ---: | ---: | ---: | ---: |")
        for r in rows:
            label = f"{r['description_mb']} MB" if r["description_mb"] else "none (first sync)"
            print(f"| {label} | {r['exit_code']} | {r['seconds']} | {r['peak_rss_mb']} MB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m benchmarks`: the numbers that decide what to fix next, as a table and as JSON.

1. Sync against the sandbox with 50 ms latency: the sample dataset and a generated one (10K
   issues + MRs with threads, ~100K documents) at 10 req/s, wall vs the bound calls ÷ rate; the
   same dataset with the rate limit off and concurrency 8; then a no-op incremental sync.
2. The layers on that store: normalize, documents, lexical index, vectors (feature-hashing
   stand-in, see hashing_provider.py), and disk use per layer per 1K documents.
3. Search at ~100K documents: p50/p95 per mode excluding and including query embedding, peak RSS.
4. Embedding: the bare model vs the pipeline on the same documents.
5. The search command end to end, a new process per query as a user or agent runs it, on the
   sample store; and `import lancedb` plain vs with its namespace client deferred.

The 10 req/s sync is bounded at ~12 minutes by construction, so it runs in its own processes
(sandbox + client) beside everything else; the whole command takes about as long as it does.
"""

import argparse
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import time
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks import embed_bench, sync_bench
from benchmarks.hashing_provider import HashingProvider
from benchmarks.report import markdown_table
from gitlab_knowledge.config import parse_config
from gitlab_knowledge.defs.runner import run_sync
from gitlab_knowledge.documents.refresh import DocumentStats
from gitlab_knowledge.embeddings.refresh import EmbedStats
from gitlab_knowledge.index_status import dir_size
from gitlab_knowledge.lexical.refresh import LexicalStats
from gitlab_knowledge.normalized.refresh import NormalizeStats
from gitlab_knowledge.store.db import read_connection
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import SAMPLE_DATASET, generate_dataset

REPO = Path(__file__).resolve().parents[1]


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, round(time.perf_counter() - t0, 2)


def projects_of(dataset: Path) -> list[str]:
    return [p["path_with_namespace"] for p in json.loads((dataset / "projects.json").read_text())]


def queries_from(dataset: Path, n: int, seed: int) -> list[str]:
    """Titles (natural language), identifiers in backticks, and two-word fragments."""
    rng = random.Random(seed)
    titles = []
    for path in sorted(dataset.glob("projects/*/*.jsonl")):
        if path.name in ("issues.jsonl", "merge_requests.jsonl"):
            titles += [json.loads(line)["title"] for line in path.open()]
    rng.shuffle(titles)
    idents = [m for t in titles for m in re.findall(r"`([^`]+)`", t)]
    words = [w for t in titles[:500] for w in re.findall(r"[a-z]{5,}", t.lower())]
    out = titles[: int(n * 0.7)] + idents[: int(n * 0.15)]
    while len(out) < n:
        out.append(f"{rng.choice(words)} {rng.choice(words)}")
    return out[:n]


def run_layers(config: Any, projects: list[str], layers: list[str], provider: Any = None) -> list[Any]:
    """The sync job's `layers` for each project, in-process (an in-memory Dagster instance)."""
    import dagster as dg

    factories = {"embedder_factory": lambda _c, _p=None, _m=None: provider} if provider is not None else {}
    outcomes = run_sync(Workspace(config, **factories), projects, instance=dg.DagsterInstance.ephemeral(),
                        selection=layers)
    failed = [o for o in outcomes if not o.success]
    if failed:
        raise SystemExit(f"{failed[0].project}: {failed[0].message}")
    return outcomes


def build_layers(config: Any, projects: list[str]) -> dict[str, float]:
    """Each layer's own time (what it reports), summed over the projects, from one run of the job."""
    outcomes = run_layers(config, projects, ["normalized_gitlab", "search_documents", "lexical_index",
                                             "document_embeddings"], provider=HashingProvider())
    times = {"normalize_s": NormalizeStats, "documents_s": DocumentStats, "lexical_s": LexicalStats,
             "vectors_stand_in_s": EmbedStats}
    return {name: round(sum(o.stats(kind).duration_s for o in outcomes), 2) for name, kind in times.items()}


def disk(config: Any) -> dict[str, Any]:
    """Disk use once LanceDB has dropped superseded versions: what a store settles to 10 minutes
    after a sync (right after a build every rewritten fragment is still on disk)."""
    import lancedb

    db = lancedb.connect(str(config.lancedb_dir))
    with warnings.catch_warnings():  # "removes every version": intended, nothing else has it open
        warnings.simplefilter("ignore", UserWarning)
        for name in db.list_tables(limit=1000).tables:
            db.open_table(name).optimize(cleanup_older_than=timedelta(0))
    with read_connection(config.duckdb_path) as con:
        documents = con.execute("SELECT count(*) FROM documents").fetchone()[0]
    sizes = {"duckdb": dir_size(config.duckdb_path), "lancedb": dir_size(config.lancedb_dir),
             "tantivy": dir_size(config.tantivy_dir)}
    return {"documents": documents, **{f"{k}_mb": round(v / 1e6, 1) for k, v in sizes.items()},
            **{f"{k}_mb_per_1k_docs": round(v / 1e6 / documents * 1000, 2) for k, v in sizes.items()}}


CLI_QUERY = "why did we choose redis"


def cli_search(sample: Any, workdir: Path, runs: int = 7) -> dict[str, Any]:
    """Median wall time of `python -m gitlab_knowledge.search` (new process each run, embedded
    model) on the sample store, and what importing lancedb costs with and without the deferral."""
    import statistics

    run_layers(sample, sample.projects, ["lexical_index", "document_embeddings"])
    config_path = workdir / "sample.toml"
    config_path.write_text(f'projects = {json.dumps(sample.projects)}\n[gitlab]\nurl = "http://127.0.0.1:9"\n'
                           f'[storage]\ndata_dir = {json.dumps(str(sample.data_dir))}\n')
    walls, took = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "gitlab_knowledge.search", CLI_QUERY, "--limit", "3", "--json",
                              "--config", str(config_path)], capture_output=True, text=True, cwd=REPO, check=True)
        walls.append(time.perf_counter() - t0)
        took.append(json.loads(out.stdout)["took_ms"])
    imports = {}
    for name, code in (("plain", "import lancedb"),
                       ("deferred", "from gitlab_knowledge.embeddings.lance_import import import_lancedb; import_lancedb()")):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
            times.append(time.perf_counter() - t0)
        imports[name] = round(statistics.median(times), 2)
    return {"runs": runs, "wall_s_p50": round(statistics.median(walls), 2),
            "took_ms_p50": round(statistics.median(took)), "python_with_lancedb_import_s": imports}


def table(results: dict[str, Any]) -> str:
    r = results
    rows = [("what", "result")]
    s, big = r["sync"]["sample_10rps"], r["sync"]["generated_10rps"]
    rows.append(("sample sync, 10 req/s, 50 ms latency",
                 f"{s['api_calls']} calls, {s['wall_s']} s, bound {s['bound_s']} s, ratio {s['ratio']}"))
    rows.append((f"generated sync ({r['items']:,} issues+MRs), 10 req/s, 50 ms",
                 f"{big['api_calls']:,} calls, {big['wall_s']} s, bound {big['bound_s']} s, ratio {big['ratio']} "
                 f"({big['items'] - r['items']} items listed twice at page anchors)"))
    u, noop = r["sync"]["generated_unlimited"]["initial"], r["sync"]["generated_unlimited"]["noop"]
    rows.append(("same, rate limit off, concurrency 8", f"{u['api_calls']:,} calls, {u['wall_s']} s "
                                                        f"({u['calls_per_s']} calls/s)"))
    rows.append(("no-op incremental sync", f"{noop['api_calls']} calls, {noop['wall_s']} s"))
    layers = r["layers"]
    rows.append(("layers on the generated store", ", ".join(f"{k.removesuffix('_s')} {v} s" for k, v in layers.items())))
    d = r["disk"]
    rows.append((f"disk at {d['documents']:,} documents", f"DuckDB {d['duckdb_mb']} MB, LanceDB {d['lancedb_mb']} MB, "
                                                          f"Tantivy {d['tantivy_mb']} MB"))
    rows.append(("disk per 1K documents", f"DuckDB {d['duckdb_mb_per_1k_docs']} MB, LanceDB "
                                          f"{d['lancedb_mb_per_1k_docs']} MB, Tantivy {d['tantivy_mb_per_1k_docs']} MB"))
    q = r["search"]
    for mode in ("lexical", "semantic", "hybrid"):
        m = q[mode]
        rows.append((f"search {mode} ({q['queries']} queries, warm)",
                     f"p50 {m['p50']} ms, p95 {m['p95']} ms; with query embedding p50 {m['p50_with_embedding']} ms, "
                     f"p95 {m['p95_with_embedding']} ms"))
    rows.append(("search hybrid, one-shot path (LanceDB scan)", f"p50 {q['hybrid_one_shot']['p50']} ms, "
                                                                f"p95 {q['hybrid_one_shot']['p95']} ms, peak RSS "
                                                                f"{q['hybrid_one_shot']['peak_rss_mb']} MB"))
    rows.append(("query embedding (embedded model)", f"p50 {q['embed_query_ms']['p50']} ms, "
                                                     f"p95 {q['embed_query_ms']['p95']} ms"))
    rows.append(("warm search process peak RSS", f"{q['peak_rss_mb']} MB, model included "
                                                 f"(vectors loaded in {q['warm_load_s']} s)"))
    for name, e in r["embedding"].items():
        rows.append((f"embedding, {name} ({e['documents']:,} docs, {e['chunks']:,} windows)",
                     f"bare {e['bare_docs_per_s']} docs/s, pipeline {e['pipeline_docs_per_s']} docs/s, "
                     f"overhead {e['overhead_pct']}%"))
    c = r["cli_search"]
    rows.append((f"search command, new process per query (sample store, {c['runs']} runs)",
                 f"wall p50 {c['wall_s_p50']} s, reported took p50 {c['took_ms_p50']} ms; a Python that imports "
                 f"lancedb {c['python_with_lancedb_import_s']['plain']} s plain, "
                 f"{c['python_with_lancedb_import_s']['deferred']} s with the namespace client deferred"))
    return markdown_table(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--issues", type=int, default=5000)
    parser.add_argument("--mrs", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=240)
    parser.add_argument("--embed-docs", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--workdir", type=Path, default=REPO / "benchmarks" / "results" / "work")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    started = time.monotonic()
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    log = print
    dataset = args.workdir / "dataset"
    summary, seconds = timed(generate_dataset, dataset, projects=2, issues=args.issues, mrs=args.mrs, seed=0)
    log(f"generated: {summary.line()} ({seconds} s)")
    projects = projects_of(dataset)
    results: dict[str, Any] = {"date": datetime.now(UTC).isoformat(timespec="seconds"),
                               "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
                               "dataset": summary.line(), "items": args.issues + args.mrs, "sync": {}}

    log("sync: the sample dataset at 10 req/s ...")
    results["sync"]["sample_10rps"] = sync_bench.run(SAMPLE_DATASET, args.workdir / "sample-data", projects_of(SAMPLE_DATASET),
                                                     rate=args.rate, concurrency=4, latency_ms=args.latency_ms)["initial"]
    log("sync: the generated dataset at 10 req/s, in the background ...")
    background = subprocess.Popen([sys.executable, "-m", "benchmarks.sync_bench", "--dataset", str(dataset),
                                   "--data-dir", str(args.workdir / "rate-limited-data"), "--rate", str(args.rate),
                                   "--concurrency", "4", "--latency-ms", str(args.latency_ms)],
                                  stdout=subprocess.PIPE, text=True, cwd=REPO)
    log("sync: the generated dataset, rate limit off, concurrency 8 ...")
    data = args.workdir / "data"
    results["sync"]["generated_unlimited"] = sync_bench.run(dataset, data, projects, rate=0, concurrency=8,
                                                            latency_ms=args.latency_ms, repeat_noop=True)
    config = parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": projects,
                           "storage": {"data_dir": str(data)}}, data, {}, "benchmark")
    log("layers: normalize, documents, lexical, vectors ...")
    results["layers"] = build_layers(config, projects)
    results["disk"] = disk(config)
    log("search ...")
    queries = args.workdir / "queries.json"
    queries.write_text(json.dumps(queries_from(dataset, args.queries, seed=1)))
    phases = {}
    for phase in ("warm", "one-shot"):
        search = subprocess.run([sys.executable, "-m", "benchmarks.search_bench", "--data-dir", str(data), "--queries",
                                 str(queries), "--projects", ",".join(projects), "--phase", phase],
                                capture_output=True, text=True, cwd=REPO)
        if search.returncode:
            raise SystemExit(search.stderr[-3000:])
        phases[phase] = json.loads(search.stdout.strip().splitlines()[-1])
    results["search"] = {**phases["warm"], "hybrid_one_shot": phases["one-shot"]}
    log("embedding ...")
    sample = parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": projects_of(SAMPLE_DATASET),
                           "storage": {"data_dir": str(args.workdir / "sample-data")}}, args.workdir, {}, "benchmark")
    run_layers(sample, sample.projects, ["normalized_gitlab", "search_documents"])
    results["embedding"] = {
        "sample dataset": embed_bench.run(sample.duckdb_path, None, None, args.workdir / "embed-sample"),
        "generated": embed_bench.run(config.duckdb_path, projects[0], args.embed_docs, args.workdir / "embed-generated"),
    }
    log("search command end to end ...")
    results["cli_search"] = cli_search(sample, args.workdir)
    log("waiting for the 10 req/s sync ...")
    out, _ = background.communicate()
    results["sync"]["generated_10rps"] = json.loads(out.strip().splitlines()[-1])["initial"]
    results["total_s"] = round(time.monotonic() - started, 1)
    report = table(results)
    print("\n" + report + f"\n\n{results['date']} · {results['machine']} · {results['total_s']} s")
    path = args.out or REPO / "benchmarks" / "results" / f"benchmark-{results['date'][:10]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str))
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

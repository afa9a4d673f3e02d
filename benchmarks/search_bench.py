"""Search latency at scale, in its own process (so its peak RSS is its own).

The vector table was filled by the feature-hashing stand-in (see hashing_provider.py): latency
depends on the table's size and dimensions, not on the model. Query embedding is therefore
measured apart, with the real embedded model on the same queries, and reported both ways:
"excluding query embedding" (the search itself) and "with it" (search + the real model's time).

    python -m benchmarks.search_bench --data-dir DIR --queries FILE
"""

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

from gitlab_knowledge.config import parse_config
from gitlab_knowledge.embeddings.embedded import EmbeddedProvider
from gitlab_knowledge.workspace import Workspace


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def peak_rss_mb() -> float:
    """This process's own peak RSS. Linux keeps ru_maxrss across exec, so a child started by a
    parent that once held more reports the parent's peak; VmHWM belongs to this process alone."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--queries", required=True, type=Path)
    parser.add_argument("--projects", required=True)
    parser.add_argument("--phase", choices=("warm", "one-shot"), default="warm",
                        help="each phase in its own process, so each peak RSS is its own")
    args = parser.parse_args()
    queries = json.loads(args.queries.read_text())
    config = parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": args.projects.split(","),
                           "storage": {"data_dir": str(args.data_dir)}}, args.data_dir, {}, "benchmark")
    if args.phase == "one-shot":
        # The configured model embeds the queries; its time is taken out below.
        cold = Workspace(config).searcher()
        cold_ms = []
        for q in queries[:60]:
            response = cold.search(q, mode="hybrid", limit=10)
            cold_ms.append(response.took_ms - response.embed_ms)
        print(json.dumps({"p50": pct(cold_ms, 0.5), "p95": pct(cold_ms, 0.95), "queries": len(cold_ms),
                          "peak_rss_mb": peak_rss_mb()}))
        return 0
    model = EmbeddedProvider()
    model.check()
    embed_ms = []
    for q in queries:
        t0 = time.perf_counter()
        model.embed_query(q)
        embed_ms.append((time.perf_counter() - t0) * 1000)
    out: dict = {"queries": len(queries), "embed_query_ms": {"p50": pct(embed_ms, 0.5), "p95": pct(embed_ms, 0.95)}}
    warm = Workspace(config).searcher(warm=True)
    t0 = time.perf_counter()
    warm.search(queries[0], mode="semantic")
    out["warm_load_s"] = round(time.perf_counter() - t0, 2)
    for mode in ("lexical", "semantic", "hybrid"):
        for q in queries[:5]:
            warm.search(q, mode=mode)
        search_ms = []
        for q in queries:
            response = warm.search(q, mode=mode, limit=10)
            search_ms.append(response.took_ms - response.embed_ms)
        with_embed = search_ms if mode == "lexical" else [s + e for s, e in zip(search_ms, embed_ms, strict=True)]
        out[mode] = {"p50": pct(search_ms, 0.5), "p95": pct(search_ms, 0.95),
                     "p50_with_embedding": pct(with_embed, 0.5), "p95_with_embedding": pct(with_embed, 0.95)}
    out["peak_rss_mb"] = peak_rss_mb()
    out["median_hits"] = statistics.median(len(warm.search(q, mode="hybrid").results) for q in queries[:20])
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

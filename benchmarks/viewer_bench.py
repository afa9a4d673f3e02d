"""A shared server's search with a viewer's lens on against the same search without it.

    python -m benchmarks.viewer_bench --data-dir DIR [--queries 200]

In-process, through the MCP `search` tool's own handler on the server's resident (warm) searcher,
so the numbers hold what a viewer adds per call: the scope look-up (mcp/context.py: cached per store
version, read from the viewer's DuckDB lens the first time), the scope pushed into both retrievers
(search/filters.py `Filters.scope`) and the fused ranking. Two viewers: a guest of the first
project, a private one, who also reads the second as a public project (every project in the scope,
both guarded: confidential documents and internal threads out; the first project's merge requests
out too) and a reporter of the first project only (a
project clause in every retriever). The three runs (no viewer, each viewer) are back to back per
query, their order rotating, so a loaded machine loads them alike; the load average is reported
at the start and the end. The DIR is a benchmark store
(`python -m benchmarks` or `benchmarks.mcp_bench` builds one).
"""

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from gitlab_knowledge.config import parse_config
from gitlab_knowledge.mcp.asking import asking_as
from gitlab_knowledge.mcp.resident import Resident
from gitlab_knowledge.mcp.tools import search
from gitlab_knowledge.store.db import read_connection
from gitlab_knowledge.viewer import GUEST, NO_ACCESS, REPORTER, Viewer


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    with read_connection(args.data_dir / "gitlab_knowledge.duckdb", 30) as con:
        projects = con.execute("SELECT id, path_with_namespace FROM projects ORDER BY id").fetchall()
        documents = con.execute("SELECT count(*) FROM documents").fetchone()[0]
        titles = [r[0] for r in con.execute(
            "SELECT title FROM documents WHERE source_type <> 'discussion' AND title IS NOT NULL "
            f"ORDER BY hash(id) LIMIT {args.queries}").fetchall()]
    config = parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": [p for _, p in projects],
                           "storage": {"data_dir": str(args.data_dir)}}, args.data_dir, {}, "benchmark")
    viewers: dict[str, Viewer | None] = {
        "lens_off": None,
        "guest_of_all": Viewer(990001, "bench.guest",
                               access={projects[0][0]: GUEST, **{pid: NO_ACCESS for pid, _ in projects[1:]}},
                               visibility={projects[0][0]: "private", **{pid: "public" for pid, _ in projects[1:]}}),
        "reporter_of_one": Viewer(990002, "bench.reporter", access={projects[0][0]: REPORTER}),
    }
    resident = Resident(config, local_socket=False)
    load_start = os.getloadavg()
    resident.search.start_warming()
    assert resident.search._warming is not None
    resident.search._warming.join()
    context = resident.context

    def run(query: str, viewer: Viewer | None, mode: str) -> tuple[float, float]:
        """(the handler's wall ms, the engine's own ms without query embedding)."""
        with asking_as(viewer):
            t0 = time.perf_counter()
            _text, out = asyncio.run(search(context, {"query": query, "mode": mode, "limit": 10}))
            wall = (time.perf_counter() - t0) * 1000
        return wall, out["took_ms"] - out.get("embed_ms", 0.0)

    out: dict[str, Any] = {"documents": documents, "queries": len(titles), "first_scope_ms": {}, "scope": {}}
    for name, viewer in viewers.items():
        if viewer is None:
            continue
        t0 = time.perf_counter()
        with asking_as(viewer):
            scope = context.filters().scope
        out["first_scope_ms"][name] = round((time.perf_counter() - t0) * 1000, 1)  # the lens built, the scope read
        assert scope is not None
        out["scope"][name] = {"projects": len(scope.projects), "guarded": len(scope.guarded),
                              "allowed": len(scope.allowed), "no_merge_requests": len(scope.no_merge_requests)}
    names = list(viewers)
    for mode in ("hybrid", "lexical"):
        for q in titles[:5]:
            for viewer in viewers.values():
                run(q, viewer, mode)
        timings: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        for i, q in enumerate(titles):
            for name in names[i % len(names):] + names[:i % len(names)]:
                timings[name].append(run(q, viewers[name], mode))
        row: dict[str, Any] = {}
        for name in names:
            walls = [w for w, _ in timings[name]]
            engine = [e for _, e in timings[name]]
            row[name] = {"wall_p50": pct(walls, 0.5), "wall_p95": pct(walls, 0.95),
                         "engine_p50": pct(engine, 0.5), "engine_p95": pct(engine, 0.95)}
            if name != "lens_off":
                row[name]["paired_wall_diff_p50"] = round(statistics.median(
                    on[0] - off[0] for off, on in zip(timings["lens_off"], timings[name], strict=True)), 2)
                row[name]["paired_engine_diff_p50"] = round(statistics.median(
                    on[1] - off[1] for off, on in zip(timings["lens_off"], timings[name], strict=True)), 2)
        out[mode] = row
    out["load_average"] = {"start": [round(x, 1) for x in load_start], "end": [round(x, 1) for x in os.getloadavg()]}
    resident.stop()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

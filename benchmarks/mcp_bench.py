"""The MCP server as an agent meets it: a real SDK client over stdio, against ~100K documents.

    python -m benchmarks.mcp_bench [--data-dir DIR] [--issues 5000 --mrs 5000] [--queries 200]
                                   [--tools me,file_history]

Without `--data-dir` it builds the store the main benchmark builds (`python -m benchmarks`): a
generated dataset synced from the sandbox with the rate limit off, every layer run, the vector
table filled by the feature-hashing stand-in (benchmarks/hashing_provider.py). With one, it uses
that store (`benchmarks/results/work/data` after `python -m benchmarks`). The server embeds queries
with the real embedded model either way, so search latency includes real query embedding.

Measured: process start to the first `search` answer; `search` (hybrid) p50/p95 per call through
the client, protocol and query embedding included, once the vectors are in memory;
`gitlab_get_mr_comments` and `get_merge_request` from the store; the same searches and MR comments
over Streamable HTTP beside stdio, with a 404 for the transport alone; the graph tools (`related` per
MR, `file_history` per reviewed path, `me` and `person` per MR author) on what the store's graph
holds; `list_items` over label, assignee, participant and path filters; `similar` per MR; the
server's peak RSS; and the search command's wall time per call, a new process each time, with the
server running and without. `--tools` measures only those tools (the first search, which starts
the server's vectors loading, still comes first), without the search command's and HTTP's rows.
"""

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.report import markdown_table
from gitlab_knowledge.config import load_config
from gitlab_knowledge.search.resident_client import server_status
from gitlab_knowledge.store.db import read_connection

REPO = Path(__file__).resolve().parents[1]
CLI_QUERY = "why did we choose redis"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def build_store(workdir: Path, issues: int, mrs: int) -> Path:
    """The main benchmark's store: generated, synced (rate limit off), every layer, stand-in vectors."""
    from benchmarks import sync_bench
    from benchmarks.__main__ import build_layers, projects_of
    from gitlab_knowledge.config import parse_config
    from gitlab_knowledge_sandbox import generate_dataset

    dataset, data = workdir / "dataset", workdir / "data"
    summary = generate_dataset(dataset, projects=2, issues=issues, mrs=mrs, seed=0)
    print(f"generated: {summary.line()}", flush=True)
    projects = projects_of(dataset)
    sync_bench.run(dataset, data, projects, rate=0, concurrency=8, latency_ms=0)
    config = parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": projects,
                           "storage": {"data_dir": str(data)}}, data, {}, "benchmark")
    print(f"layers: {build_layers(config, projects)}", flush=True)
    # The graph tools answer from the knowledge graph (links, file lists): built like a sync builds it.
    from benchmarks.__main__ import run_layers

    run_layers(config, projects, ["knowledge_graph"])
    return data


def write_config(data: Path, path: Path) -> Path:
    with read_connection(data / "gitlab_knowledge.duckdb") as con:
        projects = [r[0] for r in con.execute("SELECT path_with_namespace FROM projects ORDER BY 1").fetchall()]
    path.write_text(f"projects = {json.dumps(projects)}\n[gitlab]\nurl = \"http://127.0.0.1:9\"\n"
                    f"[storage]\ndata_dir = {json.dumps(str(data))}\n")
    return path


def workload(data: Path, queries: int) -> tuple[list[str], list[tuple[str, int]], int]:
    """Titles as queries (deterministic sample), MRs that have threads, and the document count."""
    with read_connection(data / "gitlab_knowledge.duckdb") as con:
        titles = [r[0] for r in con.execute(
            "SELECT title FROM documents WHERE source_type <> 'discussion' AND title IS NOT NULL "
            "ORDER BY hash(id) LIMIT ?", [queries]).fetchall()]
        mrs = con.execute("""
            SELECT p.path_with_namespace, m.iid FROM merge_requests m JOIN projects p ON p.id = m.project_id
            WHERE m.user_notes_count > 0 ORDER BY hash(m.id) LIMIT 60""").fetchall()
        documents = con.execute("SELECT count(*) FROM documents").fetchone()[0]
    return titles, [(p, int(i)) for p, i in mrs], documents


def graph_workload(data: Path, mrs: list[tuple[str, int]]) -> dict[str, list[dict[str, Any]]]:
    """The graph tools' calls: `related` for each MR, `me` for their authors, `file_history` for
    paths review comments were made on (deterministic samples)."""
    refs = [f"{p}!{i}" for p, i in mrs]
    with read_connection(data / "gitlab_knowledge.duckdb") as con:
        users = [r[0] for r in con.execute("""
            SELECT DISTINCT m.author_username FROM merge_requests m JOIN projects p ON p.id = m.project_id
            WHERE list_contains(?, p.path_with_namespace || '!' || m.iid) AND m.author_username IS NOT NULL
            ORDER BY 1 LIMIT 20""", [refs]).fetchall()]
        paths = [r[0] for r in con.execute("""
            SELECT new_path FROM (SELECT DISTINCT new_path FROM note_positions WHERE new_path IS NOT NULL)
            ORDER BY hash(new_path) LIMIT 20""").fetchall()]
        labels = [r[0] for r in con.execute("""
            SELECT label FROM (SELECT unnest(labels) AS label FROM merge_requests) GROUP BY label
            ORDER BY count(*) DESC, label LIMIT 5""").fetchall()]
    lists = [{"kind": "merge_request", "state": "opened", "labels": [label], "updated_since": "2000-01-01"}
             for label in labels]
    lists += [{"kind": "issue", "assignee": user, "sort": "created_desc"} for user in users[:5]]
    lists += [{"kind": "merge_request", "participant": user, "limit": 50} for user in users[:5]]
    lists += [{"kind": "merge_request", "path": path, "state": "merged"} for path in paths[:5]]
    return {"related": [{"ref": ref} for ref in refs],
            "file_history": [{"path": path, "limit": 10} for path in paths],
            "me": [{"user": user, "since": "2000-01-01"} for user in users],
            "person": [{"user": user} for user in users],
            "list_items": lists,
            "similar": [{"ref": ref, "limit": 10} for ref in refs[:30]]}


# What `--tools` may name: the tools measured, in the order they are.
TOOLS = ("search", "gitlab_get_mr_comments", "get_merge_request", "related", "file_history", "me", "person",
         "list_items", "similar")


@contextlib.contextmanager
def timing_validation(took: list[float]) -> Iterator[None]:
    """The SDK client's check of each answer against the tool's output schema, timed into `took`:
    what of a call is the client's own work, not the server's (it grows with the answer)."""
    from mcp.client.session import ClientSession

    validate = ClientSession.validate_tool_result

    async def timed(self: ClientSession, name: str, result: Any) -> None:
        t0 = time.perf_counter()
        try:
            await validate(self, name, result)
        finally:
            took.append((time.perf_counter() - t0) * 1000)

    ClientSession.validate_tool_result = timed  # type: ignore[method-assign]
    try:
        yield
    finally:
        ClientSession.validate_tool_result = validate  # type: ignore[method-assign]


async def drive(config_path: Path, queries: list[str], mrs: list[tuple[str, int]],
                graph: dict[str, list[dict[str, Any]]], tools: frozenset[str] = frozenset(TOOLS),
                rounds: int = 1) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    config = load_config(config_path)
    out: dict[str, Any] = {}
    params = StdioServerParameters(command=sys.executable, args=["-m", "gitlab_knowledge.mcp", "--config",
                                                                 str(config_path)], cwd=str(REPO))
    started = time.perf_counter()
    validated: list[float] = []
    async with Client(params) as client, contextlib.AsyncExitStack() as stack:
        stack.enter_context(timing_validation(validated))
        out["initialized_s"] = round(time.perf_counter() - started, 2)
        first = await client.call_tool("search", {"query": queries[0], "limit": 10})
        out["first_answer_s"] = round(time.perf_counter() - started, 2)
        assert not first.is_error, first.content[0].text
        while not (server_status(config) or {}).get("warm"):
            await asyncio.sleep(0.1)
        out["vectors_in_memory_s"] = round(time.perf_counter() - started, 2)
        out["warm_load_s"] = server_status(config)["warm_seconds"]

        # What the searches' answers say of their own time. Only theirs is kept: every other
        # tool's answers (over a thousand in a full run) were kept too, for nothing, growing the
        # client's memory while it times the calls.
        reported: list[dict[str, Any]] = []

        async def timed(name: str, arguments: dict[str, Any]) -> float:
            t0 = time.perf_counter()
            result = await client.call_tool(name, arguments)
            elapsed = (time.perf_counter() - t0) * 1000
            assert not result.is_error, result.content[0].text
            if name == "search":
                reported.append(result.structured_content)
            return elapsed

        for mode in ("hybrid", "lexical") if "search" in tools else ():
            if mode == "hybrid":
                for q in queries[:5]:
                    await timed("search", {"query": q})
            reported.clear()
            ms = [await timed("search", {"query": q, "mode": mode, "limit": 10}) for q in queries]
            # What the engine itself reports, to tell the search from the protocol around it.
            took = [r["took_ms"] for r in reported]
            embed = [r["embed_ms"] for r in reported]
            out[f"search_{mode}"] = {"p50": pct(ms, 0.5), "p95": pct(ms, 0.95), "calls": len(ms),
                                     "engine_p50": pct(took, 0.5), "engine_p95": pct(took, 0.95),
                                     "embed_p50": pct(embed, 0.5)}
        for name, args in (("gitlab_get_mr_comments", lambda p, i: {"project": p, "mr": i}),
                           ("get_merge_request", lambda p, i: {"iid": i, "project": p})):
            if name not in tools:
                continue
            validated.clear()
            ms = [await timed(name, args(p, i)) for p, i in mrs]
            out[name] = {"p50": pct(ms, 0.5), "p95": pct(ms, 0.95), "calls": len(ms),
                         "validation_p50": pct(validated, 0.5)}
        # The same MRs again, as an agent asks (unresolved only): the store is unchanged, so cached.
        if "gitlab_get_mr_comments" in tools:
            ms = [await timed("gitlab_get_mr_comments", {"project": p, "mr": i, "onlyUnresolved": True})
                  for p, i in mrs]
            out["gitlab_get_mr_comments_again"] = {"p50": pct(ms, 0.5), "p95": pct(ms, 0.95), "calls": len(ms)}
        for name, calls in graph.items():
            if name not in tools:
                continue
            validated.clear()
            # Each round makes every call once more: a p50 over 20 calls moves by milliseconds
            # with the machine's phase, over 100 much less.
            ms = [await timed(name, arguments) for _ in range(rounds) for arguments in calls]
            out[name] = {"p50": pct(ms, 0.5), "p95": pct(ms, 0.95), "calls": len(ms),
                         "validation_p50": pct(validated, 0.5)} if ms else None
        out["server_peak_rss_mb"] = server_status(config)["peak_rss_mb"]
        if tools != frozenset(TOOLS):
            return out
        out["cli_with_server"] = cli_runs(config_path, 15, resident=True)
    out["cli_without_server"] = cli_runs(config_path, 5, resident=False)
    out["http"] = await over_http(config_path, queries, mrs)
    return out


HTTP_CALLS = 60


async def over_http(config_path: Path, queries: list[str], mrs: list[tuple[str, int]]) -> dict[str, Any]:
    """The calls measured over stdio, once the vectors are in memory, over Streamable HTTP from a
    server of its own (a first read of each MR, as stdio's first round), and a 404 beside them:
    what the transport adds to the same work."""
    import re
    import signal

    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    config = load_config(config_path)
    proc = subprocess.Popen([sys.executable, "-m", "gitlab_knowledge.mcp", "--config", str(config_path), "--http",
                             "--port", "0"], stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"(http://\S+/mcp)", line)
        assert match, line
        url = match.group(1)
        while not (server_status(config) or {}).get("warm"):
            await asyncio.sleep(0.1)
        out: dict[str, Any] = {}
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(60)) as http:
            ms = []
            for _ in range(HTTP_CALLS):
                t0 = time.perf_counter()
                await http.get(url.removesuffix("/mcp") + "/nope")
                ms.append((time.perf_counter() - t0) * 1000)
            out["not_found"] = {"p50": pct(ms, 0.5), "p95": pct(ms, 0.95), "calls": len(ms)}
            async with Client(streamable_http_client(url, http_client=http)) as client:
                async def timed(name: str, arguments: dict[str, Any]) -> float:
                    t0 = time.perf_counter()
                    result = await client.call_tool(name, arguments)
                    assert not result.is_error, result.content[0].text
                    return (time.perf_counter() - t0) * 1000

                for mode in ("hybrid", "lexical"):
                    ms = [await timed("search", {"query": q, "mode": mode, "limit": 10})
                          for q in queries[:HTTP_CALLS]]
                    out[f"search_{mode}"] = {"p50": pct(ms, 0.5), "p95": pct(ms, 0.95), "calls": len(ms)}
                ms = [await timed("gitlab_get_mr_comments", {"project": p, "mr": i}) for p, i in mrs]
                out["gitlab_get_mr_comments"] = {"p50": pct(ms, 0.5), "p95": pct(ms, 0.95), "calls": len(ms)}
        return out
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def cli_runs(config_path: Path, runs: int, *, resident: bool) -> dict[str, Any]:
    """`python -m gitlab_knowledge.search` end to end, a new process per call."""
    env = {**os.environ, "GITLAB_KNOWLEDGE_RESIDENT": "on" if resident else "off"}
    args = [CLI_QUERY, "--limit", "5", "--json", "--config", str(config_path)]
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gitlab_knowledge.search", *args], check=True,
                       stdout=subprocess.DEVNULL, cwd=REPO, env=env)
        walls.append(time.perf_counter() - t0)
    # The same command reading its own peak RSS (VmHWM) on exit: rusage would count this
    # process's size too, which the kernel carries into a child's peak across fork and exec.
    probe = ("import atexit, runpy, sys\n"
             "atexit.register(lambda: sys.stderr.write(next(l for l in open('/proc/self/status')"
             " if l.startswith('VmHWM'))))\n"
             f"sys.argv = ['search', *{args!r}]\n"
             "runpy.run_module('gitlab_knowledge.search', run_name='__main__')")
    peaks = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, env=env)
        found = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("VmHWM")]
        peaks += [int(found[0]) / 1024] if found else []
    return {"runs": runs, "wall_s_p50": round(statistics.median(walls), 3), "wall_s_max": round(max(walls), 3),
            "peak_rss_mb": round(max(peaks), 1) if peaks else None}


def table(r: dict[str, Any]) -> str:
    rows = [("what", "result"),
            ("documents in the store", f"{r['documents']:,}"),
            ("process start → initialized → first search answer",
             f"{r['initialized_s']} s → {r['first_answer_s']} s (vectors in memory at {r['vectors_in_memory_s']} s; "
             f"loading them took {r['warm_load_s']} s)")]
    for name, label in (("search_hybrid", "search, hybrid, through the client (query embedding + protocol)"),
                        ("search_lexical", "search, lexical, through the client")):
        m = r.get(name)
        if not m:
            continue
        rows.append((label, f"p50 {m['p50']} ms, p95 {m['p95']} ms ({m['calls']} calls); the engine's own took_ms "
                            f"p50 {m['engine_p50']} ms, p95 {m['engine_p95']} ms, query embedding p50 {m['embed_p50']} ms"))
    for name, label in (("gitlab_get_mr_comments", "gitlab_get_mr_comments, from the store (each MR once)"),
                        ("gitlab_get_mr_comments_again", "gitlab_get_mr_comments, the same MRs again (store unchanged)"),
                        ("get_merge_request", "get_merge_request, from the store (with links and files)"),
                        ("related", "related, each MR"), ("file_history", "file_history, reviewed paths (limit 10)"),
                        ("me", "me, the MRs' authors (since 2000-01-01)"),
                        ("person", "person, the MRs' authors"),
                        ("list_items", "list_items, 20 filter sets (labels, assignee, participant, path)"),
                        ("similar", "similar, hybrid, 30 MRs")):
        m = r.get(name)
        if m:
            checked = f"; the client's check of the answer p50 {m['validation_p50']} ms" if "validation_p50" in m else ""
            rows.append((label, f"p50 {m['p50']} ms, p95 {m['p95']} ms ({m['calls']} calls){checked}"))
    http = r.get("http") or {}
    for name, label in (("search_hybrid", "search, hybrid"), ("search_lexical", "search, lexical"),
                        ("gitlab_get_mr_comments", "gitlab_get_mr_comments, from the store (each MR once)")):
        m = http.get(name)
        if m:
            rows.append((f"{label}, over HTTP beside stdio",
                         f"HTTP p50 {m['p50']} ms, p95 {m['p95']} ms ({m['calls']} calls); stdio p50 {r[name]['p50']} ms"))
    if http.get("not_found"):
        m = http["not_found"]
        rows.append(("HTTP 404 (GET /nope), the transport alone", f"p50 {m['p50']} ms, p95 {m['p95']} ms ({m['calls']} calls)"))
    rows.append(("server peak RSS", f"{r['server_peak_rss_mb']:,} MB"))
    if "cli_with_server" not in r:
        return markdown_table(rows)
    w, wo = r["cli_with_server"], r["cli_without_server"]
    rows.append(("search command, new process per call, server running",
                 f"wall p50 {w['wall_s_p50']} s (max {w['wall_s_max']} s), peak RSS {w['peak_rss_mb']} MB, {w['runs']} runs"))
    rows.append(("search command, new process per call, no server",
                 f"wall p50 {wo['wall_s_p50']} s (max {wo['wall_s_max']} s), peak RSS {wo['peak_rss_mb']} MB, "
                 f"{wo['runs']} runs"))
    return markdown_table(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, help="an existing store (else one is built in --workdir)")
    parser.add_argument("--workdir", type=Path, default=REPO / "benchmarks" / "results" / "mcp-work")
    parser.add_argument("--issues", type=int, default=5000)
    parser.add_argument("--mrs", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--tools", type=lambda text: frozenset(t for t in text.split(",") if t),
                        default=frozenset(TOOLS), help=f"only these, comma-separated (of {','.join(TOOLS)})")
    parser.add_argument("--rounds", type=int, default=1,
                        help="make the graph tools' calls (those of graph_workload) this many times each, their p50 "
                             "over all (default 1)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds: a whole number of at least 1, got {args.rounds}")
    if args.tools - set(TOOLS):
        parser.error(f"--tools: unknown {', '.join(sorted(args.tools - set(TOOLS)))}; the tools are {','.join(TOOLS)}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    data = args.data_dir or build_store(args.workdir, args.issues, args.mrs)
    config_path = write_config(data.resolve(), args.workdir / "mcp_bench.toml")
    queries, mrs, documents = workload(data, args.queries)
    graph = graph_workload(data, mrs)
    load_before = os.getloadavg()[0]
    results = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "documents": documents,
               "machine": f"{platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} cores",
               **asyncio.run(drive(config_path, queries, mrs, graph, args.tools, args.rounds))}
    # The machine may be shared: the load says how much of a number is the server's own.
    results["load_average"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    print("\n" + table(results) + f"\n\n{results['date']} · {results['machine']} · load average "
          f"{results['load_average'][0]} at the start, {results['load_average'][1]} at the end")
    path = args.out or REPO / "benchmarks" / "results" / f"mcp-{results['date'][:10]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2))
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A BEIR retrieval set through the whole pipeline: its corpus served as one project's issues by the
sandbox GitLab, synced by the Dagster job, then measured with `eval`.

    python -m benchmarks.beir DIR --work WORKDIR [--mode M]... [--limit-queries N] [--similar] [--json]

BEIR layout: `corpus.jsonl` ({"_id", "title", "text"}), `queries.jsonl` ({"_id", "text"}),
`qrels/test.tsv` (query-id, corpus-id, score; score > 0 is relevant). Corpus line N becomes issue
#N (title → title, text → description); each query becomes an eval case expecting the issues of
its relevant corpus ids and excluding its own issue when the query is in the corpus too. The
dataset and the store under WORKDIR are kept, so a second run only re-measures (the sync is an
incremental no-op; a changed index or document format rebuilds what it must).

`--similar` measures `similar` instead of search: each query that is in the corpus too is asked by
its issue's reference (`similar #N`: the items most like that report, its own left out), judged on
the same relevant issues. Queries not in the corpus are left out of that run.
"""

import csv
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PROJECT_ID = 1
EPOCH = "2020-01-01T00:00:00.000Z"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _stamp(value: Any) -> str:
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return EPOCH
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def to_dataset(beir_dir: Path, out: Path, project: str) -> list[dict[str, Any]]:
    """Write the sandbox dataset at `out` and return the eval cases (references into `project`)."""
    from gitlab_knowledge_sandbox.dataset import write_jsonl, write_meta

    corpus = _jsonl(beir_dir / "corpus.jsonl")
    queries = _jsonl(beir_dir / "queries.jsonl")
    iid = {str(doc["_id"]): n for n, doc in enumerate(corpus, start=1)}
    base = f"https://gitlab.example.com/{project}"
    user = {"id": 1, "username": "eval", "name": "Eval", "state": "active"}
    issues = []
    for n, doc in enumerate(corpus, start=1):
        created = _stamp((doc.get("metadata") or {}).get("created", EPOCH))
        issues.append({"id": 100_000 + n, "iid": n, "project_id": PROJECT_ID, "title": doc.get("title") or "",
                       "description": doc.get("text") or "", "state": "opened", "created_at": created,
                       "updated_at": created, "labels": [], "author": user, "confidential": False,
                       "web_url": f"{base}/-/issues/{n}", "user_notes_count": 0})
    namespace, _, name = project.rpartition("/")
    write_meta(out, user, [{"id": PROJECT_ID, "name": name, "path": name, "path_with_namespace": project,
                            "name_with_namespace": f"{namespace} / {name}", "created_at": EPOCH,
                            "default_branch": "main", "web_url": base}], f"BEIR set {beir_dir.name}")
    write_jsonl(out / "projects" / str(PROJECT_ID) / "issues.jsonl", issues)
    relevant: dict[str, list[str]] = {}
    with (beir_dir / "qrels" / "test.tsv").open(encoding="utf-8") as fh:
        for row in csv.reader(fh, delimiter="\t"):
            if len(row) >= 3 and row[0] != "query-id" and float(row[2]) > 0 and row[1] in iid:
                relevant.setdefault(row[0], []).append(f"{project}#{iid[row[1]]}")
    cases = []
    for query in queries:
        qid = str(query["_id"])
        if qid not in relevant:
            continue
        text = query.get("text") or ""
        if query.get("title"):
            text = f"{query['title']}\n{text}"
        cases.append({"query": text, "expected": relevant[qid],
                      "exclude": [f"{project}#{iid[qid]}"] if qid in iid else []})
    return cases


def run(beir_dir: Path, work: Path, modes: Sequence[str], models: Sequence[str | None] = (None,),
        limit_queries: int | None = None, per_query: bool = False, by_reference: bool = False) -> dict[str, Any]:
    """Dataset → sandbox GitLab → the sync job (every layer) → eval. Returns the eval report."""
    import os

    import dagster as dg

    from gitlab_knowledge.config import parse_config
    from gitlab_knowledge.defs.runner import run_sync
    from gitlab_knowledge.search.evaluate import evaluate, load_cases
    from gitlab_knowledge.workspace import Workspace
    from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SandboxGitLab

    project = f"eval/{beir_dir.name}"
    dataset = work / "dataset"
    cases = to_dataset(beir_dir, dataset, project)[:limit_queries]
    if by_reference:  # the query's own issue asked by reference (it is also its exclusion)
        cases = [{**case, "query": case["exclude"][0]} for case in cases if case["exclude"]]
    cases_path = work / "cases.json"
    cases_path.write_text(json.dumps(cases, ensure_ascii=False, indent=1), encoding="utf-8")
    os.environ.setdefault("GITLAB_TOKEN", DEFAULT_TOKEN)
    with SandboxGitLab(dataset=dataset) as sb:
        config = parse_config({"gitlab": {"url": sb.url, "rate_limit": 0}, "projects": [project],
                               "storage": {"data_dir": str(work / "data")}}, work, {}, "beir")
        for outcome in run_sync(Workspace(config), [project], instance=dg.DagsterInstance.ephemeral()):
            if outcome.error is not None:
                raise outcome.error
    return evaluate(config, load_cases(cases_path), modes, models, per_query=per_query, by_reference=by_reference)


def main(argv: Sequence[str] | None = None) -> int:
    from gitlab_knowledge.argparsing import OneLineParser, bounded_int
    from gitlab_knowledge.search.evaluate import render_table

    p = OneLineParser(prog="python -m benchmarks.beir", description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, help="a BEIR directory (corpus.jsonl, queries.jsonl, qrels/test.tsv)")
    p.add_argument("--work", type=Path, required=True, help="where the dataset and the store go (kept)")
    p.add_argument("--mode", action="append", choices=("lexical", "semantic", "hybrid"))
    p.add_argument("--model", action="append", metavar="PROVIDER[:MODEL]")
    p.add_argument("--limit-queries", type=bounded_int(1), metavar="N")
    p.add_argument("--per-query", action="store_true")
    p.add_argument("--similar", action="store_true", help="measure `similar REF` from each query's own issue")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    report = run(args.dir, args.work, args.mode or ("lexical", "semantic", "hybrid"), args.model or (None,),
                 args.limit_queries, args.per_query, args.similar)
    sys.stdout.write(json.dumps(report, indent=1) + "\n" if args.json else render_table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

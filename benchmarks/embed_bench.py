"""Embedding throughput: the bare model vs the pipeline on the same documents.

Bare: the embedded provider on the documents' texts, nothing else. Pipeline: `embeddings.refresh`
on a store holding exactly those documents (diff against the vector table, staging through
Parquet, chunking, LanceDB writes, index upkeep). The ratio is the pipeline's overhead.
"""

import time
from pathlib import Path
from typing import Any

from gitlab_knowledge.config import parse_config
from gitlab_knowledge.embeddings import refresh as embeddings
from gitlab_knowledge.embeddings.embedded import EmbeddedProvider
from gitlab_knowledge.store.db import read_connection, write_connection
from gitlab_knowledge.workspace import Workspace

BENCH_PROJECT = "bench/documents"


def mini_store(source_db: Path, project: str | None, limit: int | None, target: Path) -> Any:
    """A store under `target` holding the first `limit` documents of `project` (None: all), filed
    under one project so one pipeline run embeds them all."""
    config = parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": [BENCH_PROJECT],
                           "storage": {"data_dir": str(target)}}, target, {}, "benchmark")
    where = f"WHERE project_path = '{project}'" if project else ""
    with read_connection(source_db) as src:
        docs = src.sql(f"SELECT * REPLACE ('{BENCH_PROJECT}' AS project_path) FROM documents {where} ORDER BY id"
                       + (f" LIMIT {int(limit)}" if limit else "")).to_arrow_table()
    with write_connection(config.duckdb_path) as con:
        con.register("incoming", docs)
        con.execute("INSERT INTO documents SELECT * FROM incoming")
    return config, docs.column("content_text").to_pylist()


def run(source_db: Path, project: str | None, limit: int | None, workdir: Path, batch: int = 32) -> dict[str, Any]:
    config, texts = mini_store(source_db, project, limit, workdir)
    model = EmbeddedProvider()
    model.check()  # load outside the timings

    def bare_run() -> tuple[float, int]:
        t0 = time.perf_counter()
        chunks = 0
        for start in range(0, len(texts), batch):
            chunks += sum(len(c) for c in model.embed_documents(texts[start:start + batch]))
        return time.perf_counter() - t0, chunks

    # bare, pipeline, bare: the machine warms up and its other load drifts; the bare time is the
    # mean of the runs on either side of the pipeline's.
    before, chunks = bare_run()
    t0 = time.perf_counter()
    stats = embeddings.refresh(Workspace(config), BENCH_PROJECT, provider=model, batch_size=batch)
    pipeline = time.perf_counter() - t0
    after, _ = bare_run()
    bare = (before + after) / 2
    return {"documents": len(texts), "chunks": chunks, "bare_s": round(bare, 2), "pipeline_s": round(pipeline, 2),
            "bare_docs_per_s": round(len(texts) / bare, 1), "pipeline_docs_per_s": round(stats.embedded / pipeline, 1),
            "overhead_pct": round(100 * (pipeline - bare) / bare, 1), "embedded": stats.embedded,
            "bare_runs_s": [round(before, 2), round(after, 2)]}


def main() -> int:
    import argparse
    import json
    import tempfile

    parser = argparse.ArgumentParser(description="bare model vs pipeline on the same documents")
    parser.add_argument("--source", required=True, type=Path, help="a store's gitlab_knowledge.duckdb")
    parser.add_argument("--project", default=None, help="default: every project's documents")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gk-embed-bench-") as tmp:
        print(json.dumps(run(args.source, args.project, args.limit, Path(tmp))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

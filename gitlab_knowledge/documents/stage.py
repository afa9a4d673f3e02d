"""Copy selected documents out of DuckDB in one short read, for layers that work on them longer
than they may hold the DuckDB file (embedding takes minutes; the writer lock blocks everyone)."""

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from gitlab_knowledge.documents.columns import COLUMNS

# What the index layers read of a document: its id and text, and the metadata columns they carry.
DOC_COLUMNS = ", ".join(dict.fromkeys(["id", *(c.source for c in COLUMNS), "content_text", "content_hash",
                                       "meta_hash"]))


def stage_documents(con: duckdb.DuckDBPyConnection, ids: Sequence[str], path: Path) -> None:
    """Write the documents `ids` to a Parquet file at `path`."""
    con.execute("CREATE OR REPLACE TEMP TABLE gk_wanted AS SELECT unnest(?::TEXT[]) AS id", [list(ids)])
    con.execute(f"COPY (SELECT {DOC_COLUMNS} FROM documents WHERE id IN (SELECT id FROM gk_wanted) ORDER BY id) "
                f"TO '{path}' (FORMAT parquet)")


def iter_documents(path: Path, batch_size: int) -> Iterator[list[dict[str, Any]]]:
    for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
        yield pa.Table.from_batches([batch]).to_pylist()

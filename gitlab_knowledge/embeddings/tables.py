"""Every model's vector table: what `models list` shows, `models drop` removes, and which table
search answers from while a newly configured model's table is still being built.

A table is *complete* when it holds a vector for every document the lexical index holds (search
reads only LanceDB and Tantivy, so the lexical index stands for the documents). Search uses the
configured model's table once it is complete; until then it keeps answering from the most
complete other table, so switching models never leaves a window without vectors.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitlab_knowledge.embeddings.vectors import FAILURES_TABLE, VectorStore, is_current, sql_str, table_name
from gitlab_knowledge.errors import UsageError


@dataclass
class TableInfo:
    name: str
    provider: str
    model: str
    dims: int
    documents: int
    chunks: int
    disk_bytes: int
    current_format: bool

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.model}"


def _disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def list_tables(lancedb_dir: Path) -> list[TableInfo]:
    """Each vector table with its model (read from its rows), size and document count."""
    if not lancedb_dir.exists():
        return []
    store = VectorStore(lancedb_dir, "embedded", "any")
    out = []
    for name in sorted(store._names()):
        if not name.startswith("vectors__"):
            continue
        table = store._db.open_table(name)
        current = is_current(table.schema)
        first = table.search().select(["provider", "model", "dims"]).limit(1).to_list() if current else []
        provider, model = (first[0]["provider"], first[0]["model"]) if first else ("?", name.removeprefix("vectors__"))
        dims = table.schema.field("vector").type.list_size if "vector" in table.schema.names else 0
        out.append(TableInfo(name, provider, model, dims, table.count_rows("chunk = 0") if current else 0,
                             table.count_rows(), _disk(lancedb_dir / f"{name}.lance"), current))
    return out


def drop_table(lancedb_dir: Path, provider: str, model: str) -> TableInfo:
    """Remove one model's vector table and its recorded failures."""
    name = table_name(provider, model)
    found = next((t for t in list_tables(lancedb_dir) if t.name == name), None)
    if found is None:
        raise UsageError(f"no vector table for {provider}:{model} (see `models list`)")
    store = VectorStore(lancedb_dir, provider, model)
    store._db.drop_table(name)
    if FAILURES_TABLE in store._names():
        store._db.open_table(FAILURES_TABLE).delete(f"table_name = {sql_str(name)}")
    return found


def answering_table(lancedb_dir: Path, wanted: tuple[str, str], documents: int) -> tuple[TableInfo | None, str | None]:
    """The table search should answer from when `wanted` (provider, model) is configured and the
    lexical index holds `documents`: the wanted one if complete, else the most complete other one
    (with a warning saying so), else the wanted one as it is."""
    tables = [t for t in list_tables(lancedb_dir) if t.current_format]
    mine = next((t for t in tables if (t.provider, t.model) == wanted), None)
    if documents <= 0 or (mine is not None and mine.documents >= documents):
        return mine, None
    others = sorted((t for t in tables if t is not mine and t.documents > (mine.documents if mine else 0)),
                    key=lambda t: (-t.documents, t.name))
    if not others:
        return mine, None
    have = mine.documents if mine else 0
    return others[0], (f"the vector table of {wanted[0]}/{wanted[1]} holds {have:,} of {documents:,} documents; "
                       f"answering from {others[0].provider}/{others[0].model} until it is complete (sync builds it)")


def coverage(info: TableInfo, documents: int) -> float:
    return round(100.0 * min(info.documents, documents) / documents, 1) if documents else 100.0


def as_dict(info: TableInfo, documents: int, configured: tuple[str, str], kept: Any) -> dict[str, Any]:
    return {"provider": info.provider, "model": info.model, "table": info.name, "dims": info.dims,
            "documents": info.documents, "chunks": info.chunks, "coverage_pct": coverage(info, documents),
            "disk_bytes": info.disk_bytes, "configured": (info.provider, info.model) == configured,
            "kept_current": (info.provider, info.model) == configured or info.key in kept
            or info.provider in kept, "current_format": info.current_format}


def kept_models(config: Any) -> list[tuple[str, str | None]]:
    """(provider, model or None for its default) of each `embedding.models` entry other than the
    configured model: the tables sync keeps current beside it."""
    out = []
    for entry in config.embedding.models:
        provider, _, model = entry.partition(":")
        same_provider = provider == config.embedding.provider
        if same_provider and (model or None) in (None, config.embedding.model):
            continue
        out.append((provider, model or None))
    return out

"""Bulk row writes through Arrow (DuckDB's executemany is row-at-a-time and slow)."""

from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa

_schemas: dict[tuple[str, frozenset[str]], pa.Schema] = {}


def table_schema(con: duckdb.DuckDBPyConnection, table: str, exclude: Sequence[str] = ()) -> pa.Schema:
    """The Arrow schema of a DuckDB table (minus computed columns), cached per process."""
    key = (table, frozenset(exclude))
    if key not in _schemas:
        schema = con.sql(f"SELECT * FROM {table} LIMIT 0").to_arrow_table().schema
        _schemas[key] = pa.schema([f for f in schema if f.name not in exclude])
    return _schemas[key]


def forget_table_schemas() -> None:
    """Drop the cached schemas: a migration just changed the tables they were read from."""
    _schemas.clear()


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[dict[str, Any]],
                computed: dict[str, str] | None = None, *, or_replace: bool = False) -> int:
    """INSERT the rows (dicts keyed by column); `computed` maps columns to SQL expressions."""
    if not rows:
        return 0
    computed = computed or {}
    arrow = pa.Table.from_pylist(list(rows), schema=table_schema(con, table, tuple(computed)))
    extra = "".join(f", {expr} AS {name}" for name, expr in computed.items())
    verb = "INSERT OR REPLACE" if or_replace else "INSERT"
    con.register("gk_rows", arrow)
    try:
        con.execute(f"{verb} INTO {table} BY NAME SELECT *{extra} FROM gk_rows")
    finally:
        con.unregister("gk_rows")
    return len(rows)


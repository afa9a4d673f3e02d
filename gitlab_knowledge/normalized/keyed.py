"""Normalized rows of the kinds keyed by a string within their project (kinds.KEYED_KINDS: wiki
pages by slug), which have no threads, labels or iid, so none of the issue/MR rebuild applies.

A changed raw row (new, changed or tombstoned) rebuilds its one normalized row: deleted, and
inserted again from the payload if the page is still live. The row's `id` is its raw payload's id
(GitLab gives a wiki page no id); a row function per kind turns the payload into the row.
"""

import json
import logging
from collections.abc import Callable
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.store.bulk import insert_rows

log = logging.getLogger(__name__)
# (payload, raw payload id, project id, project web URL) → the kind's normalized row.
KeyedRowBuilder = Callable[[dict[str, Any], int, int, str | None], dict[str, Any] | None]
KEYED_ROW_BUILDERS: dict[str, KeyedRowBuilder] = {}


def keyed_row_builder(kind: kinds.KeyedKind) -> Callable[[KeyedRowBuilder], KeyedRowBuilder]:
    def register(function: KeyedRowBuilder) -> KeyedRowBuilder:
        KEYED_ROW_BUILDERS[kind.name] = function
        return function
    return register


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@keyed_row_builder(kinds.WIKI_PAGE)
def wiki_page_row(payload: dict[str, Any], raw_payload_id: int, project_id: int,
                  project_web_url: str | None) -> dict[str, Any] | None:
    slug = _text(payload.get("slug"))
    if not slug:
        return None
    return {
        "id": raw_payload_id, "project_id": project_id, "slug": slug,
        "title": _text(payload.get("title")) or slug, "format": _text(payload.get("format")) or "markdown",
        "encoding": _text(payload.get("encoding")), "content": _text(payload.get("content")) or "",
        "web_url": kinds.WIKI_PAGE.url(project_web_url, slug) if project_web_url else None,
        "raw_payload_id": raw_payload_id,
    }


def rebuild_keyed(con: duckdb.DuckDBPyConnection, project_id: int, kind_name: str, keys: list[str]) -> tuple[int, int]:
    """Rebuild the rows of one keyed kind whose raw rows (by gitlab_key) changed; returns
    (rows written, rows gone)."""
    kind = kinds.keyed(kind_name)
    if kind is None or kind_name not in KEYED_ROW_BUILDERS:
        return 0, 0
    build = KEYED_ROW_BUILDERS[kind_name]
    stored = con.execute("""
        SELECT id, json, deleted_at FROM raw_payloads
        WHERE resource_type = ? AND project_id = ? AND gitlab_key IN (SELECT unnest(?::TEXT[]))
    """, [kind_name, project_id, keys]).fetchall()
    con.execute(f"DELETE FROM {kind.table} WHERE id IN (SELECT unnest(?::BIGINT[]))", [[int(r[0]) for r in stored]])
    web = next(iter(con.execute("SELECT web_url FROM projects WHERE id = ?", [project_id]).fetchall()), None)
    rows: list[dict[str, Any]] = []
    for raw_id, text, deleted_at in stored:
        if deleted_at is not None:
            continue
        try:
            row = build(json.loads(text), int(raw_id), project_id, web[0] if web else None)
        except (ValueError, TypeError, AttributeError) as exc:
            row = None
            log.warning("skipped %s raw row %s: %s", kind.noun, raw_id, exc)
        if row is not None:
            rows.append(row)
    insert_rows(con, kind.table, rows, {"change_seq": "nextval('change_seq')"})
    return len(rows), len(stored) - len(rows)

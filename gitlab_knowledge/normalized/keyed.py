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
from gitlab_knowledge.store.payloads import release_name, release_problem
from gitlab_knowledge.timeutil import parse_time

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


@keyed_row_builder(kinds.RELEASE)
def release_row(payload: dict[str, Any], raw_payload_id: int, project_id: int,
                project_web_url: str | None = None) -> dict[str, Any] | None:
    """A release's row (docs/gitlab-api-releases.md); keyed by its raw payload's id, since GitLab
    gives a release none (its tag is its key within the project). A stored payload the checks
    refuse (written by an older version) is skipped with a line."""
    problem = release_problem(payload, utf8=False)
    if problem is not None:
        log.warning("skipped %s: %s", release_name(payload), problem)
        return None
    commit = payload.get("commit")
    links = payload.get("_links")
    released = parse_time(payload.get("released_at"))
    upcoming = payload.get("upcoming_release")
    milestones = [m.get("title") for m in payload.get("milestones") or [] if isinstance(m, dict)]
    return {
        "id": raw_payload_id, "project_id": project_id, "tag_name": payload["tag_name"],
        "title": _text(payload.get("name")) or payload["tag_name"], "format": "markdown",
        "description": payload.get("description"), "created_at": parse_time(payload.get("created_at")),
        "released_at": released, "upcoming_release": bool(upcoming),
        "author_username": _user(payload.get("author"), "username"), "author_name": _user(payload.get("author"), "name"),
        "commit_sha": _text(commit.get("id")) if isinstance(commit, dict) else None,
        "milestones": [t for t in milestones if isinstance(t, str) and t],
        "web_url": _web_url(links, project_web_url, payload["tag_name"]), "raw_payload_id": raw_payload_id,
    }


def _user(user: Any, field: str) -> str | None:
    return _text(user.get(field)) if isinstance(user, dict) else None


def _web_url(links: Any, project_web_url: str | None, tag: str) -> str | None:
    """GitLab's own address of the release (`_links.self`), else the one its project's URL makes."""
    own = links.get("self") if isinstance(links, dict) else None
    if isinstance(own, str) and own:
        return own
    return kinds.RELEASE.url(project_web_url, tag) if project_web_url else None


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

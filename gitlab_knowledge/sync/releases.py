"""Fetch one project's releases into the raw layer (what GitLab's API gives: docs/gitlab-api-releases.md).

A release has no `updated_at` and the list takes no `updated_after`, so there is no cursor: every
sync reads the whole listing, `order_by=created_at&sort=asc` (an edit cannot move a release between
pages; one created meanwhile lands at the end), and the raw layer keeps only what changed, by each
payload's content hash. A no-op sync costs ceil(releases / per_page) calls: one for a project with
up to 100 releases.

Removal follows positive evidence only: a listing GitLab marked complete, every row of it
understood, lacking the release. A multi-page listing could have skipped a release while another
was deleted under it, so a release missing from one is removed only when its own GET answers 404.
A project whose releases the token cannot read (403, or 404 with the feature off) is skipped with
one line: not an error.
"""

from typing import Any
from urllib.parse import quote

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import GitLabError, NotFoundError
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.progress import SyncProgress
from gitlab_knowledge.store import raw
from gitlab_knowledge.store.payloads import release_name, release_problem
from gitlab_knowledge.sync.commits import Commits
from gitlab_knowledge.sync.stats import ResourceStats

RELEASE = kinds.RELEASE


def raw_row(project_id: int, release: dict[str, Any]) -> raw.RawRow:
    """The release's raw row, keyed `<project id>:<tag>`; its `updated_at` is its release date (GitLab
    keeps no update time), which nothing orders by."""
    return raw.RawRow(resource_type=RELEASE.name, gitlab_key=RELEASE.raw_key(project_id, release["tag_name"]),
                      json=raw.canonical_json(release), updated_at=None)


async def sync_releases(client: GitLabClient, project_id: int, project_path: str, per_page: int, commits: Commits,
                        progress: SyncProgress, stats: ResourceStats) -> None:
    """List every release of the project, store the new and changed ones, remove on evidence."""
    path = f"/projects/{project_id}/{RELEASE.api_path}"
    listed: list[dict[str, Any]] = []
    rejected = pages = 0
    try:
        async for page in client.iter_pages(path, {"order_by": "created_at", "sort": "asc", "per_page": per_page}):
            stats.list_calls += 1
            pages += 1
            for index, release in enumerate(page.items):
                problem = release_problem(release)
                if problem is None:
                    listed.append(release)
                    continue
                rejected += 1
                stats.rejected += 1
                progress.warning(f"{project_path}: skipped {release_name(release, index)}: {problem}")
    except GitLabError as exc:
        if exc.status not in (403, 404) or pages:
            raise  # a listing refused halfway is a failure, not a closed door
        stats.list_calls += 1
        progress.message(f"{project_path}: releases not readable with this token ({exc.status}): skipped")
        return
    stats.listed += len(listed)
    rows = [raw_row(project_id, r) for r in listed]
    if rejected:
        progress.warning(f"{project_path}: releases listing incomplete ({rejected} rejected): "
                         "nothing removed as no longer in GitLab on this run")
    seen = None if rejected else {r.gitlab_key for r in rows}

    def store(con: duckdb.DuckDBPyConnection, prov: raw.Provenance) -> None:
        counts = raw.upsert_rows(con, rows, prov)
        stats.fetched += counts.new + counts.updated
        stats.new += counts.new
        stats.updated += counts.updated
        # One page: its absence is the evidence, no GET to ask. A project the store held nothing
        # of (`prov.fresh`) has stored no release but these.
        if seen is not None and pages == 1 and not prov.fresh:
            _tombstone(con, project_id, project_path, sorted(_stored(con, project_id) - seen), progress, stats)

    if pages == 1 or seen is None:
        commits.later(store)  # with the sync's end while the project is small (sync/commits.py)
        return
    commits.now(store)
    missing = sorted(commits.now(lambda con, prov: _stored(con, project_id)) - seen)
    # A release deleted while the pages were read shifts the rest: one could have slipped
    # between two pages. Its own GET settles it.
    confirmed = []
    for key in missing:
        tag = key.partition(":")[2]
        try:
            await client.get(f"/projects/{project_id}/{RELEASE.api_path}/{quote(tag, safe='')}")
        except NotFoundError:
            confirmed.append(key)
    if confirmed:
        commits.now(lambda con, prov: _tombstone(con, project_id, project_path, confirmed, progress, stats))


def _stored(con: duckdb.DuckDBPyConnection, project_id: int) -> set[str]:
    return {key for (key,) in con.execute(
        "SELECT gitlab_key FROM raw_payloads WHERE project_id = ? AND resource_type = ? AND deleted_at IS NULL",
        [project_id, RELEASE.name]).fetchall()}


def _tombstone(con: duckdb.DuckDBPyConnection, project_id: int, project_path: str, missing: list[str],
               progress: SyncProgress, stats: ResourceStats) -> None:
    if not missing:
        return
    removed = raw.tombstone(con, "resource_type = ? AND gitlab_key IN (SELECT unnest(?::TEXT[]))",
                            [RELEASE.name, missing])
    stats.deleted += removed
    progress.message(f"{project_path}: {removed} release{'s' if removed != 1 else ''} no longer in GitLab, removed")

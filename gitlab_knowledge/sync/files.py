"""The files a merge request changed: `GET .../merge_requests/:iid/diffs` into the raw layer.

GitLab 15.7 added the paginated `/diffs`; older GitLabs answer it 404 and have only the
single-object `/changes` (deprecated since, and capped by GitLab's diff limits, which it reports as
`overflow`). The first 404 from `/diffs` while `/changes` answers switches the rest of the run to
`/changes`, so an old GitLab costs one wasted call per sync, not one per MR.

The raw row keeps GitLab's objects as given except the `diff` text: file history needs paths and
flags only, and the text is most of the bytes (a large MR's is megabytes), so storing it would grow
the store by the repository's history for nothing anything here reads.
"""

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import duckdb

from gitlab_knowledge import kinds
from gitlab_knowledge.errors import NotFoundError, first_error
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.store import raw
from gitlab_knowledge.timeutil import parse_time

RESOURCE = "merge_request_diffs"
DROPPED_FIELDS = ("diff",)
log = logging.getLogger(__name__)


@dataclass
class FileFetcher:
    """Fetches MR file lists for one project; remembers which endpoint the GitLab has."""

    client: GitLabClient
    project_id: int
    per_page: int
    legacy: bool = False  # the GitLab has no /diffs (before 15.7): /changes only
    calls: int = 0  # file-list requests made, pages included (what the sync's bound counts)
    # Until one MR has answered, which endpoint exists is unknown: the first asks alone, so a
    # page of MRs fetched at once does not send every one of them to a /diffs that is not there.
    _known: bool = False
    _probe: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def fetch_all(self, iids: list[int]) -> list[list[dict[str, Any]] | None]:
        """`files` of each MR, concurrently (the client's limiter paces them)."""
        if not iids:
            return []
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self.files(iid)) for iid in iids]
        except BaseExceptionGroup as eg:
            raise first_error(eg) from None
        return [t.result() for t in tasks]

    async def files(self, iid: int) -> list[dict[str, Any]] | None:
        """The MR's changed files, or None when GitLab serves no file list for it (404 on both
        endpoints: the MR is gone, or the token cannot read its repository)."""
        if self._known:
            return await self._fetch(iid)
        async with self._probe:
            out = await self._fetch(iid)
            self._known = self._known or out is not None
            return out

    async def _fetch(self, iid: int) -> list[dict[str, Any]] | None:
        base = f"/projects/{self.project_id}/merge_requests/{iid}"
        if not self.legacy:
            files: list[dict[str, Any]] = []
            try:
                async for page in self.client.iter_pages(f"{base}/diffs", {"per_page": self.per_page}):
                    self.calls += 1
                    files.extend(_paths_only(d) for d in page.items if isinstance(d, dict))
                return files
            except NotFoundError:
                if files:
                    raise  # a later page vanished: the MR changed under us; the sync fails and retries
                self.calls += 1
        self.calls += 1
        try:
            changes = await self.client.get(f"{base}/changes")
        except NotFoundError:
            return None
        if not self.legacy:
            log.info("GitLab has no merge request /diffs endpoint (before 15.7): reading /changes instead")
            self.legacy = True
        listed = changes.get("changes") if isinstance(changes, dict) else None
        return [_paths_only(d) for d in listed or [] if isinstance(d, dict)]


def _paths_only(diff: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in diff.items() if k not in DROPPED_FIELDS}


def raw_row(merge_request: dict[str, Any], files: list[dict[str, Any]]) -> raw.RawRow:
    """The raw-layer row of an MR's file list: keyed by the MR's id, dated by its updated_at."""
    return raw.RawRow(resource_type=RESOURCE, gitlab_key=str(merge_request["id"]), json=raw.canonical_json(files),
                      updated_at=parse_time(merge_request.get("updated_at")), parent_type=kinds.MERGE_REQUEST.name,
                      parent_id=int(merge_request["id"]), position=0)


def missing_file_lists(con: duckdb.DuckDBPyConnection, project_id: int) -> list[dict[str, Any]]:
    """The stored payloads of the project's MRs that have no file list, newest first."""
    return [json.loads(text) for (text,) in con.execute(f"""
        SELECT m.json FROM raw_payloads m
        WHERE m.project_id = ? AND m.resource_type = '{kinds.MERGE_REQUEST.name}' AND m.deleted_at IS NULL
          AND NOT EXISTS (SELECT 1 FROM raw_payloads f WHERE f.resource_type = '{RESOURCE}'
                          AND f.gitlab_key = m.gitlab_key AND f.deleted_at IS NULL)
        ORDER BY m.updated_at DESC
    """, [project_id]).fetchall()]

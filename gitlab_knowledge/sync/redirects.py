"""Project paths links name that no synced project has: the project GitLab redirects each to.

A link keeps the path it was written with (`gitlab-org/gitlab-ce#57766`). When that project was
renamed or transferred since (`gitlab-org/gitlab-foss`), GitLab still answers `GET /projects/:old
path` with the project under its new path, through the redirect the rename left. The sync asks
once per distinct unknown path and records the answer in `project_aliases` (also a 404: the path
is no project the token sees); the graph layer resolves links through it, so the link targets
the synced project instead of being kept as an external one.

A path is unknown when it is neither a stored project's path, a configured path, a project of
the same batch, nor asked before (what the store knows is read once, before the sync's listings). The paths looked at are those of the items this sync fetched (their text is read with
the graph layer's own rules, graph/refs.py) and those of the links already stored as external
(a store upgraded to this, or links read before the path was asked about).
"""

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb

from gitlab_knowledge.errors import GitLabError, NotFoundError
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.graph.refs import extract
from gitlab_knowledge.sync.parents import Parent
from gitlab_knowledge.timeutil import utcnow

log = logging.getLogger(__name__)


class LinkedPaths:
    """The project paths named by the text of the items one sync fetched."""

    def __init__(self, project_path: str, gitlab_url: str) -> None:
        self.project_path = project_path
        self.gitlab_url = gitlab_url
        self.paths: set[str] = set()

    def read(self, parents: Sequence[Parent]) -> None:
        for p in parents:
            texts: list[tuple[str, Any]] = []
            if p.item is not None:
                texts += [("title", p.item.get("title")), ("description", p.item.get("description"))]
            for thread in p.threads or ():
                for note in thread.get("notes") or ():
                    if isinstance(note, dict):
                        texts.append(("system_note" if note.get("system") else "note", note.get("body")))
            for found_in, text in texts:
                if isinstance(text, str) and text:
                    self.paths.update(
                        ref.target_path.casefold()
                        for ref in extract(text, project_path=self.project_path, gitlab_url=self.gitlab_url,
                                           source_type=p.kind, found_in=found_in))


@dataclass
class KnownPaths:
    """What the store knows of project paths before a sync's listings (lower case): the stored
    external links' paths, and those a project, a configured path or an earlier look-up answers."""

    external: set[str] = field(default_factory=set)
    answered: set[str] = field(default_factory=set)

    def unknown(self, candidates: Iterable[str], siblings: Iterable[str] = ()) -> list[str]:
        """The candidates (and the external links' paths) nothing answers yet; `siblings`, the
        projects synced beside this one, are projects too."""
        wanted = {c.casefold() for c in candidates} | self.external
        known = self.answered | {s.casefold() for s in siblings}
        return sorted(p for p in wanted - known if p)


def known_paths(con: duckdb.DuckDBPyConnection, configured: Iterable[str]) -> KnownPaths:
    """One statement: each project's sync reads these before its listings (a batch, once a project).
    Each path once: `sync_runs` keeps a row per sync of every project, forever, and a link per
    mention, so without DISTINCT a store's history came back to Python row by row at every sync."""
    known = KnownPaths()
    known.answered.update(c.casefold() for c in configured)
    for external, path in con.execute("""
        SELECT DISTINCT true, lower(target_path) FROM item_references WHERE external
        UNION ALL SELECT false, lower(path_with_namespace) FROM projects
        UNION ALL SELECT false, path FROM project_aliases
        UNION ALL SELECT DISTINCT false, lower(project_path) FROM sync_runs WHERE project_id IS NOT NULL
    """).fetchall():
        (known.external if external else known.answered).add(path)
    return known


def record(con: duckdb.DuckDBPyConnection, path: str, project: dict[str, Any] | None) -> None:
    """GitLab's answer for `path`: the project it serves there, or None for a 404."""
    pid = project.get("id") if project else None
    con.execute("INSERT OR REPLACE INTO project_aliases VALUES (?, ?, ?, ?)", [
        path.casefold(), int(pid) if isinstance(pid, int) else None,
        project.get("path_with_namespace") if project else None, utcnow()])


async def look_up(client: GitLabClient, paths: Sequence[str], commit: Callable[..., None],
                  known: KnownPaths | None = None) -> int:
    """Ask GitLab once for each of `paths` (`KnownPaths.unknown`), recording each answer through
    `commit(work)` and in `known` (what the projects of a batch that begin later read); returns
    the number of calls made. A failure other than a 404 leaves the path unasked (the next sync
    asks again) and does not fail the sync."""
    calls = 0
    for path in paths:
        calls += 1
        try:
            found = await client.project(path)
        except NotFoundError:
            found = None
        except GitLabError as exc:
            log.warning("could not look up project %s (%s); its links stay external for now", path, exc)
            continue
        answer = found if isinstance(found, dict) else None
        commit(lambda con, prov, path=path, answer=answer: record(con, path, answer))
        if known is not None:
            known.answered.add(path.casefold())
    return calls

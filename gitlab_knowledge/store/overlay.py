"""What a shared server knows of GitLab beyond the store: issues made confidential since the sync.

The store learns an issue's `confidential` flag at the next sync of its project. A shared MCP
server (`[mcp] auth = "gitlab"`) asks GitLab more often (mcp/confidential_watch.py) which issues
are confidential now, and holds the answer here, in memory: the server only reads the store, and
the next sync writes the flag for real. `unchecked` are the projects whose last check failed:
what flipped there is unknown, so the lens treats them as GitLab treats a project whose
confidential issues a user may not see (store/viewer_lens.py: out of sight below Planner).

The reader (store/reader.py) writes the overlay as two tables of its resident instance
(`memory.gk_overlay`) whenever its generation moved, and rebuilds each lens on top of them; the
viewer lens reads them underneath every query (hidden issues, their threads, notes, links,
documents, mentions) and in the index scope both retrievers push down.
"""

import threading
from dataclasses import dataclass

SCHEMA = "memory.gk_overlay"
ISSUES = f"{SCHEMA}.confidential_issues"  # id: GitLab's issue id (the store's issues.id)
UNCHECKED = f"{SCHEMA}.unchecked_projects"  # project_id: the last check of it failed

# Run before a lens reads the overlay: a reader without one (the CLI's, a test's) has empty tables.
ENSURE = (f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
          f"CREATE TABLE IF NOT EXISTS {ISSUES} (id BIGINT)",
          f"CREATE TABLE IF NOT EXISTS {UNCHECKED} (project_id BIGINT)")


@dataclass(frozen=True)
class OverlayState:
    generation: int
    issues: frozenset[int]
    unchecked: frozenset[int]


class ConfidentialOverlay:
    """Issue ids GitLab says are confidential, per project, and the projects whose check failed;
    thread-safe. `generation` moves on every change, so readers know when to write their tables
    again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_project: dict[int, frozenset[int]] = {}
        self._state = OverlayState(0, frozenset(), frozenset())

    def state(self) -> OverlayState:
        with self._lock:
            return self._state

    @property
    def generation(self) -> int:
        return self.state().generation

    def update(self, checked: dict[int, frozenset[int]], failed: frozenset[int]) -> None:
        """One check's answer: per project checked, its confidential issue ids (replacing what the
        last check said of it); `failed`: projects whose check failed, whose last known ids stay.
        A project in neither is no longer watched (gone from the store): its ids go."""
        with self._lock:
            self._by_project = {pid: ids for pid, ids in self._by_project.items() if pid in failed}
            self._by_project.update(checked)
            issues = frozenset(i for ids in self._by_project.values() for i in ids)
            old = self._state
            if issues != old.issues or failed != old.unchecked:
                self._state = OverlayState(old.generation + 1, issues, failed)

    def statements(self, state: OverlayState) -> list[str]:
        """The tables of `state` on a reader's resident instance."""
        def values(ids: frozenset[int], column: str) -> str:
            if not ids:
                return f"SELECT NULL::BIGINT AS {column} WHERE false"
            return f"SELECT * FROM (VALUES {', '.join(f'({int(i)})' for i in sorted(ids))}) v({column})"
        return [*ENSURE, f"CREATE OR REPLACE TABLE {ISSUES} AS {values(state.issues, 'id')}",
                f"CREATE OR REPLACE TABLE {UNCHECKED} AS {values(state.unchecked, 'project_id')}"]

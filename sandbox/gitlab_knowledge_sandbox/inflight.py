"""Which projects a client's requests are being served for right now, and the most at once.

A test of a client that fetches several projects concurrently reads `most_projects` (never more
than the client's bound, and more than one when it overlaps them) and `most_requests`, counted
where the requests are served, not where they were sent.
"""

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

PROJECTS_PREFIX = "/api/v4/projects/"


class InFlight:
    def __init__(self, project_of: Callable[[str], Any]) -> None:
        """`project_of(ref)`: the project a path segment names (an id or a URL-encoded path)."""
        self._project_of = project_of
        self._lock = threading.Lock()
        self._serving: Counter[int] = Counter()  # project id -> its requests being served
        self._requests = 0
        self.most_projects = 0
        self.most_requests = 0

    def reset(self) -> None:
        with self._lock:
            self.most_projects = self.most_requests = 0

    def _project(self, path: str) -> int | None:
        if not path.startswith(PROJECTS_PREFIX):
            return None
        ref = unquote(path[len(PROJECTS_PREFIX):].split("/", 1)[0])
        try:
            return int(self._project_of(ref).data["id"])
        except Exception:  # noqa: BLE001 - an unknown project is the API's 404 to give, not ours
            return None

    @contextlib.contextmanager
    def serving(self, path: str) -> Iterator[None]:
        project = self._project(path)
        with self._lock:
            self._requests += 1
            if project is not None:
                self._serving[project] += 1
            self.most_requests = max(self.most_requests, self._requests)
            self.most_projects = max(self.most_projects, len(self._serving))
        try:
            yield
        finally:
            with self._lock:
                self._requests -= 1
                if project is not None:
                    self._serving[project] -= 1
                    if not self._serving[project]:
                        del self._serving[project]

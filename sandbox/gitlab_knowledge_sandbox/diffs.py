"""Merge request diffs: `GET .../merge_requests/:iid/diffs` (GitLab 15.7+) and the deprecated
`GET .../merge_requests/:iid/changes`, with a switch for GitLabs older than 15.7.

Diff elements are served as saved (`old_path`, `new_path`, `a_mode`, `b_mode`, `diff`, `new_file`,
`renamed_file`, `deleted_file`, and whatever newer fields a dataset carries).
"""

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .clock import SandboxClock, iso_ms
from .dataset import DatasetError, Json
from .errors import NotFound

if TYPE_CHECKING:
    from .projects import Collection, Project

# `find_by!` raising RecordNotFound: GitLab's generic body, not "404 Merge Request Not Found".
MR_NOT_FOUND = "404 Not found"
# What an older GitLab's catch-all route answers for `/diffs`, which it does not have.
NO_ROUTE_BODY: Json = {"error": "404 Not Found"}


def load_diffs(coll: "Collection", entries: Iterable[Json], where: str) -> None:
    """Put a dataset's `{"noteable_iid", "diffs"}` entries into a project's MR collection."""
    for number, entry in enumerate(entries, 1):
        iid = entry.get("noteable_iid")
        if iid not in coll.items:
            raise DatasetError(f"{where}: entry #{number}: noteable_iid {iid!r} is not a merge request of this project")
        coll.diffs[int(iid)] = entry["diffs"]


def diff_entries(coll: "Collection") -> list[Json]:
    """The collection's diffs as dataset entries, in iid order."""
    return [{"noteable_iid": iid, "diffs": coll.diffs[iid]} for iid in sorted(coll.diffs)]


class DiffsMixin:
    """Mixed into SandboxState; relies on the attributes and lookups declared below."""

    lock: threading.RLock
    clock: SandboxClock
    # True: behave as GitLab < 15.7, where `/diffs` does not exist (404) and only `/changes` works.
    legacy_diffs: bool = False

    if TYPE_CHECKING:

        def project(self, ref: "int | str | Project") -> "Project": ...

    def _merge_request(self, proj: "Project", iid: int) -> Json:
        item = proj.merge_requests.items.get(int(iid))
        if item is None:
            raise NotFound(MR_NOT_FOUND)
        return item

    def diffs(self, project: "int | str | Project", iid: int) -> list[Json]:
        """Every changed file of the MR, in the order GitLab lists them (an MR without saved
        diffs changed nothing)."""
        proj = self.project(project)
        with self.lock:
            self._merge_request(proj, iid)
            return list(proj.merge_requests.diffs.get(int(iid), ()))

    def changes(self, project: "int | str | Project", iid: int) -> Json:
        """The deprecated `/changes` body: the MR object plus all its diffs at once."""
        proj = self.project(project)
        with self.lock:
            item = self._merge_request(proj, iid)
            diffs = list(proj.merge_requests.diffs.get(int(iid), ()))
        # The sandbox never truncates a diff list, so GitLab's `overflow` flag stays false.
        return {**item, "changes": diffs, "overflow": False}

    def set_diffs(self, project: "int | str | Project", iid: int, diffs: Iterable[Any]) -> Json:
        """Replace the MR's diffs, as pushing a new diff version does. GitLab saves the MR then, so
        updated_at moves to now unthrottled, like a direct edit (`update()`); a saved
        `changes_count` follows the new file count. Returns the updated MR."""
        proj = self.project(project)
        saved = list(diffs)
        with self.lock:
            old = self._merge_request(proj, iid)
            new = {**old, "updated_at": iso_ms(self.clock.now())}
            if "changes_count" in old:
                new["changes_count"] = str(len(saved))
            coll = proj.merge_requests
            coll.put_at(int(iid), new)
            coll.diffs[int(iid)] = saved
            return new

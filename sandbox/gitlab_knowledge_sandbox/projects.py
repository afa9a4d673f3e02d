"""A project of the in-memory GitLab: its issues and merge requests, each a `Collection` of items
with their discussions, diffs and cached sort orders."""

from dataclasses import dataclass, field

from .dataset import Json
from .itemcheck import id_key, time_key

KINDS = ("issues", "merge_requests")


@dataclass
class Collection:
    """One project's issues or merge requests, with their discussions."""

    items: dict[int, Json] = field(default_factory=dict)
    discussions: dict[int, list[Json]] = field(default_factory=dict)
    diffs: dict[int, list[Json]] = field(default_factory=dict)  # merge requests only
    # GitLab never reuses an iid, even after the item with the highest one is deleted.
    last_iid: int = 0
    # (created key, updated key, id, item) per item, built lazily and dropped on any change.
    _rows: list[tuple[int, int, int, Json]] | None = None
    _sorted: dict[tuple[str, str], list[tuple[int, int, int, Json]]] = field(default_factory=dict)

    def put(self, item: Json) -> None:
        self.items[item["iid"]] = item
        self.invalidate()

    def put_at(self, iid: int, item: Json) -> None:
        # last_iid stays: a hostile iid (1e23) must not decide the iids of items created later.
        self.items[iid] = item
        self.invalidate()

    def invalidate(self) -> None:
        self._rows = None
        self._sorted = {}

    def sorted_rows(self, order_by: str, sort: str) -> list[tuple[int, int, int, Json]]:
        cached = self._sorted.get((order_by, sort))
        if cached is not None:
            return cached
        if self._rows is None:
            self._rows = [
                (time_key(i.get("created_at")), time_key(i.get("updated_at")), id_key(i.get("id")), i)
                for i in self.items.values()
            ]
        col = 0 if order_by == "created_at" else 1
        # Ties go id-descending in both directions on purpose (DATASET.md): clients must not rely
        # on ties arriving in id order.
        if sort == "asc":
            rows = sorted(self._rows, key=lambda r: (r[col], -r[2]))
        else:
            rows = sorted(self._rows, key=lambda r: (-r[col], -r[2]))
        self._sorted[(order_by, sort)] = rows
        return rows


@dataclass
class Project:
    data: Json
    issues: Collection = field(default_factory=Collection)
    merge_requests: Collection = field(default_factory=Collection)

    def collection(self, kind: str) -> Collection:
        return self.issues if kind == "issues" else self.merge_requests

"""Checks and keys for items a dataset or a test hands the sandbox.

DATASET.md promises that any saved v4 body is served: the sandbox needs only what it orders and
addresses items by (integer id and iid, unique; ISO timestamps), refuses a dataset lacking those
with one line naming the file and the item, and serves every other field verbatim, including
shapes of older and newer GitLabs (label objects, notes without `updated_at`).
"""

from typing import Any

from .clock import ts_key
from .dataset import Dataset, DatasetError, Json


def id_key(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def time_key(value: Any) -> int:
    try:
        return ts_key(value)
    except (TypeError, ValueError, AttributeError):
        return 0


def label_name(label: Any) -> Any:
    # `with_labels_details=true` shapes: label objects instead of names.
    return label.get("name") if isinstance(label, dict) else label


def add_labels(labels: list[Any], names: list[str]) -> list[Any]:
    have = {label_name(label) for label in labels}
    objects = any(isinstance(label, dict) for label in labels)
    added = [{"id": None, "name": n} if objects else n for n in names if n not in have]
    return [*labels, *added]


def source_name(dataset: Dataset, project_id: Any, kind: str) -> str:
    if dataset.path is not None:
        return str(dataset.path / "projects" / str(project_id) / f"{kind}.jsonl")
    return f"project {project_id} {kind}"


def _describe(item: Json) -> str:
    iid, gid = item.get("iid"), item.get("id")
    return f"item id {gid!r} (iid {iid!r})" if gid is not None else f"item with iid {iid!r} and no id"


def check_item(item: Json, where: str, line: int, items: dict[int, Json], ids: set[int]) -> None:
    """What the sandbox needs to serve an item: integer id and iid, both unique, and ISO
    created_at/updated_at (it orders lists by them). Anything else is served verbatim."""
    problem = None
    gid, iid = item.get("id"), item.get("iid")
    if not isinstance(gid, int) or isinstance(gid, bool):
        problem = "needs an integer id"
    elif not isinstance(iid, int) or isinstance(iid, bool):
        problem = "needs an integer iid"
    elif iid in items:
        problem = f"repeats iid {iid} of item id {items[iid].get('id')!r} (an iid names one item per project)"
    elif gid in ids:
        problem = f"repeats id {gid} (ids are global)"
    else:
        for name in ("created_at", "updated_at"):
            try:
                ts_key(item.get(name))
            except (TypeError, ValueError, AttributeError):
                problem = f"needs an ISO 8601 {name} (got {item.get(name)!r})"
                break
    if problem:
        raise DatasetError(f"{where}: {_describe(item)}, #{line} in the file, {problem}")
    ids.add(gid)

"""Read and write the sandbox dataset directory (format: DATASET.md beside this module)."""

import gc
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "gitlab-knowledge-sandbox/1"
DIFFS_FILE = "merge_request_diffs.jsonl"
GROUPS_FILE = "groups.json"
RELEASES_FILE = "releases.jsonl"
WIKI_FILE = "wiki_pages.jsonl"  # optional: a project's wiki pages (wikis.py)

ISSUE = "Issue"
MERGE_REQUEST = "MergeRequest"

Json = dict[str, Any]


class DatasetError(Exception):
    """The dataset directory is missing, unreadable or not in the documented format."""


@dataclass
class Dataset:
    """A dataset held in memory, keyed by project id, in the same shapes as the files.

    `discussions[project_id]` keeps the file's per-parent entries verbatim
    (`{"noteable_type", "noteable_iid", "discussions": [...]}`) so a round trip is lossless;
    `diffs[project_id]` does the same for `{"noteable_iid", "diffs": [...]}` lines.
    """

    user: Json
    projects: list[Json] = field(default_factory=list)
    issues: dict[int, list[Json]] = field(default_factory=dict)
    merge_requests: dict[int, list[Json]] = field(default_factory=dict)
    discussions: dict[int, list[Json]] = field(default_factory=dict)
    diffs: dict[int, list[Json]] = field(default_factory=dict)
    wiki_pages: dict[int, list[Json]] = field(default_factory=dict)  # wikis.py
    description: str = ""
    path: Path | None = None
    # Old project paths (a rename or transfer) → the project id GitLab's redirect serves there.
    redirects: dict[str, int] = field(default_factory=dict)
    # Other users (each with its `tokens`) and their project memberships (users.py); optional.
    users: list[Json] = field(default_factory=list)
    memberships: list[Json] = field(default_factory=list)
    # GET /groups/:id objects (groups.json, optional): groups.py adds those the projects' namespaces name.
    groups: list[Json] = field(default_factory=list)
    # Releases (GET /projects/:id/releases elements) by project id; releases.jsonl, optional.
    releases: dict[int, list[Json]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Totals for summaries: documents are issues + MRs + threads with a user note + releases."""
        discussions = notes = user_threads = 0
        for entries in self.discussions.values():
            for entry in entries:
                for thread in entry.get("discussions") or ():
                    discussions += 1
                    thread_notes = thread.get("notes") or ()
                    notes += len(thread_notes)
                    if any(not n.get("system") for n in thread_notes):
                        user_threads += 1
        issues = sum(len(v) for v in self.issues.values())
        mrs = sum(len(v) for v in self.merge_requests.values())
        releases = sum(len(v) for v in self.releases.values())
        return {
            "projects": len(self.projects),
            "issues": issues,
            "merge_requests": mrs,
            "discussions": discussions,
            "notes": notes,
            "documents": issues + mrs + user_threads + releases,
        }


def _read_json(path: Path) -> Any:
    try:
        with path.open("rb") as fh:
            return json.loads(fh.read())
    except FileNotFoundError as exc:
        raise DatasetError(f"{path}: missing") from exc
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: {exc}") from exc


def _read_jsonl(path: Path, line_numbers: list[int] | None = None) -> list[Json]:
    """The file's objects; `line_numbers`, when given, receives each one's line (for errors)."""
    if not path.is_file():
        return []
    loads = json.loads
    rows: list[Json] = []
    try:
        with path.open("rb") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = loads(line)
                except ValueError as exc:
                    raise DatasetError(f"{path}:{lineno}: {exc}") from exc
                if not isinstance(row, dict):
                    raise DatasetError(f"{path}:{lineno}: expected a JSON object")
                rows.append(row)
                if line_numbers is not None:
                    line_numbers.append(lineno)
    except OSError as exc:
        raise DatasetError(f"{path}: {exc}") from exc
    return rows


# Past this many new tracked objects a load is big enough to freeze (see gc_paused).
FREEZE_AFTER_OBJECTS = 250_000


@contextmanager
def gc_paused() -> Iterator[None]:
    """Loading allocates millions of containers that all stay alive; the cyclic GC would keep
    rescanning them (about a third of the load time at 100K discussions) for nothing.

    Objects created while the GC is off all sit in the youngest generation, so the first
    collections afterwards would walk all of them twice (~0.8 s stall on the first request at
    100K discussions). After a big load they are moved to the permanent generation instead: the
    dataset is plain JSON trees without cycles, so plain refcounting still frees it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_count()[0] > FREEZE_AFTER_OBJECTS:
            gc.freeze()
        if was_enabled:
            gc.enable()


def load_dataset(directory: Path | str) -> Dataset:
    """Load a dataset directory. Raises DatasetError with a one-line reason."""
    with gc_paused():
        return _load(Path(directory))


def _load(root: Path) -> Dataset:
    if not root.is_dir():
        raise DatasetError(f"{root}: not a directory")
    meta = _read_json(root / "dataset.json")
    if not isinstance(meta, dict):
        raise DatasetError(f"{root / 'dataset.json'}: expected a JSON object")
    if meta.get("format") != FORMAT:
        raise DatasetError(f"{root / 'dataset.json'}: format is {meta.get('format')!r}, expected {FORMAT!r}")
    user = meta.get("user")
    if not isinstance(user, dict) or "id" not in user:
        raise DatasetError(f"{root / 'dataset.json'}: \"user\" must be a user object with an id")
    projects = _read_json(root / "projects.json")
    if not isinstance(projects, list) or not all(isinstance(p, dict) and "id" in p for p in projects):
        raise DatasetError(f"{root / 'projects.json'}: expected a list of project objects with ids")

    redirects = meta.get("redirects") or {}
    if not isinstance(redirects, dict) or not all(isinstance(v, int) for v in redirects.values()):
        raise DatasetError(f"{root / 'dataset.json'}: \"redirects\" must map old project paths to project ids")
    users, memberships = _read_users(root / "dataset.json", meta)
    groups = _read_json(root / GROUPS_FILE) if (root / GROUPS_FILE).is_file() else []
    if not isinstance(groups, list) or not all(isinstance(g, dict) and isinstance(g.get("id"), int)
                                               and isinstance(g.get("full_path"), str) for g in groups):
        raise DatasetError(f"{root / GROUPS_FILE}: expected a list of group objects with ids and full paths")
    data = Dataset(user=user, projects=projects, description=str(meta.get("description") or ""), path=root,
                   redirects=redirects, users=users, memberships=memberships, groups=groups)
    for project in projects:
        pid = project["id"]
        pdir = root / "projects" / str(pid)
        data.issues[pid] = _read_jsonl(pdir / "issues.jsonl")
        data.merge_requests[pid] = _read_jsonl(pdir / "merge_requests.jsonl")
        entries = _read_jsonl(pdir / "discussions.jsonl")
        for entry in entries:
            if (
                entry.get("noteable_type") not in (ISSUE, MERGE_REQUEST)
                or not isinstance(entry.get("noteable_iid"), int)
                or not isinstance(entry.get("discussions"), list)
            ):
                raise DatasetError(
                    f"{pdir / 'discussions.jsonl'}: each line needs noteable_type Issue|MergeRequest, "
                    "an integer noteable_iid and a discussions list"
                )
        data.discussions[pid] = entries
        data.diffs[pid] = _read_diffs(pdir / DIFFS_FILE, data.merge_requests[pid])
        releases = _read_jsonl(pdir / RELEASES_FILE)
        if releases:  # optional: a project without the file has none, and no entry
            data.releases[pid] = releases
        if (pdir / WIKI_FILE).exists():
            data.wiki_pages[pid] = _read_jsonl(pdir / WIKI_FILE)
    return data


def _read_users(path: Path, meta: Json) -> tuple[list[Json], list[Json]]:
    users, memberships = meta.get("users") or [], meta.get("memberships") or []
    if not isinstance(users, list) or not all(
            isinstance(u, dict) and isinstance(u.get("id"), int) and isinstance(u.get("tokens", []), list)
            for u in users):
        raise DatasetError(f"{path}: \"users\" must be a list of user objects with an integer id (and a tokens list)")
    if not isinstance(memberships, list) or not all(
            isinstance(m, dict) and all(isinstance(m.get(k), int) for k in ("project_id", "user_id", "access_level"))
            for m in memberships):
        raise DatasetError(f"{path}: \"memberships\" must be a list of {{project_id, user_id, access_level}} integers")
    return users, memberships


def _read_diffs(path: Path, merge_requests: list[Json]) -> list[Json]:
    """merge_request_diffs.jsonl, checked line by line: a diff list for an MR the project does not
    have would never be served, so it is refused rather than silently dropped."""
    iids = {m.get("iid") for m in merge_requests}
    seen: set[int] = set()
    lines: list[int] = []
    entries = _read_jsonl(path, lines)
    for lineno, entry in zip(lines, entries, strict=True):
        iid = entry.get("noteable_iid")
        diffs = entry.get("diffs")
        if not isinstance(iid, int) or isinstance(iid, bool) or not isinstance(diffs, list):
            problem = "needs an integer noteable_iid and a diffs list"
        elif iid not in iids:
            problem = f"noteable_iid {iid} is not a merge request of this project"
        elif iid in seen:
            problem = f"repeats noteable_iid {iid} (one line per merge request)"
        else:
            seen.add(iid)
            continue
        raise DatasetError(f"{path}:{lineno}: {problem}")
    return entries


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def write_meta(root: Path, user: Json, projects: list[Json], description: str = "",
               redirects: dict[str, int] | None = None, users: list[Json] | None = None,
               memberships: list[Json] | None = None, groups: list[Json] | None = None) -> None:
    """Write dataset.json and projects.json (the generator streams the JSONL files itself)."""
    root.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {"format": FORMAT, "description": description, "user": user}
    if redirects:
        meta["redirects"] = redirects
    if users:
        meta["users"] = users
    if memberships:
        meta["memberships"] = memberships
    (root / "dataset.json").write_text(json.dumps(meta, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    (root / "projects.json").write_text(
        json.dumps(projects, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )
    if groups:
        (root / GROUPS_FILE).write_text(json.dumps(groups, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def write_jsonl(path: Path, rows: Iterable[Json]) -> int:
    """Write rows one per line and return how many (an empty file for no rows, so a rewrite
    never leaves a previous dataset's rows behind)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(_dumps(row))
            fh.write("\n")
            count += 1
    return count


def write_dataset(data: Dataset, directory: Path | str) -> Path:
    """Write `data` as a dataset directory (the format load_dataset reads)."""
    root = Path(directory)
    write_meta(root, data.user, data.projects, data.description, data.redirects, data.users, data.memberships,
               groups=data.groups)
    for project in data.projects:
        pid = project["id"]
        pdir = root / "projects" / str(pid)
        pdir.mkdir(parents=True, exist_ok=True)
        write_jsonl(pdir / "issues.jsonl", data.issues.get(pid, ()))
        write_jsonl(pdir / "merge_requests.jsonl", data.merge_requests.get(pid, ()))
        write_jsonl(pdir / "discussions.jsonl", data.discussions.get(pid, ()))
        write_jsonl(pdir / DIFFS_FILE, data.diffs.get(pid, ()))
        if data.releases.get(pid):
            write_jsonl(pdir / RELEASES_FILE, data.releases[pid])
        if data.wiki_pages.get(pid):
            write_jsonl(pdir / WIKI_FILE, data.wiki_pages[pid])
    return root

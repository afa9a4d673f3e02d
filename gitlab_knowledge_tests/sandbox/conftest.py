"""Fixtures for the sandbox GitLab tests: a tiny hand-built dataset and started sandboxes."""

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from gitlab_knowledge_sandbox import DEFAULT_TOKEN, Dataset, SandboxGitLab

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
USER = {
    "id": 1,
    "username": "root",
    "name": "Administrator",
    "state": "active",
    "avatar_url": "https://gitlab.example.com/uploads/avatar.png",
    "web_url": "https://gitlab.example.com/root",
    "email": "root@example.com",
}


def author(user_id: int = 1) -> dict[str, Any]:
    return {
        "id": user_id,
        "username": f"user{user_id}",
        "name": f"User {user_id}",
        "state": "active",
        "avatar_url": "https://gitlab.example.com/a.png",
        "web_url": f"https://gitlab.example.com/user{user_id}",
    }


def project(pid: int, path: str) -> dict[str, Any]:
    return {
        "id": pid,
        "name": path.split("/")[-1],
        "path": path.split("/")[-1],
        "path_with_namespace": path,
        "created_at": f"2023-0{pid % 9 + 1}-01T00:00:00.000Z",
        "web_url": f"https://gitlab.example.com/{path}",
        "default_branch": "main",
    }


def issue(pid: int, iid: int, item_id: int, created: str, updated: str, **extra: Any) -> dict[str, Any]:
    item = {
        "id": item_id,
        "iid": iid,
        "project_id": pid,
        "title": f"Issue {iid}",
        "description": f"Description of issue {iid}",
        "state": "opened",
        "created_at": created,
        "updated_at": updated,
        "closed_at": None,
        "labels": ["bug"],
        "author": author(2),
        "user_notes_count": 99,  # deliberately wrong: the sandbox must recompute it
        "confidential": False,
    }
    item.update(extra)
    return item


def merge_request(pid: int, iid: int, item_id: int, created: str, updated: str, **extra: Any) -> dict[str, Any]:
    item = issue(pid, iid, item_id, created, updated, **extra)
    item.update(title=f"MR {iid}", source_branch=f"feature-{iid}", target_branch="main")
    item.update(extra)
    return item


def note(note_id: int, parent: dict[str, Any], noteable_type: str, created: str, *, system: bool = False,
         note_type: str | None = None, body: str | None = None) -> dict[str, Any]:
    return {
        "id": note_id,
        "type": note_type,
        "body": body or f"note {note_id}",
        "attachment": None,
        "author": author(3),
        "created_at": created,
        "updated_at": created,
        "system": system,
        "noteable_id": parent["id"],
        "noteable_type": noteable_type,
        "project_id": parent["project_id"],
        "noteable_iid": parent["iid"],
        "resolvable": noteable_type == "MergeRequest" and not system,
        "confidential": False,
        "internal": False,
    }


def thread(discussion_id: str, notes: list[dict[str, Any]], individual: bool) -> dict[str, Any]:
    return {"id": discussion_id, "individual_note": individual, "notes": notes}


def file_diff(path: str, diff: str, *, old_path: str | None = None, new_file: bool = False,
              deleted_file: bool = False) -> dict[str, Any]:
    """One element of GET .../merge_requests/:iid/diffs."""
    return {
        "old_path": old_path or path, "new_path": path,
        "a_mode": "0" if new_file else "100644", "b_mode": "0" if deleted_file else "100644",
        "diff": diff, "new_file": new_file, "renamed_file": old_path is not None and old_path != path,
        "deleted_file": deleted_file,
    }


def build_tiny_dataset() -> Dataset:
    """Two projects. Project 101 issues have tied updated_at values (iids 1, 2, 4) on purpose;
    its MR 1 changed x.py (where its DiffNote sits) and renamed y.py to z.py, MR 2 changed nothing."""
    p1, p2 = project(101, "group/project-one"), project(102, "group/project-two")
    issues = [
        issue(101, 1, 11, "2024-01-01T00:00:00.000Z", "2024-01-10T00:00:00.000Z"),
        issue(101, 2, 12, "2024-01-02T00:00:00.000Z", "2024-01-10T00:00:00.000Z"),
        issue(101, 3, 13, "2024-01-03T00:00:00.000Z", "2024-01-05T00:00:00.000Z"),
        issue(101, 4, 14, "2024-01-04T00:00:00.000Z", "2024-01-10T00:00:00.000Z", state="closed",
              closed_at="2024-01-10T00:00:00.000Z"),
        issue(101, 5, 15, "2024-01-05T00:00:00Z", "2024-01-20T08:00:00+00:00", confidential=True),
    ]
    mrs = [
        merge_request(101, 1, 21, "2024-02-01T00:00:00.000Z", "2024-02-03T00:00:00.000Z", state="merged",
                      merged_at="2024-02-03T00:00:00.000Z"),
        merge_request(101, 2, 22, "2024-02-02T00:00:00.000Z", "2024-02-02T00:00:00.000Z"),
    ]
    i1, i2, m1 = issues[0], issues[1], mrs[0]
    i1_threads = [
        thread("a" * 40, [note(101, i1, "Issue", "2024-01-02T00:00:00.000Z")], True),
        thread("b" * 40, [note(102, i1, "Issue", "2024-01-03T00:00:00.000Z", note_type="DiscussionNote"),
                          note(104, i1, "Issue", "2024-01-04T00:00:00.000Z", note_type="DiscussionNote")], False),
        thread("c" * 40, [note(103, i1, "Issue", "2024-01-03T12:00:00.000Z", system=True, body="assigned to @root")],
               True),
    ]
    i2_threads = [
        thread(f"{n:040x}", [note(200 + n, i2, "Issue", f"2024-01-05T00:00:{n:02d}.000Z")], True) for n in range(25)
    ]
    diff = note(301, m1, "MergeRequest", "2024-02-02T10:00:00.000Z", note_type="DiffNote")
    diff["position"] = {"base_sha": "a" * 40, "start_sha": "a" * 40, "head_sha": "b" * 40, "old_path": "x.py",
                        "new_path": "x.py", "position_type": "text", "old_line": None, "new_line": 3}
    m1_threads = [thread("d" * 40, [diff], False)]
    p2_issue = issue(102, 1, 16, "2024-03-01T00:00:00.000Z", "2024-03-01T00:00:00.000Z")
    return Dataset(
        user=dict(USER),
        projects=[p1, p2],
        issues={101: issues, 102: [p2_issue]},
        merge_requests={101: mrs, 102: []},
        discussions={
            101: [
                {"noteable_type": "Issue", "noteable_iid": 1, "discussions": i1_threads},
                {"noteable_type": "Issue", "noteable_iid": 2, "discussions": i2_threads},
                {"noteable_type": "MergeRequest", "noteable_iid": 1, "discussions": m1_threads},
            ],
            102: [],
        },
        diffs={
            101: [{"noteable_iid": 1, "diffs": [
                file_diff("x.py", "@@ -1,3 +1,4 @@\n import os\n \n+print(os.sep)\n def main():\n"),
                file_diff("z.py", "", old_path="y.py"),
            ]}],
            102: [],
        },
        description="tiny test dataset",
    )


@pytest.fixture
def tiny_dataset() -> Dataset:
    return build_tiny_dataset()


@pytest.fixture
def make_sandbox() -> Iterator[Callable[..., SandboxGitLab]]:
    """Start sandboxes (clock frozen at NOW unless told otherwise); all are stopped afterwards."""
    started: list[SandboxGitLab] = []

    def factory(dataset: Any = None, *, frozen: bool = True, **kwargs: Any) -> SandboxGitLab:
        sb = SandboxGitLab(dataset=dataset if dataset is not None else build_tiny_dataset(), **kwargs)
        if frozen:
            sb.clock.set(NOW)
        sb.start()
        started.append(sb)
        return sb

    yield factory
    for sb in started:
        sb.stop()


@pytest.fixture
def sandbox(make_sandbox: Callable[..., SandboxGitLab]) -> SandboxGitLab:
    return make_sandbox()


def api_client(sb: SandboxGitLab, token: str | None = DEFAULT_TOKEN, **kwargs: Any) -> httpx.Client:
    headers = {"PRIVATE-TOKEN": token} if token else {}
    kwargs.setdefault("timeout", 10.0)
    # Plain HTTP only: skipping the TLS context saves ~20 ms per client.
    kwargs.setdefault("verify", False)
    return httpx.Client(base_url=sb.url + "/api/v4", headers=headers, **kwargs)


@pytest.fixture
def client_for() -> Iterator[Callable[..., httpx.Client]]:
    """`client_for(sb, token=..., timeout=...)`: an httpx client on sb's /api/v4, closed afterwards."""
    clients: list[httpx.Client] = []

    def factory(sb: SandboxGitLab, token: str | None = DEFAULT_TOKEN, **kwargs: Any) -> httpx.Client:
        c = api_client(sb, token, **kwargs)
        clients.append(c)
        return c

    yield factory
    for c in clients:
        c.close()


@pytest.fixture
def client(sandbox: SandboxGitLab, client_for: Callable[..., httpx.Client]) -> httpx.Client:
    return client_for(sandbox)


@pytest.fixture
def now() -> datetime:
    return NOW

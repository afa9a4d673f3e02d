"""GitLab-shaped objects for things the sandbox creates (issues, MRs, notes, discussions).

Field sets follow the reference payloads (issues_list_v13.json, merge_request_single_v16.json,
discussions/*.json) and stay inside GitLab's own schemas, so clients see what a real instance sends.
"""

import hashlib
from typing import Any

from .dataset import ISSUE, MERGE_REQUEST, Json

AUTHOR_KEYS = ("id", "username", "name", "state", "avatar_url", "web_url")


def author_of(user: Json) -> Json:
    """The `UserBasic` entity GitLab nests as author/assignee/closed_by."""
    username = str(user.get("username") or f"user{user.get('id')}")
    return {
        "id": user["id"],
        "username": username,
        "name": user.get("name") or username,
        "state": user.get("state") or "active",
        "avatar_url": user.get("avatar_url") or "https://gitlab.example.com/uploads/avatar.png",
        "web_url": user.get("web_url") or f"https://gitlab.example.com/{username}",
    }


def project_web_url(project: Json) -> str:
    return str(project.get("web_url") or f"https://gitlab.example.com/{project.get('path_with_namespace')}")


def project_api_url(project: Json) -> str:
    base = project_web_url(project).split("/", 3)
    origin = "/".join(base[:3]) if len(base) >= 3 else "https://gitlab.example.com"
    return f"{origin}/api/v4/projects/{project['id']}"


def new_issue(project: Json, user: Json, issue_id: int, iid: int, fields: Json, now: str) -> Json:
    path = project.get("path_with_namespace") or str(project["id"])
    web = project_web_url(project)
    api = project_api_url(project)
    return {
        "id": issue_id,
        "iid": iid,
        "project_id": project["id"],
        "title": fields["title"],
        "description": fields.get("description"),
        "state": "opened",
        "created_at": now,
        "updated_at": now,
        "closed_at": None,
        "closed_by": None,
        "labels": fields.get("labels") or [],
        "milestone": None,
        "assignees": [],
        "author": author_of(user),
        "type": "ISSUE",
        "assignee": None,
        "user_notes_count": 0,
        "merge_requests_count": 0,
        "upvotes": 0,
        "downvotes": 0,
        "due_date": fields.get("due_date"),
        "confidential": bool(fields.get("confidential", False)),
        "discussion_locked": None,
        "issue_type": "issue",
        "web_url": f"{web}/-/issues/{iid}",
        "time_stats": _time_stats(),
        "task_completion_status": {"count": 0, "completed_count": 0},
        "has_tasks": False,
        "_links": {
            "self": f"{api}/issues/{iid}",
            "notes": f"{api}/issues/{iid}/notes",
            "award_emoji": f"{api}/issues/{iid}/award_emoji",
            "project": api,
        },
        "references": {"short": f"#{iid}", "relative": f"#{iid}", "full": f"{path}#{iid}"},
        "severity": "UNKNOWN",
        "moved_to_id": None,
        "service_desk_reply_to": None,
    }


def new_merge_request(project: Json, user: Json, mr_id: int, iid: int, fields: Json, now: str) -> Json:
    path = project.get("path_with_namespace") or str(project["id"])
    sha = hashlib.sha1(f"mr-{mr_id}-{now}".encode()).hexdigest()
    return {
        "id": mr_id,
        "iid": iid,
        "project_id": project["id"],
        "title": fields["title"],
        "description": fields.get("description"),
        "state": "opened",
        "created_at": now,
        "updated_at": now,
        "merged_by": None,
        "merge_user": None,
        "merged_at": None,
        "closed_by": None,
        "closed_at": None,
        "target_branch": fields["target_branch"],
        "source_branch": fields["source_branch"],
        "user_notes_count": 0,
        "upvotes": 0,
        "downvotes": 0,
        "author": author_of(user),
        "assignees": [],
        "assignee": None,
        "reviewers": [],
        "source_project_id": project["id"],
        "target_project_id": project["id"],
        "labels": fields.get("labels") or [],
        "draft": False,
        "work_in_progress": False,
        "milestone": None,
        "merge_when_pipeline_succeeds": False,
        "merge_status": "can_be_merged",
        "detailed_merge_status": "mergeable",
        "sha": sha,
        "merge_commit_sha": None,
        "squash_commit_sha": None,
        "discussion_locked": None,
        "should_remove_source_branch": None,
        "force_remove_source_branch": bool(fields.get("remove_source_branch", False)),
        "reference": f"!{iid}",
        "references": {"short": f"!{iid}", "relative": f"!{iid}", "full": f"{path}!{iid}"},
        "web_url": f"{project_web_url(project)}/-/merge_requests/{iid}",
        "time_stats": _time_stats(),
        "squash": bool(fields.get("squash", False)),
        "task_completion_status": {"count": 0, "completed_count": 0},
        "has_conflicts": False,
        "blocking_discussions_resolved": True,
    }


def _time_stats() -> Json:
    return {
        "time_estimate": 0,
        "total_time_spent": 0,
        "human_time_estimate": None,
        "human_total_time_spent": None,
    }


def new_note(
    *,
    note_id: int,
    parent: Json,
    noteable_type: str,
    user: Json,
    body: str,
    now: str,
    note_type: str | None,
    internal: bool = False,
    position: Json | None = None,
) -> Json:
    """A user note. Resolution fields appear only on resolvable (MR) notes, as GitLab's Note
    entity exposes them only `if: resolvable?`."""
    note: Json = {
        "id": note_id,
        "type": note_type,
        "body": body,
        "attachment": None,
        "author": author_of(user),
        "created_at": now,
        "updated_at": now,
        "system": False,
        "noteable_id": parent["id"],
        "noteable_type": noteable_type,
        "project_id": parent["project_id"],
        "noteable_iid": parent["iid"],
    }
    if position is not None:
        note["commit_id"] = position.get("head_sha")
        note["position"] = position
    resolvable = noteable_type == MERGE_REQUEST
    note["resolvable"] = resolvable
    if resolvable:
        note["resolved"] = False
        note["resolved_by"] = None
        note["resolved_at"] = None
    # GitLab still sends the deprecated `confidential` alias next to `internal`.
    note["confidential"] = internal
    note["internal"] = internal
    return note


def new_system_note(*, note_id: int, parent: Json, noteable_type: str, user: Json, body: str, now: str) -> Json:
    return {
        "id": note_id,
        "type": None,
        "body": body,
        "attachment": None,
        "author": author_of(user),
        "created_at": now,
        "updated_at": now,
        "system": True,
        "noteable_id": parent["id"],
        "noteable_type": noteable_type,
        "project_id": parent["project_id"],
        "noteable_iid": parent["iid"],
        "resolvable": False,
        "confidential": False,
        "internal": False,
    }


def discussion_id(note_id: int, salt: str = "") -> str:
    """A 40-hex id like GitLab's (a SHA1), stable for a given first note."""
    return hashlib.sha1(f"discussion-{salt}-{note_id}".encode()).hexdigest()


def new_discussion(first_note: Json, *, individual: bool, salt: str = "") -> Json:
    return {"id": discussion_id(first_note["id"], salt), "individual_note": individual, "notes": [first_note]}


def noteable_type_of(kind: str) -> str:
    return ISSUE if kind == "issues" else MERGE_REQUEST


def normalize_position(position: Any) -> Json:
    """Fill what GitLab fills for a DiffNote position the client left out."""
    if not isinstance(position, dict):
        raise ValueError("position must be an object")
    out = dict(position)
    out.setdefault("position_type", "text")
    for key in ("base_sha", "start_sha", "head_sha"):
        out.setdefault(key, None)
    out.setdefault("old_path", out.get("new_path"))
    out.setdefault("new_path", out.get("old_path"))
    out.setdefault("old_line", None)
    out.setdefault("new_line", None)
    return out

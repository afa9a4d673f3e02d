"""GitLab-shaped records for the generator (users, projects, issues, MRs, notes, positions)."""

import hashlib
import random
import time
from typing import Any

from . import vocab
from .dataset import Json
from .textgen import TextGen

HOST = "https://gitlab.example.com"
NAMESPACE = "acme"


def iso(ms: int) -> str:
    """Epoch milliseconds to GitLab's `2024-03-15T09:12:44.120Z` (integer math: no float drift)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def team(size: int) -> list[Json]:
    users = []
    for index in range(size):
        first = vocab.FIRST_NAMES[index % len(vocab.FIRST_NAMES)]
        last = vocab.LAST_NAMES[(index * 7 + 3) % len(vocab.LAST_NAMES)]
        username = f"{first.lower()}.{last.lower()}".replace("é", "e").replace("á", "a")
        users.append({
            "id": index + 1,
            "username": username,
            "name": f"{first} {last}",
            "state": "active",
            "avatar_url": f"{HOST}/uploads/-/system/user/avatar/{index + 1}/avatar.png",
            "web_url": f"{HOST}/{username}",
        })
    return users


def author(user: Json) -> Json:
    return {k: user[k] for k in ("id", "username", "name", "state", "avatar_url", "web_url")}


def current_user(user: Json) -> Json:
    """The GET /user object for the dataset's token holder."""
    return {
        **author(user),
        "locked": False,
        "created_at": "2023-01-09T08:30:00.000Z",
        "bio": "Engineering lead",
        "location": "Remote",
        "public_email": None,
        "skype": "",
        "linkedin": "",
        "twitter": "",
        "discord": "",
        "website_url": "",
        "organization": "Acme",
        "job_title": "Staff Engineer",
        "pronouns": None,
        "bot": False,
        "work_information": None,
        "local_time": None,
        "last_sign_in_at": "2026-05-30T08:00:00.000Z",
        "confirmed_at": "2023-01-09T08:31:00.000Z",
        "last_activity_on": "2026-05-30",
        "email": f"{user['username']}@example.com",
        "theme_id": 1,
        "color_scheme_id": 1,
        "projects_limit": 100000,
        "current_sign_in_at": "2026-05-30T08:00:00.000Z",
        "identities": [],
        "can_create_group": True,
        "can_create_project": True,
        "two_factor_enabled": True,
        "external": False,
        "private_profile": False,
        "commit_email": f"{user['username']}@example.com",
    }


def project(index: int, owner: Json, created_ms: int, namespace: Json | None = None) -> Json:
    """Project `index`, in the top group `acme` or in the group whose `namespace` object is given."""
    path, description = vocab.PROJECT_NAMES[index % len(vocab.PROJECT_NAMES)]
    if index >= len(vocab.PROJECT_NAMES):
        path = f"{path}-{index // len(vocab.PROJECT_NAMES) + 1}"
    full = f"{namespace['full_path'] if namespace else NAMESPACE}/{path}"
    pid = 101 + index
    web = f"{HOST}/{full}"
    name = path.replace("-", " ").title()
    return {
        "id": pid,
        "description": description,
        "name": name,
        "name_with_namespace": f"{namespace['name'] if namespace else 'Acme'} / {name}",
        "path": path,
        "path_with_namespace": full,
        "created_at": iso(created_ms - (index + 30) * 86_400_000),
        "default_branch": "main",
        "tag_list": [],
        "topics": [],
        "ssh_url_to_repo": f"git@gitlab.example.com:{full}.git",
        "http_url_to_repo": f"{web}.git",
        "web_url": web,
        "readme_url": f"{web}/-/blob/main/README.md",
        "avatar_url": None,
        "forks_count": 0,
        "star_count": 3 + index,
        "last_activity_at": None,
        "namespace": namespace or {
            "id": 10, "name": "Acme", "path": NAMESPACE, "kind": "group", "full_path": NAMESPACE,
            "parent_id": None, "avatar_url": None, "web_url": f"{HOST}/groups/{NAMESPACE}",
        },
        "visibility": "private",
        "issues_enabled": True,
        "merge_requests_enabled": True,
        "archived": False,
        "owner": None,
        "creator_id": owner["id"],
        "open_issues_count": None,
    }


def milestones(proj: Json) -> list[Json]:
    out = []
    for index, title in enumerate(("v1.4", "v1.5", "v2.0", "Backlog")):
        out.append({
            "id": proj["id"] * 10 + index, "iid": index + 1, "project_id": proj["id"], "title": title,
            "description": f"Milestone {title}", "state": "active" if index >= 2 else "closed",
            "created_at": "2024-05-01T09:00:00.000Z", "updated_at": "2024-05-01T09:00:00.000Z",
            "due_date": None, "start_date": None, "expired": False,
            "web_url": f"{proj['web_url']}/-/milestones/{index + 1}",
        })
    return out


def _labels(rng: random.Random, topic: vocab.Topic) -> list[str]:
    labels = [rng.choice(topic.labels)]
    roll = rng.random()
    for label, share in vocab.TYPE_LABELS:
        roll -= share
        if roll < 0:
            labels.append(label)
            break
    if rng.random() < 0.6:
        labels.append(rng.choice(vocab.PRIORITY_LABELS))
    if rng.random() < 0.3:
        labels.append(rng.choice(vocab.WORKFLOW_LABELS))
    return sorted(set(labels))


def _common(rng: random.Random, proj: Json, item_id: int, iid: int, who: Json, title: str, description: str,
            topic: vocab.Topic) -> Json:
    return {
        "id": item_id, "iid": iid, "project_id": proj["id"], "title": title, "description": description,
        "state": "opened", "created_at": None, "updated_at": None, "closed_at": None, "closed_by": None,
        "labels": _labels(rng, topic),
        "milestone": rng.choice(milestones(proj)) if rng.random() < 0.4 else None,
        "author": who, "user_notes_count": 0, "upvotes": rng.choice((0, 0, 0, 1, 2, 5)), "downvotes": 0,
        "discussion_locked": None,
        "time_stats": {"time_estimate": 0, "total_time_spent": 0, "human_time_estimate": None,
                       "human_total_time_spent": None},
        "task_completion_status": {"count": 0, "completed_count": 0},
    }


def issue(rng: random.Random, text: TextGen, proj: Json, topic: vocab.Topic, item_id: int, iid: int, who: Json,
          people: list[Json]) -> Json:
    item = _common(rng, proj, item_id, iid, who, text.issue_title(topic),
                   text.description(topic, vocab.ISSUE_PARAGRAPHS, 1, 4), topic)
    assignees = rng.sample(people, rng.choice((0, 1, 1, 1, 2)))
    api = f"{HOST}/api/v4/projects/{proj['id']}"
    item.update({
        "assignees": assignees, "assignee": assignees[0] if assignees else None, "type": "ISSUE",
        "merge_requests_count": rng.choice((0, 0, 1, 1, 2)),
        "due_date": None, "confidential": rng.random() < 0.05, "issue_type": "issue",
        "web_url": f"{proj['web_url']}/-/issues/{iid}",
        "references": {"short": f"#{iid}", "relative": f"#{iid}", "full": f"{proj['path_with_namespace']}#{iid}"},
        "severity": "UNKNOWN", "moved_to_id": None, "has_tasks": False,
        "_links": {"self": f"{api}/issues/{iid}", "notes": f"{api}/issues/{iid}/notes",
                   "award_emoji": f"{api}/issues/{iid}/award_emoji", "project": api},
    })
    return item


def merge_request(rng: random.Random, text: TextGen, proj: Json, topic: vocab.Topic, item_id: int, iid: int,
                  who: Json) -> Json:
    title = text.mr_title(topic)
    item = _common(rng, proj, item_id, iid, who, title, text.description(topic, vocab.MR_PARAGRAPHS, 2, 4), topic)
    slug = "-".join(w.strip('`":').lower() for w in title.split()[:4] if w.strip('`":'))
    draft = title.startswith("Draft:")
    item.update({
        "target_branch": "main", "source_branch": f"{iid}-{slug}"[:60], "merged_by": None, "merge_user": None,
        "merged_at": None, "assignees": [who], "assignee": who, "reviewers": [],
        "source_project_id": proj["id"], "target_project_id": proj["id"], "draft": draft,
        "work_in_progress": draft, "merge_when_pipeline_succeeds": False, "merge_status": "can_be_merged",
        "detailed_merge_status": "mergeable", "sha": None, "merge_commit_sha": None, "squash_commit_sha": None,
        "should_remove_source_branch": True, "force_remove_source_branch": True,
        "reference": f"!{iid}",
        "references": {"short": f"!{iid}", "relative": f"!{iid}", "full": f"{proj['path_with_namespace']}!{iid}"},
        "web_url": f"{proj['web_url']}/-/merge_requests/{iid}", "squash": rng.random() < 0.3,
        "has_conflicts": False, "blocking_discussions_resolved": True,
    })
    return item


def diff_shas(rng: random.Random) -> Json:
    base = f"{rng.getrandbits(160):040x}"
    return {"base_sha": base, "head_sha": f"{rng.getrandbits(160):040x}", "start_sha": base}


def position(rng: random.Random, topic: vocab.Topic, shas: Json | None, cache: dict[str, str]) -> Json:
    """A DiffNote position: added lines carry only new_line, removed only old_line, context both."""
    path = rng.choice(topic.files)
    digest = cache.get(path)
    if digest is None:
        digest = cache[path] = hashlib.sha1(path.encode()).hexdigest()
    line = rng.randint(5, 400)
    kind = rng.choice(("new", "new", "old", None))
    old_line = None if kind == "new" else line + rng.randint(-3, 3)
    new_line = None if kind == "old" else line
    code = f"{digest}_{old_line or line}_{new_line or line}"
    shas = shas or {"base_sha": None, "start_sha": None, "head_sha": None}
    return {
        "base_sha": shas["base_sha"], "start_sha": shas["start_sha"], "head_sha": shas["head_sha"],
        "old_path": path, "new_path": path, "position_type": "text",
        "old_line": old_line, "new_line": new_line,
        "line_range": {"start": {"line_code": code, "type": kind}, "end": {"line_code": code, "type": kind}},
    }


def note(*, note_id: int, item: Json, noteable_type: str, author: Json, body: str, created: int, updated: int,
         system: bool, note_type: str | None, internal: bool, position: Json | None) -> Json:
    out: dict[str, Any] = {
        "id": note_id, "type": None if system else note_type, "body": body, "attachment": None, "author": author,
        "created_at": iso(created), "updated_at": iso(updated), "system": system,
        "noteable_id": item["id"], "noteable_type": noteable_type, "project_id": item["project_id"],
        "noteable_iid": item["iid"],
    }
    if position is not None and not system:
        out["commit_id"] = position["head_sha"]
        out["position"] = position
    resolvable = noteable_type == "MergeRequest" and not system
    out["resolvable"] = resolvable
    if resolvable:
        out.update(resolved=False, resolved_by=None, resolved_at=None)
    out["confidential"] = internal and not system
    out["internal"] = internal and not system
    return out

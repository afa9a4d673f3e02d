"""The search document of a release (a pure function, no I/O).

One document per release, its header naming the tag and the date it shipped, so that "when did X
ship" finds the release whose notes name X and the answer is in the text itself:

    Release v2025.1.0: Token-based authentication
    Shipped 2025-03-04 as acme/platform v2025.1.0
    Milestones: 2025.1

    <the release notes>

An upcoming release (released_at in the future) says `Upcoming: planned to ship <date> as ...`.
Long notes are cut from the middle, as an issue's description is.
"""

from datetime import datetime
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.documents.build import MAX_CHARS, Document, _taken, cut_middle
from gitlab_knowledge.documents.columns import Source

KIND = kinds.RELEASE


def _day(value: Any) -> str | None:
    return value.strftime("%Y-%m-%d") if isinstance(value, datetime) else None


def release_title(release: dict[str, Any]) -> str:
    """`v2.4.0: the release's name`, or the tag alone when the name is the tag (GitLab's default)."""
    tag, name = release["tag_name"], (release.get("title") or "").strip()
    return tag if not name or name == tag else f"{tag}: {name}"


def release_documents(release: dict[str, Any], project_path: str, sync_run_id: int | None = None) -> list[Document]:
    """The document of one `releases` row."""
    tag = release["tag_name"]
    title = release_title(release)
    when = release.get("released_at") or release.get("created_at")
    day = _day(when) or "unknown date"
    header = [f"{KIND.display} {title}"]
    if release.get("upcoming_release"):
        header.append(f"Upcoming: planned to ship {day} as {project_path} {tag}")
    else:
        header.append(f"Shipped {day} as {project_path} {tag}")
    milestones = [m for m in release.get("milestones") or [] if m]
    if milestones:
        header.append("Milestones: " + ", ".join(milestones))
    head = "\n".join(header)
    notes = (release.get("description") or "").strip()
    body = cut_middle(notes, MAX_CHARS - len(head) - 2)
    raw_id = release.get("raw_payload_id")
    return [Document(
        id=f"{KIND.name}:{release['id']}", source_type=KIND.name, source_id=str(release["id"]),
        project_id=int(release["project_id"]), project_path=project_path, parent_type=KIND.name,
        parent_id=int(release["id"]), parent_iid=0, parent_title=title, title=title,
        author_username=release.get("author_username"), labels=[], state=None,
        created_at=when, updated_at=when, url=release.get("web_url"), confidential=False, internal=False,
        content_text=head + ("\n\n" + body if body else ""), truncated=body != notes,
        raw_payload_ids=[raw_id] if raw_id is not None else [], sync_run_id=sync_run_id,
        taken=_taken(Source(KIND.name, release)),
    )]

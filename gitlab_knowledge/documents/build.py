"""Search documents from normalized rows (pure functions, no I/O).

Formats (docs/ARCHITECTURE.md, "Documents"):

    Issue #234: Authentication redesign            MR !847: Refactor auth to use JWT tokens
    Labels: auth, security                         Labels: auth
    State: closed                                  State: merged
                                                   Branch: feature/jwt-auth → main
                                                   Closes: #234 Authentication redesign
    <description>                                  <description>

    [Issue #234: Authentication redesign] Discussion
    File: services/auth/jwt.py (line 42)             (DiffNote threads only)

    @johndoe (2024-03-15):
    I think we should move to JWT-based auth ...

    @janedoe (2024-03-15):
    Agreed. What about refresh token strategy?

Past MAX_CHARS (~8,000 tokens at ~4 characters a token) a document is cut from the middle: a
thread keeps its first and last notes and drops whole notes in between (then, if still too long,
the middle of those two bodies); an issue or MR keeps the start and end of its description.
"""

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.documents.columns import COLUMNS, ColumnType, Source

# The version of what this module writes (BUILDER_VERSION) and of how the embedding providers cut
# a document into windows (CHUNKING_VERSION: embeddings/embedded.py's WINDOW and OVERLAP). Bump
# one when its output changes for the same input: the next sync rebuilds every document of
# another version, and the vectors and lexical entries follow (the content hash changes), while
# `index status` shows them stale until then. Version 1.1 hashes the bare text, as every document
# did before versions were recorded, so upgrading to versioned documents re-embeds nothing.
# Builder 2: an MR's `Closes:` line no longer names a confidential issue's title.
# Builder 3: nor the title of an issue in another project (a reader of the MR may not read it).
BUILDER_VERSION = 3
CHUNKING_VERSION = 1
BASELINE_VERSION = "1.1"


def document_version() -> str:
    return f"{BUILDER_VERSION}.{CHUNKING_VERSION}"


MAX_TOKENS = 8000
CHARS_PER_TOKEN = 4
MAX_CHARS = MAX_TOKENS * CHARS_PER_TOKEN


@dataclass
class Document:
    id: str
    source_type: str  # issue | merge_request | discussion
    source_id: str
    project_id: int
    project_path: str
    parent_type: str
    parent_id: int
    parent_iid: int
    parent_title: str | None
    title: str | None
    author_username: str | None
    labels: list[str]
    state: str | None
    created_at: datetime | None
    updated_at: datetime | None
    url: str | None
    confidential: bool
    internal: bool
    content_text: str
    truncated: bool
    raw_payload_ids: list[int] = field(default_factory=list)
    sync_run_id: int | None = None
    # The values of the columns declared with a `take` (documents/columns.py), by `source`.
    taken: dict[str, Any] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        return content_hash(self.content_text)

    @property
    def meta_hash(self) -> str:
        return sha256(json.dumps(self.metadata(), sort_keys=True, default=str))

    @property
    def token_count(self) -> int:
        return -(-len(self.content_text) // CHARS_PER_TOKEN)

    def columns(self) -> dict[str, Any]:
        """The document's value of every column in COLUMNS, by `documents` column (`source`)."""
        return {c.source: self.taken[c.source] if c.take else getattr(self, c.source) for c in COLUMNS}

    def metadata(self) -> dict[str, Any]:
        """What search filters on and shows, besides the text: its columns, lists in sorted order
        (the labels' order is not a change)."""
        values = self.columns()
        return {c.source: sorted(values[c.source] or ()) if c.type is ColumnType.TEXT_LIST else values[c.source]
                for c in COLUMNS}


def _taken(source: Source) -> dict[str, Any]:
    return {c.source: c.take(source) for c in COLUMNS if c.take}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_hash(text: str) -> str:
    """The hash every index entry is compared by: the text, and the version that made it."""
    version = document_version()
    return sha256(text) if version == BASELINE_VERSION else sha256(f"gitlab_knowledge document {version}\n{text}")


def reference(kind: str, iid: int) -> str:
    item_kind = kinds.kind(kind)
    return f"{item_kind.display} {item_kind.ref(iid)}"


def cut_middle(text: str, budget: int) -> str:
    """Keep the start and end of `text` within `budget` characters, marking the cut."""
    if len(text) <= budget:
        return text
    marker = f"\n[... {len(text) - budget} characters omitted ...]\n"
    keep = max(budget - len(marker), 2)
    head = keep // 2
    return text[:head].rstrip() + marker + text[len(text) - (keep - head):].lstrip()


def parent_document(kind: str, parent: dict[str, Any], project_path: str, raw_payload_id: int | None,
                    sync_run_id: int | None, closes: Sequence[tuple[str, str | None]] = ()) -> Document:
    """The document of an issue or merge request. `closes`: the issues an MR closes, (reference,
    title): named in the text so that a query about an issue's topic finds the MR that did it."""
    header = [f"{reference(kind, parent['iid'])}: {parent.get('title') or ''}".rstrip()]
    labels = list(parent.get("labels") or [])
    if labels:
        header.append("Labels: " + ", ".join(labels))
    if parent.get("state"):
        header.append(f"State: {parent['state']}")
    if kind == kinds.MERGE_REQUEST.name and parent.get("source_branch"):
        header.append(f"Branch: {parent['source_branch']} → {parent.get('target_branch') or ''}".rstrip())
    if closes:
        header.append("Closes: " + "; ".join(f"{ref} {title or ''}".rstrip() for ref, title in closes))
    head = "\n".join(header)
    description = (parent.get("description") or "").strip()
    budget = MAX_CHARS - len(head) - 2
    body = cut_middle(description, budget)
    text = head + ("\n\n" + body if body else "")
    return Document(
        id=f"{kind}:{parent['id']}", source_type=kind, source_id=str(parent["id"]),
        project_id=int(parent["project_id"]), project_path=project_path, parent_type=kind,
        parent_id=int(parent["id"]), parent_iid=int(parent["iid"]), parent_title=parent.get("title"),
        title=parent.get("title"), author_username=parent.get("author_username"), labels=labels,
        state=parent.get("state"), created_at=parent.get("created_at"), updated_at=parent.get("updated_at"),
        url=parent.get("web_url"), confidential=bool(parent.get("confidential")), internal=False,
        content_text=text, truncated=body != description,
        raw_payload_ids=[raw_payload_id] if raw_payload_id is not None else [], sync_run_id=sync_run_id,
        taken=_taken(Source(kind, parent)),
    )


def _note_block(note: dict[str, Any]) -> str:
    created = note.get("created_at")
    day = created.strftime("%Y-%m-%d") if isinstance(created, datetime) else "unknown date"
    return f"@{note.get('author_username') or 'unknown'} ({day}):\n{(note.get('body') or '').strip()}"


def thread_document(kind: str, parent: dict[str, Any], thread: dict[str, Any], notes: list[dict[str, Any]],
                    project_path: str, parent_raw_id: int | None, sync_run_id: int | None) -> Document:
    """The document of one discussion thread (notes in thread order, system notes already gone)."""
    header = f"[{reference(kind, parent['iid'])}: {parent.get('title') or ''}] Discussion"
    diff = next((n for n in notes if n.get("new_path") or n.get("old_path")), None)
    if diff is not None:
        path = diff.get("new_path") or diff.get("old_path")
        line = diff.get("new_line") or diff.get("old_line")
        header += f"\nFile: {path}" + (f" (line {line})" if line else "")
    blocks = [_note_block(n) for n in notes]
    text, truncated = _fit_thread(header, blocks)
    stamped: list[datetime | None] = [n.get("updated_at") or n.get("created_at") for n in notes]
    stamps = [s for s in stamped if s is not None]
    first = notes[0]
    url = parent.get("web_url")
    return Document(
        id=f"{kinds.DISCUSSION}:{thread['id']}", source_type=kinds.DISCUSSION, source_id=str(thread["id"]),
        project_id=int(parent["project_id"]), project_path=project_path, parent_type=kind,
        parent_id=int(parent["id"]), parent_iid=int(parent["iid"]), parent_title=parent.get("title"),
        title=parent.get("title"), author_username=first.get("author_username"),
        labels=list(parent.get("labels") or []), state=parent.get("state"),
        created_at=first.get("created_at"), updated_at=max(stamps) if stamps else first.get("created_at"),
        url=kinds.note_url(url, first['id']) if url else None, confidential=bool(parent.get("confidential")),
        internal=any(bool(n.get("internal")) for n in notes), content_text=text, truncated=truncated,
        raw_payload_ids=[i for i in (parent_raw_id, thread.get("raw_payload_id")) if i is not None],
        sync_run_id=sync_run_id, taken=_taken(Source(kind, parent, notes)),
    )


def _fit_thread(header: str, blocks: list[str]) -> tuple[str, bool]:
    def join(parts: list[str]) -> str:
        return header + "\n\n" + "\n\n".join(parts)

    text = join(blocks)
    if len(text) <= MAX_CHARS:
        return text, False
    if len(blocks) == 1:
        return join([cut_middle(blocks[0], MAX_CHARS - len(header) - 2)]), True
    # Drop whole notes from the middle outwards, keeping the first and the last.
    head, tail = [blocks[0]], [blocks[-1]]
    middle = blocks[1:-1]
    omitted = len(middle)
    kept_front: list[str] = []
    kept_back: list[str] = []
    budget = MAX_CHARS - len(join(head + tail)) - 60
    left, right = 0, len(middle) - 1
    take_front = True
    while left <= right:
        candidate = middle[left] if take_front else middle[right]
        if len(candidate) + 2 > budget:
            break
        budget -= len(candidate) + 2
        if take_front:
            kept_front.append(candidate)
            left += 1
        else:
            kept_back.insert(0, candidate)
            right -= 1
        omitted -= 1
        take_front = not take_front
    marker = [f"[... {omitted} notes omitted ...]"] if omitted else []
    parts = head + kept_front + marker + kept_back + tail
    text = join(parts)
    if len(text) > MAX_CHARS:
        # First and last notes alone are too long: share the budget between them.
        each = (MAX_CHARS - len(header) - 80) // 2
        marker = [f"[... {len(middle)} notes omitted ...]"] if middle else []
        text = join([cut_middle(blocks[0], each)] + marker + [cut_middle(blocks[-1], each)])
    return text, True

"""One answer to "is this index entry current?", for every index.

A document is identified by its id and described by two hashes: `content_hash` (its text) and
`meta_hash` (what search filters on and shows). An index entry (a vector table's rows for the
document, or its lexical entry) records the two hashes it was built from. Comparing the two pairs
is the whole notion of fresh, and the layers (deciding what to redo), `index status`, the asset
checks and `explain` all ask `state_of` / `compare` here, so they cannot disagree: what status
calls stale is exactly what the next sync redoes.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

Hashes = tuple[str, str]  # (content_hash, meta_hash)


class EntryState(StrEnum):
    CURRENT = "indexed"  # built from this text and this metadata
    TEXT_CHANGED = "text_changed"  # built from an older text: must be rebuilt (re-embedded)
    METADATA_CHANGED = "metadata_changed"  # same text, older labels/state/title…: metadata rewrite
    MISSING = "unindexed"  # no entry yet
    FAILED = "failed"  # no entry, and the last attempt to build it failed (embeddings)

    @property
    def is_current(self) -> bool:
        return self is EntryState.CURRENT


def document_hashes(content_hash: str, meta_hash: str, builder_version: str | None, current_version: str) -> Hashes:
    """What a document's index entries must match. A document written by another builder version
    (documents/build.py) is about to be rebuilt with a new content hash, so no entry can be
    current for it: its stored hash is marked, and every entry compares as a changed text."""
    if builder_version != current_version:
        return f"outdated-builder:{content_hash}", meta_hash
    return content_hash, meta_hash


def state_of(document: Hashes, entry: Hashes | None, failed: bool = False) -> EntryState:
    if entry is None:
        return EntryState.FAILED if failed else EntryState.MISSING
    if entry[0] != document[0]:
        return EntryState.TEXT_CHANGED
    if entry[1] != document[1]:
        return EntryState.METADATA_CHANGED
    return EntryState.CURRENT


@dataclass
class Comparison:
    """Every document of a scope sorted by its entry's state, plus the entries with no document."""

    by_state: dict[EntryState, list[str]] = field(default_factory=lambda: {s: [] for s in EntryState})
    orphaned: list[str] = field(default_factory=list)

    def ids(self, *states: EntryState) -> list[str]:
        return [doc_id for s in states for doc_id in self.by_state[s]]

    @property
    def documents(self) -> int:
        return sum(len(v) for v in self.by_state.values())

    def counts(self) -> dict[str, int]:
        """The `index status` view: stale covers a changed text or changed metadata alike."""
        s = self.by_state
        return {"indexed": len(s[EntryState.CURRENT]),
                "stale": len(s[EntryState.TEXT_CHANGED]) + len(s[EntryState.METADATA_CHANGED]),
                "unindexed": len(s[EntryState.MISSING]), "failed": len(s[EntryState.FAILED]),
                "orphaned": len(self.orphaned)}


def compare(documents: Mapping[str, Hashes], entries: Mapping[str, Hashes],
            failed: set[str] | frozenset[str] = frozenset()) -> Comparison:
    out = Comparison()
    for doc_id, hashes in documents.items():
        out.by_state[state_of(hashes, entries.get(doc_id), doc_id in failed)].append(doc_id)
    out.orphaned = sorted(set(entries) - set(documents))
    return out

"""What the fused ranking cannot know by itself: whether a hit is relevant at all ("no good
match"), and that a thin thread must not outrank its own issue/MR.

**The floor.** RRF always returns something: fusing two lists of "least bad" documents gives a
confident-looking ranking for `xyznonexistent123`. A result is *weak* unless one retriever vouches
for it: it was pinned (an exact reference or identifier), its cosine is at least SEMANTIC_FLOOR,
it holds at least COVERAGE_FLOOR of the query's words, or both signals clear the lower
JOINT_FLOOR together (a paraphrase shares some words and some meaning). Calibrated on
the golden queries (every expected document clears it) and on nonsense queries (random strings,
words the corpus lacks, other languages: none of their results do). A long query (a pasted
document, more than LONG_QUERY_TERMS words) is not judged: it always shares real words.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from gitlab_knowledge import kinds
from gitlab_knowledge.search.lexical_retriever import LONG_QUERY_TERMS
from gitlab_knowledge.search.snippets import body_of

SEMANTIC_FLOOR = 0.35
COVERAGE_FLOOR = 0.5
JOINT_FLOOR = (0.28, 0.3)  # (cosine, coverage): both at once also vouch
THIN_THREAD_CHARS = 600  # characters of notes, header excluded: a short paragraph


class ByName(Protocol):
    """A document's fields read by column name: a `DocFields` record, or a dict of the same keys."""

    def __getitem__(self, name: str, /) -> Any: ...

    def get(self, name: str, default: Any = None, /) -> Any: ...


def item_key(fields: ByName) -> tuple[Any, ...]:
    """The issue/MR a document is (or is a thread on); a keyed kind's item by its key (every section
    of one wiki page is one item)."""
    keyed = kinds.keyed(fields["parent_type"])
    if keyed is not None:
        return fields["project"], fields["parent_type"], keyed.key_from_url(fields["url"])
    return fields["project"], fields["parent_type"], fields["iid"]


def items_before_threads(ranked: list[str], fields: Mapping[str, ByName],
                         bodies: Callable[[list[str]], dict[str, str]],
                         says_more: Callable[[str, str], bool] | None = None) -> list[str]:
    """A thin thread (notes under THIN_THREAD_CHARS: "LGTM", "+1") ranked above its own issue/MR
    moves below it. Such a thread matches mostly through the header repeating its parent's title,
    so it would otherwise win every search for that title. A thread whose own notes hold more of
    the query than its item does (`says_more(notes, item_text)`) matched through what it says,
    not through its header, and keeps its place. `bodies` gives documents' texts."""
    items = {item_key(fields[d]): d for d in ranked if fields[d]["source_type"] != kinds.DISCUSSION}
    position = {d: i for i, d in enumerate(ranked)}
    suspects = [d for d in ranked if fields[d]["source_type"] == kinds.DISCUSSION
                and item_key(fields[d]) in items and position[items[item_key(fields[d])]] > position[d]]
    if not suspects:
        return ranked
    texts = bodies(suspects + (sorted({items[item_key(fields[d])] for d in suspects}) if says_more else []))
    thin = {d for d in suspects if d in texts and len(body_of(texts[d]).strip()) < THIN_THREAD_CHARS
            and not (says_more and says_more(body_of(texts[d]), texts.get(items[item_key(fields[d])], "")))}
    out: list[str] = []
    placed: set[str] = set()
    for doc_id in ranked:
        if doc_id in placed:
            continue
        if doc_id in thin:
            item = items[item_key(fields[doc_id])]
            if item not in placed:
                out.append(item)
                placed.add(item)
        out.append(doc_id)
        placed.add(doc_id)
    return out


def one_per_item(ordered: list[tuple[str, str]], fields: Mapping[str, ByName]) -> list[tuple[str, str]]:
    """`--group`: each issue/MR once, as its best-ranked document (the item, or one of its threads)."""
    seen: set[tuple[Any, ...]] = set()
    out = []
    for doc_id, how in ordered:
        key = item_key(fields[doc_id])
        if key not in seen:
            seen.add(key)
            out.append((doc_id, how))
    return out


def coverage(query_terms: Sequence[str], document_terms: set[str]) -> float:
    return sum(1 for t in query_terms if t in document_terms) / len(query_terms) if query_terms else 0.0


def is_weak(match: str, similarity: float | None, covered: float | None) -> bool:
    """No retriever vouches for the result, and the two together do not either (see the module
    docstring): a paraphrase shares some words and some meaning, nonsense neither."""
    if match != "fused":
        return False
    sim = similarity if similarity is not None else 0.0
    cov = covered if covered is not None else 0.0
    return not (sim >= SEMANTIC_FLOOR or cov >= COVERAGE_FLOOR or (sim >= JOINT_FLOOR[0] and cov >= JOINT_FLOOR[1]))


def judged(query_terms: Sequence[str]) -> bool:
    """Whether the floor applies to this query at all (not to a pasted document)."""
    return len(query_terms) <= LONG_QUERY_TERMS


def reason(best_similarity: float | None, best_coverage: float | None) -> str:
    parts = []
    if best_coverage is not None:
        parts.append(f"no result holds half of the query's words (best {best_coverage:.0%})")
    if best_similarity is not None:
        parts.append(f"the closest by meaning scores {best_similarity:.2f} (floor {SEMANTIC_FLOOR})")
    return "nothing relevant: " + " and ".join(parts) if parts else "nothing relevant"

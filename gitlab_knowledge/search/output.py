"""Search output: the JSON contract (schema.json beside this file) and the human view (every
stored or asked-for text in it through terminal.clean; the JSON escapes by itself)."""

from datetime import UTC, datetime
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.search.engine import Response, Result, parent_kind, reference_of
from gitlab_knowledge.terminal import clean

SCHEMA_VERSION = 1
# How the human view marks a pinned result (a fused one is marked only when weak).
MATCH_LABELS = {"exact_reference": " [exact match]", "exact_identifier": " [exact match]",
                "exact_title": " [title match]",
                "linked": " [linked: closes or closed by the referenced item]"}


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat().replace("+00:00", "Z")


def result_json(r: Result) -> dict[str, Any]:
    f = r.fields
    return {
        "rank": r.rank, "score": r.score, "rrf_score": r.rrf_score, "match": r.match,
        "ranks": {name: r.ranks.get(name) for name in ("lexical", "semantic")},
        "retriever_scores": {name: r.retriever_scores.get(name) for name in ("lexical", "semantic")},
        "document_id": f["doc_id"], "type": f["source_type"], "parent_type": f["parent_type"],
        "project": f["project"], "iid": None if kinds.keyed(f["parent_type"]) else f["iid"], "reference": reference_of(f), "title": f["title"],
        "url": f["url"], "author": f["author"], "labels": list(f["labels"] or []), "state": f["state"],
        "created_at": _iso(f["created_at"]), "updated_at": _iso(f["updated_at"]),
        "confidential": bool(f["confidential"]), "internal": bool(f["internal"]),
        "snippet": r.snippet, "highlights": [list(h) for h in r.highlights], "weak": r.weak, "linked": r.linked,
    }


def response_json(resp: Response) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION, "query": resp.query, "mode": resp.mode,
        "effective_mode": resp.effective_mode, "took_ms": resp.took_ms, "embed_ms": resp.embed_ms,
        "model": resp.model, "rrf_k": resp.rrf_k, "filters": resp.filters.describe(), "total": resp.total,
        "limit": resp.limit, "warnings": list(resp.warnings), "no_good_match": resp.no_good_match,
        "phrases": list(resp.phrases), "excluded": list(resp.excluded),
        "expanded": [{"word": e.word, "matched": e.matched, "how": e.how} for e in resp.expanded],
        "results": [result_json(r) for r in resp.results],
    }


def headline(r: Result) -> str:
    f = r.fields
    ref = reference_of(f)
    title = f["title"] or ""
    if f["source_type"] == kinds.DISCUSSION:
        return f"Discussion on {parent_kind(f).display} {ref} - {title}"
    keyed = kinds.keyed(f["source_type"])
    return f"{keyed.display if keyed else kinds.kind(f['source_type']).display} {ref} - {title}"


def _highlight(snippet: str, ranges: list[tuple[int, int]], color: bool) -> str:
    # Piped output gets no markers: note bodies are Markdown, where ** already means bold.
    if not ranges or not color:
        return clean(snippet)
    out, last = [], 0
    start_mark, end_mark = "\x1b[1;33m", "\x1b[0m"
    for start, end in sorted(ranges):
        if start < last:
            continue
        out += [clean(snippet[last:start]), start_mark, clean(snippet[start:end]), end_mark]
        last = end
    out.append(clean(snippet[last:]))
    return "".join(out)


def expansion_line(resp: Response) -> str | None:
    """The one line saying keyword search looked for other words than typed (search/tolerance.py)."""
    if not resp.expanded:
        return None
    said = {"prefix": "a word it begins", "typo": "the nearest word"}
    return "No document has " + "; ".join(
        f"\"{clean(e.word)}\": searched \"{clean(e.matched)}\" instead ({said.get(e.how, e.how)})" for e in resp.expanded) + "."


def render_human(resp: Response, *, color: bool, explain: bool = False) -> str:
    query = clean(resp.query)
    mode = resp.effective_mode if resp.effective_mode == resp.mode else f"{resp.effective_mode} (asked: {resp.mode})"
    expanded = expansion_line(resp)
    if not resp.results:
        lines = [f"No results for \"{query}\" ({mode} search, {resp.took_ms / 1000:.2f}s)."]
        if expanded:
            lines.append(expanded)
        if resp.no_good_match:
            lines.append(resp.no_good_match[:1].upper() + resp.no_good_match[1:] + ".")
        elif not resp.filters.is_empty():
            active = {k: v for k, v in resp.filters.describe().items() if v}
            lines.append("Filters in effect: " + ", ".join(f"{k}={clean(str(v))}" for k, v in active.items())
                         + " — try fewer filters.")
        else:
            lines.append("Try other words, fewer words, or --mode semantic to search by meaning.")
        return "\n".join(lines) + "\n"
    shown = f", showing {len(resp.results)}" if resp.total > len(resp.results) else ""
    noun = "result" if resp.total == 1 else "results"
    lines = [f"Found {resp.total} {noun}{shown} ({mode} search, {resp.took_ms / 1000:.2f}s)", ""]
    if resp.no_good_match:
        lines = [f"No good match for \"{query}\" ({mode} search, {resp.took_ms / 1000:.2f}s): "
                 f"{resp.no_good_match}; the closest keyword matches follow, marked weak.", ""]
    if expanded:
        lines.insert(1, expanded)
    bold, dim, cyan, red, reset = ("\x1b[1m", "\x1b[2m", "\x1b[36m", "\x1b[31m", "\x1b[0m") if color else ("",) * 5
    for r in resp.results:
        f = r.fields
        flags = []
        if f["confidential"]:
            flags.append(f"{red}[confidential]{reset}")
        if f["internal"]:
            flags.append(f"{red}[internal]{reset}")
        exact = MATCH_LABELS.get(r.match, " [weak match]" if r.weak else "") + (" [linked]" if r.linked else "")
        lines.append(f"{bold}[{r.rank}] {clean(headline(r))}{reset} ({r.score:.2f}){exact}" + (" " + " ".join(flags) if flags else ""))
        day = f["created_at"].strftime("%Y-%m-%d") if f["created_at"] else "?"
        meta = [f"@{f['author']}" if f["author"] else "@?", day, f["project"]]
        if kinds.keyed(f["source_type"]) is not None:
            meta = [f["project"]]  # a wiki page has no author or date in GitLab's API
        if f["state"]:
            meta.append(f["state"])
        if f["labels"]:
            meta.append(", ".join(f["labels"][:6]) + ("…" if len(f["labels"]) > 6 else ""))
        lines.append(f"    {dim}{clean(' · '.join(meta))}{reset}")
        if r.snippet:
            lines.append(f"    \"…{_highlight(r.snippet, r.highlights, color)}…\"")
        if f["url"]:
            lines.append(f"    {cyan}{clean(f['url'])}{reset}")
        if explain:
            lines.append(f"    {dim}{_explain(r, resp.rrf_k)}{reset}")
        lines.append("")
    return "\n".join(lines)


def _explain(r: Result, k: int) -> str:
    parts = []
    for name in ("lexical", "semantic"):
        rank = r.ranks.get(name)
        score = r.retriever_scores.get(name)
        label = "bm25" if name == "lexical" else "cosine"
        if rank is None:
            parts.append(f"{name}: not in top-N")
        else:
            parts.append(f"{name}: rank {rank} ({label} {score:.3f}) → 1/({k}+{rank}) = {1 / (k + rank):.5f}")
    match = "" if r.match == "fused" else f"; pinned first as {r.match.replace('_', ' ')}"
    if r.match == "linked":
        match = "; pinned after the referenced item: it closes it or is closed by it"
    return "; ".join(parts) + f"; rrf = {r.rrf_score:.5f}{match}"

"""Measuring search quality on your own GitLab: nDCG@10, recall@10/@50 and MRR per mode and model.

An eval file is a JSON list of cases (the golden queries file is one):

    [{"query": "why did we choose redis",
      "expected_urls": ["https://gitlab.example.com/acme/platform/-/merge_requests/812"],
      "expected": ["acme/platform#196"],          # references: any document of that item counts
      "exclude": ["acme/platform#7"],             # removed from the ranking (the query's own item)
      "why": "..."}]

A URL target is met by the document with that URL (an item's URL, or a thread's `…#note_N`); a
reference target (`#12`, `!3`, `group/project#12`) by the first document of that item, whatever
its type. Each target counts once (binary gains), so a thread after its item adds nothing: the
ranking is judged on items found, not on documents repeated. Excluded items and URLs are taken
out of the ranking before the cut, as BEIR does with a query's own document.

`by_reference`: each case's query is an item's reference, answered by `similar` (the items most
like it: how well duplicates and prior art are found from an item, not from a typed question).
"""

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import BadValue, UsageError
from gitlab_knowledge.search.engine import Searcher, parent_kind, reference_of
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.search.query_text import MODES
from gitlab_knowledge.search.relevance import ByName
from gitlab_knowledge.search.similar import similar
from gitlab_knowledge.workspace import Workspace

DEPTH = 100  # results asked per query: recall@50 after exclusions still has 50 to look at
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Case:
    query: str
    expected: tuple[str, ...]  # URLs or references
    exclude: tuple[str, ...] = ()
    filters: dict[str, Any] = field(default_factory=dict)


@dataclass
class Run:
    """One (mode, model) over every case."""

    mode: str
    model: str | None
    effective_modes: set[str] = field(default_factory=set)
    ndcg_10: list[float] = field(default_factory=list)
    recall_10: list[float] = field(default_factory=list)
    recall_50: list[float] = field(default_factory=list)
    rr: list[float] = field(default_factory=list)
    took_ms: list[float] = field(default_factory=list)
    warnings: set[str] = field(default_factory=set)

    def summary(self) -> dict[str, Any]:
        def mean(values: list[float]) -> float:
            return round(sum(values) / len(values), 4) if values else 0.0

        took = sorted(self.took_ms)
        return {"mode": self.mode, "model": self.model, "effective_modes": sorted(self.effective_modes),
                "queries": len(self.ndcg_10), "ndcg_10": mean(self.ndcg_10), "recall_10": mean(self.recall_10),
                "recall_50": mean(self.recall_50), "mrr": mean(self.rr),
                "p50_ms": round(statistics.median(took), 1) if took else 0.0,
                "p95_ms": round(took[min(len(took) - 1, int(0.95 * len(took)))], 1) if took else 0.0,
                "warnings": sorted(self.warnings)}


def load_cases(path: Path | str) -> list[Case]:
    """Read an eval file; a malformed one is a UsageError naming the problem."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read the eval file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"the eval file {path} is not JSON: {exc}") from None
    if not isinstance(doc, list) or not doc:
        raise UsageError(f"the eval file {path} must be a non-empty JSON list of cases")
    cases = []
    for i, raw in enumerate(doc):
        if not isinstance(raw, dict) or not isinstance(raw.get("query"), str) or not raw["query"].strip():
            raise UsageError(f"the eval file {path}: case {i} needs a non-empty \"query\"")
        expected = [*raw.get("expected_urls", []), *raw.get("expected", [])]
        if not expected or not all(isinstance(e, str) and e for e in expected):
            raise UsageError(f"the eval file {path}: case {i} needs \"expected_urls\" or \"expected\" (strings)")
        exclude = raw.get("exclude", [])
        if not isinstance(exclude, list) or not all(isinstance(e, str) for e in exclude):
            raise UsageError(f"the eval file {path}: case {i} \"exclude\" must be a list of strings")
        filters = raw.get("filters", {})
        if not isinstance(filters, dict):
            raise UsageError(f"the eval file {path}: case {i} \"filters\" must be an object")
        try:
            Filters.build(**filters)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"the eval file {path}: case {i} filters: {exc}") from None
        cases.append(Case(raw["query"], tuple(dict.fromkeys(expected)), tuple(exclude), filters))
    return cases


def _item_keys(fields: ByName) -> set[str]:
    """The references a document answers to: `#12`, `group/project#12`."""
    if kinds.keyed(fields["parent_type"]) is not None:
        return {reference_of(fields), kinds.document_ref(fields["parent_type"], None, fields["url"], fields["project"])}
    kind = parent_kind(fields)
    return {kind.ref(fields["iid"]), kind.ref(fields["iid"], fields["project"])}


def judge(results: Sequence[ByName], case: Case) -> list[int]:
    """Binary gains of a ranking (documents' fields), excluded documents removed, each target once."""
    gains: list[int] = []
    found: set[str] = set()
    for fields in results:
        keys = _item_keys(fields) | {fields.get("url") or ""}
        if keys & set(case.exclude):
            continue
        hit = [t for t in case.expected if t not in found and t in keys]
        found.update(hit)
        gains.append(1 if hit else 0)
    return gains


def ndcg(gains: Sequence[int], targets: int, k: int = 10) -> float:
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains[:k]))
    ideal = sum(1 / math.log2(i + 2) for i in range(min(targets, k)))
    return dcg / ideal if ideal else 0.0


def score_case(gains: Sequence[int], targets: int) -> dict[str, float]:
    first = next((i for i, g in enumerate(gains) if g), None)
    return {"ndcg_10": ndcg(gains, targets), "recall_10": sum(gains[:10]) / targets,
            "recall_50": sum(gains[:50]) / targets, "rr": 1.0 / (first + 1) if first is not None else 0.0}


def evaluate(config: Config, cases: Sequence[Case], modes: Sequence[str] = MODES,
             models: Sequence[str | None] = (None,), per_query: bool = False,
             by_reference: bool = False) -> dict[str, Any]:
    """Every case in every (model, mode); lexical does not depend on the model and runs once.
    `by_reference`: each query is an item's reference, asked with `similar`."""
    for mode in modes:
        if mode not in MODES:
            raise BadValue("mode", mode, MODES)
    runs: list[Run] = []
    details: list[dict[str, Any]] = []
    pairs = [(m, None) for m in modes if m == "lexical"] + [(m, model) for model in models
                                                            for m in modes if m != "lexical"]
    for mode, model in pairs:
        provider, _, name = (model or "").partition(":")
        searcher = Workspace(config).searcher(provider=provider or None, model=name or None)
        run = Run(mode, model)
        for case in cases:
            filters = Filters.build(**case.filters)
            response = similar(searcher, case.query, filters, mode, DEPTH) if by_reference else \
                searcher.search(case.query, filters, mode, DEPTH)
            gains = judge([r.fields for r in response.results], case)
            scored = score_case(gains, len(case.expected))
            run.ndcg_10.append(scored["ndcg_10"])
            run.recall_10.append(scored["recall_10"])
            run.recall_50.append(scored["recall_50"])
            run.rr.append(scored["rr"])
            run.took_ms.append(response.took_ms)
            run.effective_modes.add(response.effective_mode)
            run.warnings.update(w for w in response.warnings if not w.startswith("query is "))
            if per_query:
                details.append({"mode": mode, "model": model, "query": case.query[:200],
                                **{k: round(v, 4) for k, v in scored.items()}, "took_ms": response.took_ms,
                                "top": [_label(r) for r in response.results[:5]]})
        run.model = model or _model_of(searcher, mode)
        runs.append(run)
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "queries": len(cases),
                           "runs": [r.summary() for r in runs]}
    if per_query:
        out["per_query"] = details
    return out


def _model_of(searcher: Searcher, mode: str) -> str | None:
    if mode == "lexical" or searcher._provider is None:
        return None
    return f"{searcher._provider.provider}/{searcher._provider.model}"


def _label(r: Any) -> str:
    f = r.fields
    return kinds.document_ref(f["parent_type"], f["iid"], f["url"], f["project"]) + (
        " (thread)" if f["source_type"] == "discussion" else "")


def render_table(report: dict[str, Any]) -> str:
    rows = [("mode", "model", "nDCG@10", "R@10", "R@50", "MRR", "p50 ms", "p95 ms")]
    for run in report["runs"]:
        mode = run["mode"] if run["effective_modes"] in ([run["mode"]], []) else \
            f"{run['mode']} (ran {'/'.join(run['effective_modes'])})"
        rows.append((mode, run["model"] or "-", f"{run['ndcg_10']:.3f}", f"{run['recall_10']:.3f}",
                     f"{run['recall_50']:.3f}", f"{run['mrr']:.3f}", f"{run['p50_ms']:.1f}", f"{run['p95_ms']:.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"{report['queries']} queries"]
    for r in rows:
        lines.append("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths,
                                                                                                            strict=True))))
    for run in report["runs"]:
        for warning in run["warnings"]:
            lines.append(f"warning ({run['mode']}): {warning}")
    if "per_query" in report:
        lines += ["", *_per_query_rows(report["per_query"])]
    return "\n".join(lines) + "\n"


QUERY_CHARS = 60  # a query's column in the per-query rows; --json keeps 200


def _per_query_rows(details: list[dict[str, Any]]) -> list[str]:
    """`--per-query` in the table: one row per query and run, its scores and first result."""
    from gitlab_knowledge.terminal import clean

    rows = [("mode", "model", "nDCG@10", "R@10", "R@50", "RR", "query", "first result")]
    for d in details:
        query = " ".join(clean(d["query"]).split())
        query = query if len(query) <= QUERY_CHARS else query[:QUERY_CHARS - 1] + "…"
        rows.append((d["mode"], d["model"] or "-", f"{d['ndcg_10']:.3f}", f"{d['recall_10']:.3f}",
                     f"{d['recall_50']:.3f}", f"{d['rr']:.3f}", query, clean(d["top"][0]) if d["top"] else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    numeric = range(2, 6)
    return ["  ".join(cell.rjust(w) if i in numeric else cell.ljust(w) for i, (cell, w) in
                      enumerate(zip(r, widths, strict=True))).rstrip() for r in rows]

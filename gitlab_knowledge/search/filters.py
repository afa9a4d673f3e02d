"""Search filters, declared once: FILTERS, each reading one document column and matching it one way.

The columns themselves are documents/columns.py's COLUMNS. Everything a filter does derives from
FILTERS:

- the CLI flags (`add_arguments`, used by search/arguments.py and the `similar` command), and what
  `Filters` does with its fields: validation (`Filters.build`), `is_empty()`, `pushed()` and
  `describe()` (the JSON output's `filters`);
- the LanceDB where-clause and the in-memory mask (search/semantic.py, one translation per `Match`);
- the Tantivy must-clauses (search/lexical_retriever.py `filter_queries`, one translation per `Match`);
- the JSON Schemas (search/filter_schemas.py): the MCP search tool's arguments (a filter with a
  `describe` key is an argument of that name, described by `summary`) and the `filters` object
  of search/schema.json, which is regenerated from FILTERS (a test fails while it is not).

`Filters` is written out (one typed field per FilterSpec, in FILTERS' order, defaulting to the
spec's `empty`); test_search_registry holds the two together. A new filter on a new column is
written in three files, and search/schema.json regenerated (documents/columns.py lists them). A
filter on a column already carried is a `FilterSpec` and its `Filters` field here, and
search/schema.json regenerated when it is described (`scripts/write_filter_schema.py`).
A new kind of matching (a new `Match`) also needs its translations in search/semantic.py and
search/lexical_retriever.py, and its JSON Schemas in search/filter_schemas.py.

Graph filters (`Match.GRAPH`: `--path`, `--participant`) read no column: they ask the store's
relation tables (merge request files, diff positions, note authors) which documents match, at
query time (search/graph_filters.py). Carrying such facts as columns would change the vector
table's layout, and a table of another layout is re-embedded whole. The set of matching document
ids reaches both retrievers as one more pushed-down filter (`Match.IN_SET` on the id, see
`Filters.pushed`), applied before their cut like every other filter. A new graph filter is a
`FilterSpec` here plus its query in search/graph_filters.py.
"""

import argparse
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from enum import StrEnum
from typing import Any, Self

from gitlab_knowledge import kinds
from gitlab_knowledge.documents.columns import DOC_ID
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.graph.paths import repo_path
from gitlab_knowledge.store.viewer_lens import IndexScope

DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"  # what a date filter accepts (also in its JSON Schema)
_DATE = re.compile(DATE_PATTERN)
# Both indexes keep timestamps as 64-bit nanoseconds: 1677-09-21 to 2262-04-11.
FIRST_DAY, LAST_DAY = date(1678, 1, 1), date(2262, 1, 1)


class Match(StrEnum):
    EXACT = "exact"  # the column equals the value
    ANY_OF = "any_of"  # the column equals one of the values (repeatable flag)
    ALL_OF = "all_of"  # the list column holds every value (repeatable flag)
    ON_OR_AFTER = "on_or_after"  # a timestamp on or after the start of the day
    BEFORE = "before"  # a timestamp before the start of the day
    EXCLUDE_TRUE = "exclude_true"  # a boolean flag: leave out rows whose column is true
    GRAPH = "graph"  # resolved from the store's graph tables to a set of ids (search/graph_filters.py)
    IN_SET = "in_set"  # the document id is one of a set: how resolved GRAPH filters are pushed down
    NOT_IN_SET = "not_in_set"  # the document id is none of a set: the same, when the complement is smaller
    SCOPE = "scope"  # what a shared server's user may read (store/viewer_lens.py IndexScope): no flag


REPEATABLE = (Match.ANY_OF, Match.ALL_OF)
DATES = (Match.ON_OR_AFTER, Match.BEFORE)


@dataclass(frozen=True)
class FilterSpec:
    name: str  # the `Filters` field and `Filters.build` keyword
    flag: str  # the search command's flag
    match: Match
    column: str  # a Column name
    help: str | None = None
    metavar: str | None = None
    describe: str | None = None  # its key in describe() (the JSON output), None: not reported
    strip: str = ""  # leading characters a user may type but the value never has (`@` of a username)
    choose: Callable[[str], str | None] | None = None  # ANY_OF: a typed word → its canonical value
    expects: str = ""  # ANY_OF, GRAPH: the choices or the expected form, for the error message
    clean: Callable[[str], str | None] | None = None  # GRAPH: a typed value → its canonical form (None: invalid)
    check: Callable[[str], Any] | None = None  # EXACT, ALL_OF: a typed value → what is matched (None: nothing), or BadValue
    choices: tuple[str, ...] = ()  # ANY_OF: the canonical values, listed in the JSON Schemas
    accepts: tuple[str, ...] = ()  # ANY_OF: every spelling an agent may pass (default: `choices`)
    summary: str | None = None  # the MCP search tool's description of its argument (the `describe` key)
    reported: str | None = None  # the description of its key in search/schema.json's `filters`

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def empty(self) -> Any:
        if self.match in REPEATABLE:
            return ()
        return False if self.match is Match.EXCLUDE_TRUE else None


def _source_type(word: str) -> str | None:
    kind = kinds.from_cli(word)
    if kind is not None:
        return kind.name
    keyed = kinds.keyed_from_cli(word)
    if keyed is not None:
        return keyed.name
    return kinds.DISCUSSION if word.strip().lower() in (kinds.DISCUSSION, kinds.DISCUSSION + "s") else None


def _label(label: str) -> str | None:
    """One label as GitLab names them: not blank, no comma (GitLab's separator of label lists:
    `--label a,b` would match nothing, where `--label a --label b` is what was meant)."""
    if "," in label:
        parts = [part.strip() for part in label.split(",") if part.strip()]
        # The suggestion echoes the user's text: only when it is printable (an error is one line).
        hint = (f"--label {' --label '.join(shlex.quote(part) for part in parts)}"
                if parts and all(part.isprintable() for part in parts) else "once per label")
        raise UsageError(f"--label takes one label (GitLab's label names hold no comma), got {label!r}: "
                         f"repeat it, {hint}")
    if not label.strip():
        raise UsageError(f"--label expects a label name, got {label!r}")
    return label


_TYPE_NAMES = [*(k.cli_names[0] for k in kinds.ITEM_KINDS), kinds.DISCUSSION, *(k.cli_names[0] for k in kinds.KEYED_KINDS)]
_TYPE_WORDS = ", ".join(_TYPE_NAMES[:-1]) + " or " + _TYPE_NAMES[-1]


# In the search command's flag order, which is also the order of describe().
FILTERS: tuple[FilterSpec, ...] = (
    FilterSpec("types", "--type", Match.ANY_OF, "source_type", help=f"{_TYPE_WORDS} (repeatable)", metavar="TYPE",
               describe="type", choose=_source_type, expects=_TYPE_WORDS, choices=kinds.SOURCE_TYPES,
               accepts=kinds.SOURCE_TYPE_WORDS,
               summary="Only these document types: issue, merge_request (or mr), discussion, wiki_page (or wiki), release."),
    FilterSpec("author", "--author", Match.EXACT, "author", metavar="USER", describe="author", strip="@",
               summary="Only documents by this username."),
    FilterSpec("labels", "--label", Match.ALL_OF, "labels", help="repeatable: every label must match",
               metavar="LABEL", describe="label", check=_label,
               summary="Every label must match (one label each; GitLab's label names hold no comma)."),
    FilterSpec("after", "--after", Match.ON_OR_AFTER, "created_at", help="created on or after this date",
               metavar="YYYY-MM-DD", describe="after", summary="Created on or after (YYYY-MM-DD)."),
    FilterSpec("before", "--before", Match.BEFORE, "created_at", help="created before this date",
               metavar="YYYY-MM-DD", describe="before", summary="Created before (YYYY-MM-DD)."),
    FilterSpec("project", "--project", Match.EXACT, "project", metavar="PATH", describe="project",
               summary="Only this project (group/project)."),
    FilterSpec("state", "--state", Match.EXACT, "state", help=f"{', '.join(kinds.STATES)} or {kinds.ANY_STATE}",
               metavar="STATE", describe="state", check=kinds.check_state, accepts=(*kinds.STATES, kinds.ANY_STATE),
               summary=f"{', '.join(kinds.STATES)} (the item's, for a thread too), or {kinds.ANY_STATE}."),
    FilterSpec("path", "--path", Match.GRAPH, DOC_ID, metavar="PATH", describe="path", clean=repo_path,
               expects="a file or directory path in the repository, e.g. services/auth",
               help="merge requests that changed this file or directory, and threads on its diff lines",
               summary="Only MRs that changed this file, or a file under this directory, and review threads "
                       "positioned on it (e.g. services/auth or services/auth/jwt.py).",
               reported="--path: MRs that changed this file or directory, threads on its diff lines."),
    FilterSpec("participant", "--participant", Match.GRAPH, DOC_ID, metavar="USER", describe="participant",
               strip="@", help="issues and MRs the user wrote, is assigned to or reviews; threads the user wrote in",
               summary="Only threads this username wrote a note in, and issues/MRs they authored, are assigned "
                       "or review.",
               reported="--participant: items the user wrote, is assigned to or reviews; threads the user wrote in."),
    FilterSpec("exclude_confidential", "--no-confidential", Match.EXCLUDE_TRUE, "confidential",
               help="leave out confidential issues and their threads"),
    FilterSpec("exclude_internal", "--no-internal", Match.EXCLUDE_TRUE, "internal",
               help="leave out threads with internal notes"),
)


def parse_date(text: str, flag: str) -> date:
    """ISO `YYYY-MM-DD` only; anything else is one clear line."""
    if not _DATE.match(text or ""):
        raise UsageError(f"{flag} expects a date as YYYY-MM-DD, got {text!r}")
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{flag} expects a real calendar date as YYYY-MM-DD, got {text!r}") from None
    if not FIRST_DAY <= day <= LAST_DAY:
        raise UsageError(f"{flag} expects a date from {FIRST_DAY} to {LAST_DAY} (what the indexes' timestamps "
                         f"can hold), got {text!r}")
    return day


def start_of(day: date) -> datetime:
    """A date filter compares timestamps with the start of its day (naive UTC, as stored)."""
    return datetime.combine(day, datetime.min.time())


def _parse(spec: FilterSpec, raw: Any) -> Any:
    if spec.match is Match.ANY_OF:
        chosen = []
        for word in raw or []:
            value = spec.choose(word) if spec.choose else word
            if value is None:
                raise UsageError(f"{spec.flag} expects {spec.expects}, got {word!r}")
            chosen.append(value)
        return tuple(dict.fromkeys(chosen))
    if spec.match is Match.ALL_OF:
        checked = (spec.check(value) if spec.check else value for value in raw or [])
        return tuple(dict.fromkeys(value for value in checked if value))
    if spec.match in DATES:
        return parse_date(raw, spec.flag) if raw else None
    if spec.match is Match.EXCLUDE_TRUE:
        return bool(raw)
    if spec.check and raw is not None:
        return spec.check(raw)
    value = (raw or "").strip().lstrip(spec.strip) if spec.match is Match.GRAPH else (raw or "").lstrip(spec.strip)
    if spec.clean and raw:
        cleaned = spec.clean(value)
        if cleaned is None:
            raise UsageError(f"{spec.flag} expects {spec.expects}, got {raw!r}")
        return cleaned
    if spec.match is Match.GRAPH and raw is not None and not value:
        raise UsageError(f"{spec.flag} expects a value, got {raw!r}")
    return value or None


def _check_ranges(values: dict[str, Any]) -> None:
    """A lower bound on or after an upper bound on the same column can match nothing."""
    lower = {s.column: s for s in FILTERS if s.match is Match.ON_OR_AFTER and values[s.name]}
    for upper in (s for s in FILTERS if s.match is Match.BEFORE and values[s.name]):
        low = lower.get(upper.column)
        if low is not None and values[low.name] >= values[upper.name]:
            raise UsageError(f"{low.flag} {values[low.name]} is not before {upper.flag} {values[upper.name]}: "
                             "no date can match")


def _as_json(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return value.isoformat() if isinstance(value, date) else value


# The pushed-down form of resolved graph filters (`Filters.pushed`): no flag of their own.
IN_IDS = FilterSpec("doc_ids", "--path/--participant", Match.IN_SET, DOC_ID)
NOT_IN_IDS = FilterSpec("doc_ids", "--path/--participant", Match.NOT_IN_SET, DOC_ID)
# The pushed-down form of a viewer's view: set by the MCP server, never typed.
SCOPE = FilterSpec("scope", "(the asking user's view)", Match.SCOPE, DOC_ID)


@dataclass(frozen=True)
class Filters:
    """Validated search filters: one field per FilterSpec, named as its `name`, in FILTERS' order
    (test_search_units holds the two together); each field's default is its spec's `empty`."""

    types: tuple[str, ...] = ()
    author: str | None = None
    labels: tuple[str, ...] = ()
    after: date | None = None
    before: date | None = None
    project: str | None = None
    state: str | None = None
    path: str | None = None
    participant: str | None = None
    exclude_confidential: bool = False
    exclude_internal: bool = False
    # Set by `resolved`: the documents the graph filters and the query's phrases and exclusions
    # allow (search/query_plan.py; None: nothing to resolve).
    doc_ids: frozenset[str] | None = field(default=None, repr=False)
    complement: bool = field(default=False, repr=False)
    # Set by `scoped`: what the asking user of a shared server may read (None: no viewer). Like
    # every filter it is applied inside both retrievers before their cut, so top-k stays full.
    scope: IndexScope | None = field(default=None, repr=False)

    @classmethod
    def build(cls, **raw: Any) -> Self:
        """Validated, normalized filters from what a user typed (keywords: the FilterSpec names)."""
        unknown = set(raw) - {s.name for s in FILTERS}
        if unknown:
            raise TypeError(f"unknown filters: {', '.join(sorted(unknown))}")
        values = {s.name: _parse(s, raw.get(s.name)) for s in FILTERS}
        _check_ranges(values)
        return cls(**values)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        return cls.build(**{s.name: getattr(args, s.dest) for s in FILTERS})

    def active(self) -> Iterator[tuple[FilterSpec, Any]]:
        """The filters in effect, with their values."""
        for spec in FILTERS:
            value = getattr(self, spec.name)
            if value:
                yield spec, value

    def is_empty(self) -> bool:
        return next(self.active(), None) is None

    def graph(self) -> list[tuple[FilterSpec, Any]]:
        """The graph filters in effect: resolved to `doc_ids` before a search."""
        return [(spec, value) for spec, value in self.active() if spec.match is Match.GRAPH]

    def resolved(self, doc_ids: frozenset[str], complement: bool = False) -> Self:
        """These filters with their graph filters resolved: the matching documents are `doc_ids`,
        or every document but `doc_ids` when `complement` (the smaller set to push down)."""
        return replace(self, doc_ids=doc_ids, complement=complement)

    def scoped(self, scope: IndexScope | None) -> Self:
        """These filters, seeing only what a viewer may read (store/viewer_lens.py `index_scope`)."""
        return replace(self, scope=scope)

    def pushed(self) -> Iterator[tuple[FilterSpec, Any]]:
        """What the retrievers apply: the viewer's scope, the column filters, then the graph
        filters' resolved ids."""
        if self.scope is not None:
            yield SCOPE, self.scope
        graph = False
        for spec, value in self.active():
            if spec.match is Match.GRAPH:
                graph = True
            else:
                yield spec, value
        if graph and self.doc_ids is None:
            raise AssertionError("graph filters reach a retriever unresolved (search/graph_filters.py)")
        if self.doc_ids is not None:  # the graph filters' documents, and a query's phrases and exclusions
            yield (NOT_IN_IDS if self.complement else IN_IDS), self.doc_ids

    def describe(self) -> dict[str, object]:
        return {s.describe: _as_json(getattr(self, s.name)) for s in FILTERS if s.describe}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The filter flags of the search command."""
    for spec in FILTERS:
        options: dict[str, Any] = {"help": spec.help}
        if spec.match is Match.EXCLUDE_TRUE:
            options["action"] = "store_true"
        else:
            options["metavar"] = spec.metavar
            if spec.match in REPEATABLE:
                options["action"] = "append"
        parser.add_argument(spec.flag, **options)

"""The JSON Schemas of the search filters, derived from FILTERS (search/filters.py), one shape per `Match`.

- `arguments()`: the MCP search tool's filter arguments (mcp/tools.py `SEARCH_INPUT`): every
  filter with a `describe` key is an argument of that name, described by its `summary`;
  `keywords()` turns the arguments an agent gave back into `Filters.build` keywords.
- `reported()`: the `filters` object of the search JSON (`Filters.describe()`), as
  search/schema.json publishes it. The file is the contract its readers validate against, so it
  lists every key and its type; test_search_registry fails while its `filters` differ from this,
  and `python scripts/write_filter_schema.py` rewrites them.
"""

from typing import Any

from gitlab_knowledge.search.filters import DATE_PATTERN, DATES, FILTERS, FilterSpec, Match


def _strings(spec: FilterSpec) -> dict[str, Any]:
    return {"enum": list(spec.choices)} if spec.choices else {"type": "string"}


def _argument(spec: FilterSpec) -> dict[str, Any]:
    """What an agent passes for `spec`: the form a user types on the command line (any spelling
    the filter reads, as on the command line)."""
    if spec.match in (Match.ANY_OF, Match.ALL_OF):
        items = {"enum": list(spec.accepts)} if spec.accepts else _strings(spec)
        shape: dict[str, Any] = {"type": "array", "items": items}
    elif spec.match in DATES:
        shape = {"type": "string", "pattern": DATE_PATTERN}
    elif spec.match is Match.EXCLUDE_TRUE:
        shape = {"type": "boolean"}
    else:
        shape = {"type": "string", "enum": list(spec.accepts)} if spec.accepts else {"type": "string"}
    return shape if spec.summary is None else {**shape, "description": spec.summary}


def arguments() -> dict[str, dict[str, Any]]:
    """The MCP search tool's filter arguments, in FILTERS' order."""
    return {spec.describe: _argument(spec) for spec in FILTERS if spec.describe}


def keywords(args: dict[str, Any]) -> dict[str, Any]:
    """`Filters.build` keywords from the MCP search tool's arguments (absent: None, the spec's default)."""
    return {spec.name: args.get(spec.describe) for spec in FILTERS if spec.describe}


def _reported(spec: FilterSpec) -> dict[str, Any]:
    """What describe() reports for `spec`: the validated value, as JSON."""
    if spec.match in (Match.ANY_OF, Match.ALL_OF):
        shape: dict[str, Any] = {"type": "array", "items": _strings(spec)}
    elif spec.match in DATES:
        shape = {"type": ["string", "null"], "format": "date"}
    elif spec.match is Match.EXCLUDE_TRUE:
        shape = {"type": "boolean"}
    else:
        shape = {"type": ["string", "null"]}
    return shape if spec.reported is None else {**shape, "description": spec.reported}


def reported() -> dict[str, Any]:
    """search/schema.json's `filters`: every describe() key, always present."""
    keys = [spec.describe for spec in FILTERS if spec.describe]
    return {"type": "object", "additionalProperties": False, "required": keys,
            "properties": {spec.describe: _reported(spec) for spec in FILTERS if spec.describe}}

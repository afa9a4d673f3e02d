"""Bounds on what the server hands an agent: its context window is the budget.

A body past its bound keeps its start and ends with a marker that says how much was left out and
where the whole text is, so an agent never mistakes a cut text for the full one.
"""

BODY_CHARS = 8_000  # one note or comment body
DESCRIPTION_CHARS = 12_000  # an issue's or MR's description
ITEM_NOTES = 200  # notes shown by get_issue / get_merge_request
SEARCH_LIMIT = 50  # results per search call
ITEM_LINKS = 50  # links per group in get_issue / get_merge_request
ITEM_FILES = 200  # files of a merge request in get_merge_request
GRAPH_LIST = 100  # entries per list in related and me
HISTORY_LIMIT = 50  # merge requests per file_history call


def cut(text: str, limit: int, link: str | None = None) -> str:
    """`text`, or its first `limit` characters and a marker when it is longer."""
    if len(text) <= limit:
        return text
    where = f"; the whole text: {link}" if link else ""
    return text[:limit] + f"\n\n[… cut by gitlab_knowledge: {len(text) - limit:,} more characters{where}]"

"""GitLab offset pagination: page/per_page parsing, slicing, Link and x-* headers."""

from collections.abc import Sequence
from typing import Any, TypeVar
from urllib.parse import urlencode

from .errors import BadRequest

MAX_PER_PAGE = 100
DEFAULT_PER_PAGE = 20
# "if a query returns more than 10,000 records, GitLab doesn't return x-total, x-total-pages,
# rel="last"" (doc/api/rest/index.md).
COUNT_LIMIT = 10_000

T = TypeVar("T")


def _int_param(query: dict[str, list[str]], name: str, default: int) -> int:
    values = query.get(name)
    if not values or values[-1] == "":
        return default
    try:
        return int(values[-1])
    except ValueError:
        raise BadRequest(f"{name} is invalid", {"error": f"{name} is invalid"}) from None


def page_params(query: dict[str, list[str]], default_per_page: int = DEFAULT_PER_PAGE) -> tuple[int, int]:
    """(page, per_page): page >= 1; per_page defaults when < 1 and is clamped to 100 (Kaminari's
    max_per_page), as GitLab does rather than rejecting it."""
    page = max(1, _int_param(query, "page", 1))
    per_page = _int_param(query, "per_page", default_per_page)
    if per_page < 1:
        per_page = default_per_page
    return page, min(per_page, MAX_PER_PAGE)


def paginate(
    items: Sequence[T],
    page: int,
    per_page: int,
    base_url: str,
    query_pairs: list[tuple[str, str]],
) -> tuple[list[T], dict[str, str]]:
    """One page of `items` and the headers GitLab sends with it."""
    total = len(items)
    total_pages = max(1, -(-total // per_page))
    start = (page - 1) * per_page
    chunk = list(items[start : start + per_page]) if start < total else []
    out_of_range = page > total_pages
    next_page = page + 1 if page < total_pages else None
    # Kaminari: prev_page is nil on the first page and when out of range.
    prev_page = page - 1 if page > 1 and not out_of_range else None
    counted = total <= COUNT_LIMIT

    def href(number: int) -> str:
        return f"{base_url}?{_query_with_page(query_pairs, number, per_page)}"

    links = []
    if prev_page is not None:
        links.append(f'<{href(prev_page)}>; rel="prev"')
    if next_page is not None:
        links.append(f'<{href(next_page)}>; rel="next"')
    links.append(f'<{href(1)}>; rel="first"')
    if counted:
        links.append(f'<{href(total_pages)}>; rel="last"')
    headers = {
        "Link": ", ".join(links),
        "x-next-page": str(next_page) if next_page is not None else "",
        "x-page": str(page),
        "x-per-page": str(per_page),
        "x-prev-page": str(prev_page) if prev_page is not None else "",
    }
    if counted:
        headers["x-total"] = str(total)
        headers["x-total-pages"] = str(total_pages)
    return chunk, headers


def _query_with_page(pairs: list[tuple[str, str]], page: int, per_page: int) -> str:
    """The request's own query with only `page` changed (per_page added when absent, as GitLab's
    header builder does). Keys come sorted, like Rails' `to_query`."""
    out: list[tuple[str, Any]] = [(k, v) for k, v in pairs if k != "page"]
    if not any(k == "per_page" for k, _ in out):
        out.append(("per_page", str(per_page)))
    out.append(("page", str(page)))
    out.sort(key=lambda kv: kv[0])
    return urlencode(out)

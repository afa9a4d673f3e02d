"""Offset pagination as GitLab describes it: a page, and whether it is positively the last one.

A sync removes what a complete listing leaves out, so "complete" must be GitLab's word, not the
absence of a `Link` header that something between here and GitLab may have dropped: GitLab sends
`x-next-page` (empty on the last page) with every offset page, and `x-page`/`x-total-pages` up to
10,000 items.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx


@dataclass
class Page:
    items: list[dict[str, Any]]
    next_url: str | None
    server_time: datetime | None  # GitLab's Date header: the instant this page describes
    total: int | None
    url: str = ""  # the URL this page was read from (page loops are detected by it)
    final: bool = True  # no next page, and GitLab's headers (or a short page) say this is the last


def int_header(headers: httpx.Headers, name: str) -> int | None:
    value = headers.get(name, "").strip()
    return int(value) if value.isdigit() else None


def claims_more(headers: httpx.Headers, per_page: int | None) -> bool:
    """Whether an empty page's headers announce items on it or after it."""
    page, total = int_header(headers, "x-page"), int_header(headers, "x-total")
    per_page = int_header(headers, "x-per-page") or per_page
    if headers.get("x-next-page", "").strip():
        return True
    return page is not None and total is not None and bool(per_page) and total > (page - 1) * (per_page or 0)


def says_last(headers: httpx.Headers, count: int, per_page: int | None) -> bool:
    """Whether a page without a next link is positively the last one. GitLab sends `x-next-page`
    (empty on the last page) with every offset page, and `x-page`/`x-total-pages` up to 10,000
    items; a page shorter than `per_page` is the last whatever the headers."""
    if "x-next-page" in headers:
        return headers["x-next-page"].strip() == ""
    page, pages, total = (int_header(headers, n) for n in ("x-page", "x-total-pages", "x-total"))
    per_page = int_header(headers, "x-per-page") or per_page
    if page is not None and pages is not None:
        return page >= pages
    if page is not None and total is not None and per_page:
        return page * per_page >= total
    return per_page is not None and count < per_page

"""Project wikis of the in-memory GitLab: pages keyed by slug, as GitLab's project wiki API serves
them (`GET /projects/:id/wikis[?with_content=1]`, `GET /projects/:id/wikis/:slug` with the slug
URL-encoded, `dir%2Fpage`), and the mutations tests make (add, edit, rename, delete a page, turn a
wiki off).

A dataset holds a project's pages in `projects/<id>/wiki_pages.jsonl`, one page a line
(`{"slug", "title", "format", "content"}`); a project whose record says `"wiki_enabled": false`
has its wiki turned off, and GitLab answers 404 for it. GitLab's wiki listing is not paginated:
every page comes in one array, without pagination headers.
"""

import re
import threading
from typing import Any

from .errors import BadRequest, NotFound

Json = dict[str, Any]
FORMATS = ("markdown", "rdoc", "asciidoc", "org")


def slug_of(title: str) -> str:
    """GitLab's slug for a new page's title: spaces become hyphens, a `/` makes a directory."""
    return re.sub(r"\s+", "-", title.strip())


def _page(slug: str, title: str, content: str, fmt: str) -> Json:
    if fmt not in FORMATS:
        raise BadRequest("format does not have a valid value", {"error": "format does not have a valid value"})
    return {"slug": slug, "title": title, "format": fmt, "content": content, "encoding": "UTF-8"}


class Wikis:
    """Every project's wiki: pages by slug in listing order, and the projects whose wiki is off."""

    def __init__(self, pages: dict[int, list[Json]], disabled: set[int]) -> None:
        self.lock = threading.RLock()
        self.pages: dict[int, dict[str, Json]] = {
            pid: {str(p["slug"]): _page(str(p["slug"]), str(p.get("title") or p["slug"]), str(p.get("content") or ""),
                                        str(p.get("format") or "markdown")) for p in rows}
            for pid, rows in pages.items()}
        self.disabled = set(disabled)

    def _wiki(self, pid: int) -> dict[str, Json]:
        if pid in self.disabled:
            raise NotFound("404 Not Found")
        return self.pages.setdefault(pid, {})

    def listing(self, pid: int, with_content: bool) -> list[Json]:
        with self.lock:
            pages = sorted(self._wiki(pid).values(), key=lambda p: p["slug"])
        if with_content:
            return [dict(p) for p in pages]
        return [{k: v for k, v in p.items() if k != "content"} for p in pages]

    def get(self, pid: int, slug: str) -> Json:
        with self.lock:
            page = self._wiki(pid).get(slug)
        if page is None:
            raise NotFound("404 Wiki Page Not Found")
        return dict(page)

    def add(self, pid: int, title: str, content: str, fmt: str = "markdown", slug: str | None = None) -> Json:
        with self.lock:
            slug = slug or slug_of(title)
            page = _page(slug, title.rsplit("/", 1)[-1], content, fmt)
            self._wiki(pid)[slug] = page
            return dict(page)

    def edit(self, pid: int, slug: str, content: str | None = None, title: str | None = None,
             fmt: str | None = None) -> Json:
        """GitLab's PUT: a new title moves the page to the slug the title makes (a rename)."""
        with self.lock:
            old = self.get(pid, slug)
            new_slug = slug_of(title) if title else slug
            page = _page(new_slug, (title or old["title"]).rsplit("/", 1)[-1],
                         old["content"] if content is None else content, fmt or old["format"])
            wiki = self._wiki(pid)
            del wiki[slug]
            wiki[new_slug] = page
            return dict(page)

    def delete(self, pid: int, slug: str) -> None:
        with self.lock:
            self.get(pid, slug)
            del self._wiki(pid)[slug]

    def set_enabled(self, pid: int, enabled: bool) -> None:
        with self.lock:
            (self.disabled.discard if enabled else self.disabled.add)(pid)


class WikisMixin:
    """The SandboxState's wiki methods: they take a project id or path like the others."""

    wikis: Wikis

    def project(self, ref: Any) -> Any: ...  # SandboxState's

    def _pid(self, ref: Any) -> int:
        return int(self.project(ref).data["id"])

    def wiki_pages(self, ref: Any, with_content: bool = False) -> list[Json]:
        return self.wikis.listing(self._pid(ref), with_content)

    def wiki_page(self, ref: Any, slug: str) -> Json:
        return self.wikis.get(self._pid(ref), slug)

    def add_wiki_page(self, ref: Any, title: str, content: str, fmt: str = "markdown") -> Json:
        return self.wikis.add(self._pid(ref), title, content, fmt)

    def edit_wiki_page(self, ref: Any, slug: str, content: str | None = None, title: str | None = None) -> Json:
        return self.wikis.edit(self._pid(ref), slug, content, title)

    def delete_wiki_page(self, ref: Any, slug: str) -> None:
        self.wikis.delete(self._pid(ref), slug)

    def set_wiki_enabled(self, ref: Any, enabled: bool) -> None:
        self.wikis.set_enabled(self._pid(ref), enabled)


def truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes")


def wiki_route(state: Any, rest: list[str], pid: str) -> Any:
    """The route under `/projects/:id/wikis` (api.py's Route and ApiResponse, imported late: api.py
    imports this module)."""
    from .api import ApiResponse, Route

    if not rest:
        return Route("wikis", {
            "GET": lambda r: ApiResponse(200, state.wiki_pages(pid, truthy(r.param("with_content")))),
            "POST": lambda r: ApiResponse(201, state.add_wiki_page(pid, str(r.param("title") or ""),
                                                                    str(r.param("content") or ""),
                                                                    str(r.param("format") or "markdown"))),
        })
    slug = "/".join(rest)  # `dir%2Fpage` arrives as one segment, `dir/page` unencoded as two
    return Route("wiki_page", {
        "GET": lambda r: ApiResponse(200, state.wiki_page(pid, slug)),
        "PUT": lambda r: ApiResponse(200, state.edit_wiki_page(pid, slug, r.param("content"), r.param("title"))),
        "DELETE": lambda r: ApiResponse(204, state.delete_wiki_page(pid, slug)),
    })

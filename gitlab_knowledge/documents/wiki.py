"""Search documents of a wiki page (pure functions, no I/O).

A short page is one document; a long one (over SECTION_SPLIT_CHARS) is one document per heading
section, so that a question answered by one section of a runbook finds that section rather than a
page diluted by the rest. A section keeps its page's title and its heading path:

    Wiki page: Runbook: PostgreSQL primary failover
    Section: Promote the replica

    ## Promote the replica
    For a planned switchover, ...

Headings are read in the page's format as GitLab stores it: markdown `#`, AsciiDoc and RDoc `=`,
Org `*`; lines inside fenced or delimited code blocks are never headings. A section's URL is the
page's with GitLab's heading anchor (lower case, punctuation dropped, spaces as hyphens).
"""

import re
from dataclasses import dataclass
from typing import Any

from gitlab_knowledge import kinds
from gitlab_knowledge.documents.build import MAX_CHARS, Document, _taken, cut_middle
from gitlab_knowledge.documents.columns import Source

KIND = kinds.WIKI_PAGE
SECTION_SPLIT_CHARS = 2000  # ~500 tokens: up to this, a page is one document
PATH_SEPARATOR = " › "
_HEADINGS = {
    "markdown": re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$"),
    "asciidoc": re.compile(r"^(={1,6})[ \t]+(.+?)[ \t]*$"),
    "rdoc": re.compile(r"^(={1,6})[ \t]*(.+?)[ \t]*$"),
    "org": re.compile(r"^(\*{1,6})[ \t]+(.+?)[ \t]*$"),
}
# What opens and closes a block whose lines are never headings: a markdown fence, an AsciiDoc
# delimited block, an Org source block.
_FENCE = re.compile(r"^(```|~~~|----|\.\.\.\.|#\+(?i:begin_src|begin_example|end_src|end_example))")


@dataclass(frozen=True)
class Section:
    path: tuple[str, ...]  # the headings above and of this section, outermost first
    anchor: str | None  # GitLab's anchor of its heading; None for the text before any heading
    text: str


def anchor(heading: str) -> str:
    """GitLab's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    words = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return re.sub(r" +", "-", words)


def sections(content: str, fmt: str) -> list[Section]:
    """The page cut at its headings (every level); the text before the first heading first."""
    heading_re = _HEADINGS.get(fmt, _HEADINGS["markdown"])
    out: list[Section] = []
    stack: list[tuple[int, str]] = []
    lines: list[str] = []
    current: tuple[tuple[str, ...], str | None] = ((), None)
    fenced = False

    def close() -> None:
        text = "\n".join(lines).strip()
        if text:
            out.append(Section(current[0], current[1], text))

    for line in content.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
        match = None if fenced else heading_re.match(line)
        if match is None:
            lines.append(line)
            continue
        close()
        level, title = len(match[1]), match[2].strip()
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        current = (tuple(t for _, t in stack), anchor(title))
        lines = [line]
    close()
    return out


def wiki_documents(page: dict[str, Any], project_path: str, sync_run_id: int | None = None) -> list[Document]:
    """The documents of one `wiki_pages` row: the page whole, or one per section of a long page."""
    title = page.get("title") or page["slug"]
    content = (page.get("content") or "").strip()
    if len(content) <= SECTION_SPLIT_CHARS:
        return [_document(page, project_path, sync_run_id, str(page["id"]), title, (), None, content)]
    docs = []
    for number, section in enumerate(sections(content, page.get("format") or "markdown")):
        # The page title is already said: a heading repeating it adds nothing to the path.
        path = tuple(h for h in section.path if h.strip() != title.strip())
        docs.append(_document(page, project_path, sync_run_id, f"{page['id']}#{number}", title, path,
                              section.anchor, section.text))
    return docs


def _document(page: dict[str, Any], project_path: str, sync_run_id: int | None, source_id: str, title: str,
              path: tuple[str, ...], section_anchor: str | None, body: str) -> Document:
    header = [f"{KIND.display}: {title}"]
    if path:
        header.append("Section: " + PATH_SEPARATOR.join(path))
    head = "\n".join(header)
    text = cut_middle(body, MAX_CHARS - len(head) - 2)
    url = page.get("web_url")
    raw_id = page.get("raw_payload_id")
    return Document(
        id=f"{KIND.name}:{source_id}", source_type=KIND.name, source_id=source_id,
        project_id=int(page["project_id"]), project_path=project_path, parent_type=KIND.name,
        parent_id=int(page["id"]), parent_iid=0, parent_title=title,
        title=PATH_SEPARATOR.join((title, *path)), author_username=None, labels=[], state=None,
        created_at=None, updated_at=None,
        url=f"{url}#{section_anchor}" if url and section_anchor else url, confidential=False, internal=False,
        content_text=head + ("\n\n" + text if text else ""), truncated=text != body,
        raw_payload_ids=[raw_id] if raw_id is not None else [], sync_run_id=sync_run_id,
        taken=_taken(Source(KIND.name, page)),
    )

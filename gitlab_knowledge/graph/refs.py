"""Links to GitLab issues and merge requests found in text.

`extract` reads a title, description, note or system note and returns the issues and merge
requests it points at, following GitLab's own rules for references (`#12`, `!34`,
`group/project#12`, links to this GitLab), its default closing pattern (`Closes #12` in a merge
request) and the wording of its system notes ("mentioned in merge request !34", ...).

Everything here is pure text processing: no I/O and no lookups. A target path is returned as
written (only the source's own project is normalized to its spelling); the caller matches paths
case-insensitively and drops targets it does not know. The syntax of a reference comes from
`kinds`; this module knows where GitLab reads references and what a link means.
"""

import re
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass

from gitlab_knowledge import kinds

CLOSES = "closes"
CLOSED_BY = "closed_by"
MENTIONS = "mentions"
MENTIONED_IN = "mentioned_in"
RELATED = "related"
DUPLICATE_OF = "duplicate_of"
DUPLICATED_BY = "duplicated_by"
BLOCKS = "blocks"
BLOCKED_BY = "blocked_by"
MOVED_TO = "moved_to"
MOVED_FROM = "moved_from"
# "removed the relation with #N": not a link, it undoes an earlier related or blocking one
# (graph/refresh.py drops those); never stored.
UNRELATED = "unrelated"
# Each kind and the same link read from its other end ("!847 closes #234" is "#234 closed_by !847").
INVERSE = {CLOSES: CLOSED_BY, CLOSED_BY: CLOSES, MENTIONS: MENTIONED_IN, MENTIONED_IN: MENTIONS,
           RELATED: RELATED, DUPLICATE_OF: DUPLICATED_BY, DUPLICATED_BY: DUPLICATE_OF,
           BLOCKS: BLOCKED_BY, BLOCKED_BY: BLOCKS, MOVED_TO: MOVED_FROM, MOVED_FROM: MOVED_TO}
# The kinds an "unrelated" note undoes: what GitLab's issue links hold.
ISSUE_LINK_KINDS = frozenset({RELATED, BLOCKS, BLOCKED_BY})

SOURCE_TYPES = frozenset((*(k.name for k in kinds.ITEM_KINDS), *(k.name for k in kinds.KEYED_KINDS)))
# "text": the text of a keyed kind (a wiki page's content)
FOUND_IN = frozenset({"title", "description", "note", "system_note", "text"})


@dataclass(frozen=True)
class Ref:
    kind: str  # a key of INVERSE, or UNRELATED
    target_type: str  # "issue" | "merge_request"
    target_path: str  # the target project's path_with_namespace
    target_iid: int
    text: str  # the words that made the link, e.g. "Closes #234", "!847"


# Replaces code, URLs and other text that must never yield a reference. It keeps every offset
# unchanged (so a match's span slices the original text) and, being neither a word character nor
# whitespace, it cannot join the words on either side into a reference or a closing phrase.
_BLANK = "\x00"
MAX_SCAN = 1_048_576  # GitLab's limit on a description's or a note's length, in characters

# Any URL, and the bare `www.` form that Markdown also links. All of them are blanked before plain
# references are looked for, so neither a path nor a `#5` fragment of a URL becomes a reference.
# Brackets end a URL so that Markdown links `[x](url)` and `(see url)` do not swallow the ")".
# The scheme's length is bounded so that long dotted or hyphenated words are scanned in linear time.
_URL_RE = re.compile(r"(?:\b[A-Za-z][A-Za-z0-9+.\-]{0,31}://|\bwww\.)[^\s<>()\[\]{}\"'`\x00]+")
# Sentence punctuation and Markdown emphasis after a URL belong to the prose, not to the URL.
_URL_TRAILING = ".,;:!?*_~"

# GitLab's default closing pattern (only the first letter of a keyword may be upper case),
# followed by the separators GitLab allows between the issue references it closes.
_CLOSING_RE = re.compile(
    r"\b(?:[Cc]los(?:e[sd]?|ing)|[Ff]ix(?:e[sd]|ing)?|[Rr]esolv(?:e[sd]?|ing)|[Ii]mplement(?:s|ed|ing)?):? +"
)
_CLOSING_ISSUES_WORD_RE = re.compile(r"issues? +")
_CLOSING_SEP_RE = re.compile(r" *,? +and +| *,? *")

# Code: fenced blocks (``` or ~~~, also indented in a list or quoted) and inline code spans.
_FENCE_RE = re.compile(r"[ \t]*(?:>[ \t]*)*(?P<fence>`{3,}|~{3,})(?P<info>.*)")
_BACKTICKS_RE = re.compile(r"`+")
_BLANK_LINE_RE = re.compile(r"\n[ \t]*(?=\n)")

# System notes: a phrase, then the reference(s) (`kinds.reference_at`: `project!12` with a single
# segment is a project in the same namespace).
_SYS_LIST_SEP_RE = re.compile(r",? and |, ")
# (phrase, kind, target type, several references allowed, phrase that must follow the reference)
_ISSUABLE = r"(?:issue|incident|task|work item|item)"
_SYS_PATTERNS: tuple[tuple[re.Pattern[str], str, str, bool, re.Pattern[str] | None], ...] = (
    (re.compile(r"\s*mentioned in merge request ", re.I), MENTIONED_IN, kinds.MERGE_REQUEST.name, False, None),
    (re.compile(r"\s*mentioned in issue ", re.I), MENTIONED_IN, kinds.ISSUE.name, False, None),
    (re.compile(r"\s*closed via merge request ", re.I), CLOSED_BY, kinds.MERGE_REQUEST.name, False, None),
    (re.compile(rf"\s*marked this {_ISSUABLE} as related to ", re.I), RELATED, kinds.ISSUE.name, True, None),
    # GitLab's blocking links (Premium): "marked this issue as blocking #2 and #3".
    (re.compile(rf"\s*marked this {_ISSUABLE} as blocking ", re.I), BLOCKS, kinds.ISSUE.name, True, None),
    (re.compile(rf"\s*marked this {_ISSUABLE} as blocked by ", re.I), BLOCKED_BY, kinds.ISSUE.name, True, None),
    (re.compile(r"\s*removed the relation with ", re.I), UNRELATED, kinds.ISSUE.name, True, None),
    (re.compile(r"\s*marked this issue as a duplicate of ", re.I), DUPLICATE_OF, kinds.ISSUE.name, False, None),
    (
        re.compile(r"\s*marked ", re.I),
        DUPLICATED_BY,
        kinds.ISSUE.name,
        False,
        re.compile(r" as a duplicate of this issue", re.I),
    ),
    # A moved issue: the old one says "moved to group/project#12", the new one "moved from ...".
    (re.compile(r"\s*moved to ", re.I), MOVED_TO, kinds.ISSUE.name, False, None),
    (re.compile(r"\s*moved from ", re.I), MOVED_FROM, kinds.ISSUE.name, False, None),
)


@dataclass(frozen=True)
class _Token:
    """A reference found in the text, with its span, before it is given a kind."""

    start: int
    end: int
    target_type: str
    target_path: str
    target_iid: int


def extract(
    text: str | None, *, project_path: str, gitlab_url: str, source_type: str, found_in: str
) -> list[Ref]:
    """source_type: "issue" | "merge_request" (the item the text was written in);
    found_in: "title" | "description" | "note" | "system_note"; gitlab_url: the configured GitLab base URL
    (e.g. "https://gitlab.example.com" or "http://127.0.0.1:8123", maybe with a path prefix such as
    "https://example.com/gitlab"). Returns each link once per (kind, target_type, target_path, target_iid),
    in order of first appearance."""
    if source_type not in SOURCE_TYPES:
        raise ValueError(f"unknown source_type {source_type!r}")
    if found_in not in FOUND_IN:
        raise ValueError(f"unknown found_in {found_in!r}")
    if not text:
        return []
    if found_in == "system_note":
        return _system_note(text, project_path)

    # GitLab keeps at most MAX_SCAN characters of a description or note; links past that in a
    # longer text (a hostile or broken server) are not looked for: the scan's memory is bounded.
    text = text[:MAX_SCAN]
    scan = _blank_code(text)
    tokens: list[_Token] = []
    urls: list[tuple[int, int]] = []
    for match in _URL_RE.finditer(scan):
        url = match.group().rstrip(_URL_TRAILING)
        end = match.start() + len(url)
        linked = kinds.parse_url(url, gitlab_url)
        if linked is not None:
            tokens.append(_token(linked, match.start(), end, project_path))
        urls.append((match.start(), end))
    scan = _blanked(scan, urls)
    for written, start, end in kinds.find_references(scan):
        tokens.append(_token(written, start, end, project_path))
    tokens.sort(key=lambda t: t.start)

    found: list[tuple[int, Ref]] = []
    closed: set[tuple[str, int]] = set()
    if source_type == kinds.MERGE_REQUEST.name and found_in in ("title", "description"):
        for position, ref in _closings(text, scan, tokens):
            found.append((position, ref))
            closed.add((ref.target_path.casefold(), ref.target_iid))
    for token in tokens:
        # GitLab records a closed issue as closed only, not as mentioned as well.
        if token.target_type == kinds.ISSUE.name and (token.target_path.casefold(), token.target_iid) in closed:
            continue
        ref = Ref(
            MENTIONS, token.target_type, token.target_path, token.target_iid, text[token.start : token.end]
        )
        found.append((token.start, ref))
    found.sort(key=lambda item: item[0])
    return _dedupe(ref for _, ref in found)


def _closings(text: str, scan: str, tokens: list[_Token]) -> list[tuple[int, Ref]]:
    """The issues closed by GitLab's default closing pattern: a keyword directly followed by a list
    of issue references. Words in between ("Implements the model (#234)") make it no closing."""
    by_start = {token.start: token for token in tokens}
    result: list[tuple[int, Ref]] = []
    for keyword in _CLOSING_RE.finditer(scan):
        position = keyword.end()
        phrase: list[_Token] = []
        while True:
            word = _CLOSING_ISSUES_WORD_RE.match(scan, position)
            token = by_start.get(word.end() if word else position)
            if token is None or token.target_type != kinds.ISSUE.name:
                break
            phrase.append(token)
            separator = _CLOSING_SEP_RE.match(scan, token.end)
            position = separator.end() if separator else token.end
        if phrase:
            # Every issue of one phrase cites the whole phrase: "Closes #1, #2 and g/p#3".
            words = text[keyword.start() : phrase[-1].end]
            for token in phrase:
                result.append((token.start, Ref(CLOSES, kinds.ISSUE.name, token.target_path, token.target_iid, words)))
    return result


def _system_note(text: str, project_path: str) -> list[Ref]:
    """Links stated by GitLab's own system notes. Nothing else is read from a system note: its
    references were generated by GitLab and mean exactly what the phrase says."""
    for phrase, kind, target_type, several, suffix in _SYS_PATTERNS:
        head = phrase.match(text)
        if head is None:
            continue
        position = head.end()
        tokens: list[_Token] = []
        while True:
            found = kinds.reference_at(text, position)
            if found is None or found[0].kind.name != target_type:
                break
            ref, end = found
            tokens.append(_token(ref, position, end, project_path, _sys_path(ref.project, project_path)))
            position = end
            separator = _SYS_LIST_SEP_RE.match(text, position) if several else None
            if separator is None:
                break
            position = separator.end()
        if not tokens:
            continue
        end = tokens[-1].end
        if suffix is not None:
            tail = suffix.match(text, end)
            if tail is None:
                continue
            end = tail.end()
        words = text[head.end() - len(head.group().lstrip()) : end]
        return _dedupe(Ref(kind, t.target_type, t.target_path, t.target_iid, words) for t in tokens)
    return []


def _sys_path(path: str | None, project_path: str) -> str:
    """The full path of a system note's reference: none is this project; a single segment is a
    project in this project's namespace (GitLab shortens those); otherwise it is already full."""
    if not path:
        return project_path
    if "/" in path:
        return path
    namespace, _, _ = project_path.rpartition("/")
    return f"{namespace}/{path}" if namespace else path


def _token(ref: kinds.Reference, start: int, end: int, project_path: str, path: str | None = None) -> _Token:
    """`path`: the target's full path when the reference's own needs resolving (system notes)."""
    target = path or ref.project or project_path
    return _Token(start, end, ref.kind.name, _own_spelling(target, project_path), ref.iid)


def _own_spelling(path: str, project_path: str) -> str:
    # GitLab paths are case-insensitive; the source's own project keeps one spelling.
    return project_path if path.casefold() == project_path.casefold() else path


def _blank_code(text: str) -> str:
    """`text` with fenced code blocks and inline code spans blanked, offsets unchanged.

    A fence closes at a line with the same character, at least as many times and nothing else;
    an unclosed fence runs to the end, as Markdown renders it. A code span is a run of backticks closed
    by the next run of exactly as many within the same paragraph; an unmatched run is literal."""
    lines = text.split("\n")
    out: list[str] = []
    fence: str | None = None
    for line in lines:
        if fence is not None:
            out.append(_BLANK * len(line))
            closing = _FENCE_RE.fullmatch(line)
            if closing and closing.group("fence").startswith(fence) and not closing.group("info").strip():
                fence = None
            continue
        opening = _FENCE_RE.fullmatch(line)
        # A backtick fence's info string cannot hold a backtick: "```a``` b" is inline code.
        if opening and not (opening.group("fence")[0] == "`" and "`" in opening.group("info")):
            fence = opening.group("fence")
            out.append(_BLANK * len(line))
            continue
        out.append(line)
    return _blank_code_spans("\n".join(out))


def _blank_code_spans(text: str) -> str:
    runs = [(m.start(), m.end()) for m in _BACKTICKS_RE.finditer(text)]
    if not runs:
        return text
    # For each run, the index of the next run of the same length: keeps the scan linear.
    following: list[int | None] = [None] * len(runs)
    last_seen: dict[int, int] = {}
    for index in range(len(runs) - 1, -1, -1):
        length = runs[index][1] - runs[index][0]
        following[index] = last_seen.get(length)
        last_seen[length] = index
    paragraph_ends = [m.start() for m in _BLANK_LINE_RE.finditer(text)]
    spans: list[tuple[int, int]] = []
    index = 0
    while index < len(runs):
        start, end = runs[index]
        partner = following[index]
        boundary = bisect_left(paragraph_ends, end)
        limit = paragraph_ends[boundary] if boundary < len(paragraph_ends) else len(text)
        if partner is not None and runs[partner][0] < limit:
            spans.append((start, runs[partner][1]))
            index = partner + 1
        else:
            index += 1
    return _blanked(text, spans)


def _blanked(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with the (start, end) spans, in order and not overlapping, replaced by as many
    blanks. Built from slices: a list of the text's characters would take 8 bytes a character."""
    if not spans:
        return text
    pieces, done = [], 0
    for start, end in spans:
        pieces += [text[done:start], _BLANK * (end - start)]
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


def _dedupe(refs: Iterable[Ref]) -> list[Ref]:
    """The first of each (kind, target_type, target_path, target_iid); paths compare
    case-insensitively, as GitLab's do."""
    seen: set[tuple[str, str, str, int]] = set()
    result: list[Ref] = []
    for ref in refs:
        key = (ref.kind, ref.target_type, ref.target_path.casefold(), ref.target_iid)
        if key not in seen:
            seen.add(key)
            result.append(ref)
    return result

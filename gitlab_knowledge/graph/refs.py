"""Links to GitLab issues and merge requests found in text.

`extract` reads a title, description, note or system note and returns the issues and merge
requests it points at, following GitLab's own rules for references (`#12`, `!34`,
`group/project#12`, links to this GitLab), its default closing pattern (`Closes #12` in a merge
request) and the wording of its system notes ("mentioned in merge request !34", ...).

Everything here is pure text processing: no I/O and no lookups. A target path is returned as
written (only the source's own project is normalized to its spelling); the caller matches paths
case-insensitively and drops targets it does not know.
"""

import re
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

ISSUE = "issue"
MERGE_REQUEST = "merge_request"

CLOSES = "closes"
CLOSED_BY = "closed_by"
MENTIONS = "mentions"
MENTIONED_IN = "mentioned_in"
RELATED = "related"

SOURCE_TYPES = frozenset({ISSUE, MERGE_REQUEST})
FOUND_IN = frozenset({"title", "description", "note", "system_note"})

# GitLab stores iids as 32-bit signed integers; a larger number cannot name an item.
MAX_IID = 2**31 - 1


@dataclass(frozen=True)
class Ref:
    kind: str  # "closes" | "closed_by" | "mentions" | "mentioned_in" | "related"
    target_type: str  # "issue" | "merge_request"
    target_path: str  # the target project's path_with_namespace
    target_iid: int
    text: str  # the words that made the link, e.g. "Closes #234", "!847"


# One namespace or project path segment, as GitLab allows it: letters, digits, "_", "-" and ".",
# not starting with "-" or "." and not ending with ".".
_SEG = r"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_\-])?"

# Replaces code, URLs and other text that must never yield a reference. It keeps every offset
# unchanged (so a match's span slices the original text) and, being neither a word character nor
# whitespace, it cannot join the words on either side into a reference or a closing phrase.
_BLANK = "\x00"

# A plain reference. The local form (`#12`, `!34`) needs a non-word character or the start of the
# text before the sigil, as in GitLab; "&" (HTML entities like `&#123;`) and "\" (an escaped `\#12`)
# are excluded as well. The cross-project form (`group/sub/project#12`) is ambiguous with file
# paths such as `docs/notes.md#12`; we accept that ambiguity (the caller drops unknown projects)
# but only take it when the path starts a word: at the start of the text or after whitespace,
# an opening bracket, a quote, emphasis or a list separator. A path glued to other text
# (`./docs/notes.md#12`, `see:a/b#1`) is never a reference, and never a local one either.
# Either form must not run on into a word character, and "@" after it means an email address.
_PLAIN_RE = re.compile(
    r"(?:(?<![^\s(\[{<>*\"',;])(?P<path>" + _SEG + r"(?:/" + _SEG + r")+)|(?<![\w&\\]))"
    r"(?P<sigil>[#!])(?P<iid>[0-9]+)(?![\w@])"
)

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

# System notes: a phrase, then the reference(s). A reference there may be `project!12` with a
# single segment: GitLab writes a project in the same namespace that way.
_SYS_REF_RE = re.compile(
    r"(?:(?P<path>" + _SEG + r"(?:/" + _SEG + r")*))?(?P<sigil>[#!])(?P<iid>[0-9]+)(?![\w@])"
)
_SYS_LIST_SEP_RE = re.compile(r",? and |, ")
# (phrase, kind, target type, several references allowed, phrase that must follow the reference)
_SYS_PATTERNS: tuple[tuple[re.Pattern[str], str, str, bool, re.Pattern[str] | None], ...] = (
    (re.compile(r"\s*mentioned in merge request ", re.I), MENTIONED_IN, MERGE_REQUEST, False, None),
    (re.compile(r"\s*mentioned in issue ", re.I), MENTIONED_IN, ISSUE, False, None),
    (re.compile(r"\s*closed via merge request ", re.I), CLOSED_BY, MERGE_REQUEST, False, None),
    (
        re.compile(r"\s*marked this (?:issue|incident|task|work item) as related to ", re.I),
        RELATED,
        ISSUE,
        True,
        None,
    ),
    (re.compile(r"\s*marked this issue as a duplicate of ", re.I), RELATED, ISSUE, False, None),
    (
        re.compile(r"\s*marked ", re.I),
        RELATED,
        ISSUE,
        False,
        re.compile(r" as a duplicate of this issue", re.I),
    ),
)

_SIGIL_TYPE = {"#": ISSUE, "!": MERGE_REQUEST}


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

    scan = _blank_code(text)
    url_re = _gitlab_url_re(gitlab_url)
    tokens: list[_Token] = []
    chars = list(scan)
    for match in _URL_RE.finditer(scan):
        url = match.group().rstrip(_URL_TRAILING)
        end = match.start() + len(url)
        token = _url_token(url, match.start(), end, url_re, project_path)
        if token is not None:
            tokens.append(token)
        chars[match.start() : end] = _BLANK * (end - match.start())
    scan = "".join(chars)
    for match in _PLAIN_RE.finditer(scan):
        token = _make_token(match, match.group("path") or project_path, project_path)
        if token is not None:
            tokens.append(token)
    tokens.sort(key=lambda t: t.start)

    found: list[tuple[int, Ref]] = []
    closed: set[tuple[str, int]] = set()
    if source_type == MERGE_REQUEST and found_in in ("title", "description"):
        for position, ref in _closings(text, scan, tokens):
            found.append((position, ref))
            closed.add((ref.target_path.casefold(), ref.target_iid))
    for token in tokens:
        # GitLab records a closed issue as closed only, not as mentioned as well.
        if token.target_type == ISSUE and (token.target_path.casefold(), token.target_iid) in closed:
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
            if token is None or token.target_type != ISSUE:
                break
            phrase.append(token)
            separator = _CLOSING_SEP_RE.match(scan, token.end)
            position = separator.end() if separator else token.end
        if phrase:
            # Every issue of one phrase cites the whole phrase: "Closes #1, #2 and g/p#3".
            words = text[keyword.start() : phrase[-1].end]
            for token in phrase:
                result.append((token.start, Ref(CLOSES, ISSUE, token.target_path, token.target_iid, words)))
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
            match = _SYS_REF_RE.match(text, position)
            if match is None or _SIGIL_TYPE[match.group("sigil")] != target_type:
                break
            token = _make_token(match, _sys_path(match.group("path"), project_path), project_path)
            if token is None:
                break
            tokens.append(token)
            position = match.end()
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


def _make_token(match: re.Match[str], path: str, project_path: str) -> _Token | None:
    iid = int(match.group("iid"))
    if not 1 <= iid <= MAX_IID:
        return None
    target_type = _SIGIL_TYPE[match.group("sigil")]
    return _Token(match.start(), match.end(), target_type, _own_spelling(path, project_path), iid)


def _own_spelling(path: str, project_path: str) -> str:
    # GitLab paths are case-insensitive; the source's own project keeps one spelling.
    return project_path if path.casefold() == project_path.casefold() else path


def _gitlab_url_re(gitlab_url: str) -> re.Pattern[str] | None:
    """Matches a whole URL of an issue or merge request on the configured GitLab, with or without
    the `/-/` that newer GitLab puts before `issues`, and with anything after the iid
    (`#note_1`, `?tab=...`, `/diffs`). Either scheme is accepted: http and https name the same item."""
    configured = gitlab_url.strip()
    if not configured:
        return None
    parts = urlsplit(configured if "://" in configured else f"https://{configured}")
    if not parts.hostname:
        return None
    host = re.escape(parts.hostname)
    # A default port may be written or left out; any other port must be as configured.
    port = r"(?::(?:80|443))?" if parts.port in (None, 80, 443) else f":{parts.port}"
    prefix = re.escape(parts.path.rstrip("/"))
    return re.compile(
        rf"(?i:https?://{host}{port}{prefix})/(?P<path>{_SEG}(?:/{_SEG})+?)(?:/-)?"
        r"/(?P<kind>issues|merge_requests)/(?P<iid>[0-9]+)(?:[/?#].*)?"
    )


def _url_token(
    url: str, start: int, end: int, url_re: re.Pattern[str] | None, project_path: str
) -> _Token | None:
    match = url_re.fullmatch(url) if url_re is not None else None
    if match is None:
        return None
    iid = int(match.group("iid"))
    if not 1 <= iid <= MAX_IID:
        return None
    target_type = ISSUE if match.group("kind") == "issues" else MERGE_REQUEST
    return _Token(start, end, target_type, _own_spelling(match.group("path"), project_path), iid)


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
    chars = list(text)
    index = 0
    while index < len(runs):
        start, end = runs[index]
        partner = following[index]
        boundary = bisect_left(paragraph_ends, end)
        limit = paragraph_ends[boundary] if boundary < len(paragraph_ends) else len(text)
        if partner is not None and runs[partner][0] < limit:
            close = runs[partner][1]
            chars[start:close] = _BLANK * (close - start)
            index = partner + 1
        else:
            index += 1
    return "".join(chars)


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

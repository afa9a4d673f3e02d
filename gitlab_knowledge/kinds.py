"""The vocabulary of GitLab item kinds, declared once.

An issue and a merge request are named differently in every place they appear: GitLab's API path
(`issues`), our table (`issues`), the label junction (`issue_labels`), the foreign key a thread
carries (`issue_id`), GitLab's `noteable_type` (`Issue`), the reference sigil (`#`), what a person
reads (`Issue`, `MR`) and what they type on the command line (`issue`, `mr`, `mrs`). Every module
takes these names from here, so a name means one thing everywhere: the `name` of a kind is what the
store writes in `raw_payloads.resource_type`, `sync_cursors.resource_type`, `documents.source_type`
and `documents.parent_type`.

Reference syntax lives here and nowhere else: the short forms (`#12`, `!34`, `group/sub/project#12`),
issue and merge request URLs (with or without `/-/`, under a path prefix, with a `#note_N`
fragment), how they are parsed (`parse_reference`, `parse_url`, `find_references`,
`reference_at`) and how they are printed (`Kind.ref`, `Kind.url`, `Reference`, `note_url`).
"""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote, unquote, urlsplit

DISCUSSION = "discussion"
PROJECT = "project"


@dataclass(frozen=True)
class Kind:
    name: str  # issue | merge_request: the store's word for the kind
    api_path: str  # GitLab's collection path: /projects/:id/<api_path>
    table: str  # the normalized table
    labels_table: str  # the item → label junction
    thread_column: str  # discussions' (and the junction's) foreign key to the item
    people_columns: tuple[str, ...]  # its username-list columns of people taking part besides the author
    noteable_type: str  # GitLab's noteable_type of a note or discussion on the item
    sigil: str  # the reference sigil: #12, !34
    display: str  # what a person reads: Issue, MR
    noun: str  # in a sentence: an issue, a merge request
    plural_display: str  # Issues, Merge requests
    column: str  # a table's column heading for a count of them: issues, MRs
    cli_names: tuple[str, ...]  # what a person may type for it

    @property
    def mid_sentence(self) -> str:
        """The display name mid-sentence: a word lower-cased, an acronym not ("no issue #5", "no MR !5")."""
        return self.display if self.display.isupper() else self.display.lower()

    def ref(self, iid: int | str, project: str | None = None) -> str:
        """GitLab's short reference: `#12`, or `group/project!34` with a project."""
        return f"{project or ''}{self.sigil}{iid}"

    def url(self, base_url: str, project: str, iid: int | str) -> str:
        """The item's web address as GitLab writes it: `<base>/group/project/-/issues/12`."""
        return f"{base_url.rstrip('/')}/{project}/-/{self.api_path}/{iid}"


ISSUE = Kind(name="issue", api_path="issues", table="issues", labels_table="issue_labels",
             thread_column="issue_id", people_columns=("assignees",), noteable_type="Issue", sigil="#",
             display="Issue", noun="issue", plural_display="Issues", column="issues", cli_names=("issue", "issues"))
MERGE_REQUEST = Kind(name="merge_request", api_path="merge_requests", table="merge_requests",
                     labels_table="mr_labels", thread_column="merge_request_id",
                     people_columns=("assignees", "reviewers"), noteable_type="MergeRequest",
                     sigil="!", display="MR", noun="merge request", plural_display="Merge requests", column="MRs",
                     cli_names=("mr", "mrs", "merge_request", "merge_requests", "merge-request", "merge-requests"))
ITEM_KINDS: tuple[Kind, ...] = (ISSUE, MERGE_REQUEST)


@dataclass(frozen=True)
class KeyedKind:
    """A kind of item that is not shaped like an issue: keyed within its project by a string GitLab
    gives it (a wiki page's slug, a release's tag) instead of an iid, with no reference sigil, no
    discussion threads, no labels, and listed by GitLab without `updated_after`. Such a kind has a
    path of its own through the layers (docs/ARCHITECTURE.md, "Adding a kind of item"): raw rows
    keyed `<project id>:<key>`, a normalized table whose `id` is that raw row's id, documents whose
    `parent_iid` is 0 and whose reference is `<prefix>:<key>` (read back from the document's URL)."""

    name: str  # the store's word: raw_payloads.resource_type, documents.source_type and parent_type
    api_path: str  # GitLab's collection path: /projects/:id/<api_path>
    table: str  # the normalized table (id = the raw payload's id, project_id, <key_column>)
    key_column: str  # the column holding GitLab's key: slug, tag_name
    text_column: str  # the column whose text links are read from: a page's content, a release's notes
    web_path: str  # the web address under a project: <project web_url>/-/<web_path>/<key>
    prefix: str  # the reference's prefix: wiki:runbooks/deploy
    display: str  # Wiki page
    noun: str  # a wiki page
    plural_display: str  # Wiki pages
    column: str  # a table's column heading for a count of them
    cli_names: tuple[str, ...]  # what a person may type for it

    @property
    def mid_sentence(self) -> str:
        return self.display.lower()

    def ref(self, key: str, project: str | None = None) -> str:
        """How results and answers name one: `wiki:runbooks/deploy`, `acme/platform wiki:home`."""
        return f"{project + ' ' if project else ''}{self.prefix}:{key}"

    def raw_key(self, project_id: int, key: str) -> str:
        """Its `raw_payloads.gitlab_key`: GitLab's key is unique within a project only."""
        return f"{project_id}:{key}"

    def url(self, project_web_url: str, key: str) -> str:
        return f"{project_web_url.rstrip('/')}/-/{self.web_path}/{quote(key, safe='/')}"

    def key_from_url(self, url: str | None) -> str | None:
        """The key in a URL `url()` wrote (a section's `#anchor` dropped); None for another URL."""
        if not url:
            return None
        _, found, tail = url.partition(f"/-/{self.web_path}/")
        return unquote(tail.partition("#")[0]) if found and tail else None


WIKI_PAGE = KeyedKind(name="wiki_page", api_path="wikis", table="wiki_pages", key_column="slug", text_column="content",
                      web_path="wikis",
                      prefix="wiki", display="Wiki page", noun="wiki page", plural_display="Wiki pages", column="wiki",
                      cli_names=("wiki", "wikis", "wiki_page", "wiki_pages", "wiki-page", "wiki-pages"))
RELEASE = KeyedKind(name="release", api_path="releases", table="releases", key_column="tag_name",
                    text_column="description", web_path="releases", prefix="release", display="Release", noun="release",
                    plural_display="Releases", column="releases", cli_names=("release", "releases"))
KEYED_KINDS: tuple[KeyedKind, ...] = (WIKI_PAGE, RELEASE)
_BY_KEYED_NAME = {k.name: k for k in KEYED_KINDS}
_BY_KEYED_CLI = {alias: k for k in KEYED_KINDS for alias in k.cli_names}


def keyed(name: str | None) -> KeyedKind | None:
    """The keyed kind by its store name (`wiki_page`), or None for anything else (an issue's kind)."""
    return _BY_KEYED_NAME.get(name or "")


def keyed_from_cli(word: str) -> KeyedKind | None:
    """What a person typed (`wiki`, `wiki-pages`), or None if it names no keyed kind."""
    return _BY_KEYED_CLI.get(word.strip().lower())


def document_ref(parent_type: str | None, iid: int | None, url: str | None, project: str | None = None) -> str:
    """How a document's item is named from the metadata both indexes carry: `#12`, `!34`, or for
    a keyed kind its key, read back from the document's URL (`wiki:runbooks/deploy`)."""
    keyed_kind = keyed(parent_type)
    if keyed_kind is not None:
        return keyed_kind.ref(keyed_kind.key_from_url(url) or "?", project)
    return _BY_NAME.get(parent_type or "", ISSUE).ref(iid if iid is not None else "?", project)


# What a document can be.
SOURCE_TYPES: tuple[str, ...] = (*(k.name for k in ITEM_KINDS), DISCUSSION, *(k.name for k in KEYED_KINDS))

# Every word an input takes for a document type (a person's `mr`, the JSON's `merge_request`): the
# MCP search tool's `type` as the search command's --type.
SOURCE_TYPE_WORDS: tuple[str, ...] = (*(word for k in ITEM_KINDS for word in k.cli_names), DISCUSSION, DISCUSSION + "s",
                                      *(word for k in KEYED_KINDS for word in k.cli_names))
_BY_NAME = {k.name: k for k in ITEM_KINDS}
_BY_SIGIL = {k.sigil: k for k in ITEM_KINDS}
_BY_NOTEABLE = {k.noteable_type: k for k in ITEM_KINDS}
_BY_API_PATH = {k.api_path: k for k in ITEM_KINDS}
_BY_CLI = {alias: k for k in ITEM_KINDS for alias in k.cli_names}

# GitLab's item states (`reopened` is what GitLabs before 10.x stored), and `all`, its word for any:
# what `list --state` and search's state filter take.
STATES = ("opened", "closed", "merged", "locked", "reopened")
ANY_STATE = "all"


def check_state(word: str) -> str | None:
    """The state a filter keeps (None: any) from what was typed; anything else is one line naming
    the valid ones (`list --state`, search's `--state` and the MCP search tool all ask here)."""
    from gitlab_knowledge.errors import BadValue

    state = word.strip().lower()
    if state == ANY_STATE:
        return None
    if state not in STATES:
        raise BadValue("state", word, (*STATES, ANY_STATE))
    return state


def kind(name: str) -> Kind:
    """The kind by its store name (`issue`, `merge_request`); KeyError for anything else."""
    return _BY_NAME[name]


def by_sigil(sigil: str) -> Kind:
    return _BY_SIGIL[sigil]


def by_noteable_type(noteable_type: str) -> Kind:
    return _BY_NOTEABLE[noteable_type]


def by_api_path(path: str) -> Kind:
    return _BY_API_PATH[path]


def from_cli(word: str) -> Kind | None:
    """What a person typed (`mr`, `issues`, `Merge_Requests`), or None if it names no kind."""
    return _BY_CLI.get(word.strip().lower())


def note_url(item_url: str, note_id: int | str) -> str:
    """The web address of one note (or the thread it starts) on an item."""
    return f"{item_url}#note_{note_id}"


# -- Reference syntax -------------------------------------------------------------------------------

# GitLab stores iids as 32-bit signed integers; a larger number cannot name an item.
MAX_IID = 2**31 - 1
_MAX_NOTE = 2**63 - 1  # note ids are 64-bit

# One namespace or project path segment, as GitLab allows it: letters, digits, "_", "-" and ".",
# not starting with "-" or "." and not ending with ".".
_SEG = r"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_\-])?"
_PATH = _SEG + r"(?:/" + _SEG + r")+"  # group/project, group/sub/project
_SIGIL = "[" + "".join(re.escape(k.sigil) for k in ITEM_KINDS) + "]"
_API_PATH = "|".join(re.escape(k.api_path) for k in ITEM_KINDS)
# ASCII digits only: `\d` would take other scripts' digits, which int() reads but GitLab never writes.
_IID = r"[0-9]+"
# A reference must not run on into a word character, and "@" after it means an email address.
_END = r"(?![\w@])"

# In free text, as GitLab reads it. The local form (`#12`, `!34`) needs a non-word character or the
# start of the text before the sigil; "&" (HTML entities like `&#123;`) and "\" (an escaped `\#12`)
# are excluded as well. The cross-project form (`group/sub/project#12`) is ambiguous with file
# paths such as `docs/notes.md#12`; it is accepted (a caller drops unknown projects) but only when
# the path starts a word: at the start of the text or after whitespace, an opening bracket, a
# quote, emphasis or a list separator. A path glued to other text (`./docs/notes.md#12`,
# `see:a/b#1`) is never a reference, and never a local one either.
_IN_TEXT_RE = re.compile(
    r"(?:(?<![^\s(\[{<>*\"',;])(?P<path>" + _PATH + r")|(?<![\w&\\]))"
    r"(?P<sigil>" + _SIGIL + r")(?P<iid>" + _IID + r")" + _END
)
# At a given position, where a single segment may name a project: GitLab's system notes write a
# project in the same namespace that way (`project!12`).
_AT_RE = re.compile(r"(?:(?P<path>" + _SEG + r"(?:/" + _SEG + r")*))?(?P<sigil>" + _SIGIL + r")(?P<iid>" + _IID
                    + r")" + _END)
# A whole string that is one short reference.
_SHORT_RE = re.compile(r"(?:(?P<path>" + _PATH + r"))?(?P<sigil>" + _SIGIL + r")(?P<iid>" + _IID + r")")
# What follows the iid in an item's URL (`/diffs`, `?tab=...`, `#note_1`), and the note fragment.
_URL_TAIL = r"(?P<tail>[/?#].*)?"
_NOTE_RE = re.compile(r"note_(?P<note>[0-9]+)")


@dataclass(frozen=True)
class Reference:
    """An issue or merge request, and maybe one note on it, as a reference or URL names it."""

    kind: Kind
    iid: int
    project: str | None = None  # path_with_namespace as written; None: the reader's own project
    note: int | None = None  # a URL's `#note_N`

    def __str__(self) -> str:
        return self.kind.ref(self.iid, self.project)

    def url(self, base_url: str) -> str:
        """The web address on the GitLab at `base_url` (a reference without a project has none)."""
        if self.project is None:
            raise ValueError(f"{self} names no project, so it has no URL")
        item = self.kind.url(base_url, self.project, self.iid)
        return item if self.note is None else note_url(item, self.note)


def _reference(match: re.Match[str]) -> Reference | None:
    iid = int(match["iid"])
    if not 1 <= iid <= MAX_IID:
        return None
    return Reference(by_sigil(match["sigil"]), iid, match["path"] or None)


def find_references(text: str) -> Iterator[tuple[Reference, int, int]]:
    """Every short reference in free text, with its span (start, end), in order. URLs and code are
    not looked at specially: a caller that must not read them blanks them first."""
    for match in _IN_TEXT_RE.finditer(text):
        ref = _reference(match)
        if ref is not None:
            yield ref, match.start(), match.end()


def reference_at(text: str, position: int) -> tuple[Reference, int] | None:
    """The short reference starting exactly at `position` (a single path segment allowed), and
    where it ends; None if none starts there."""
    match = _AT_RE.match(text, position)
    ref = _reference(match) if match else None
    return (ref, match.end()) if ref is not None and match is not None else None


def parse_reference(text: str, gitlab_url: str | None = None) -> Reference | None:
    """The reference the whole of `text` is: `#12`, `!34`, `group/project#12` or an item's URL (see
    `parse_url` for `gitlab_url`); None if it is anything else."""
    text = text.strip()
    if "://" in text:
        return parse_url(text, gitlab_url)
    match = _SHORT_RE.fullmatch(text)
    return _reference(match) if match else None


def parse_url(url: str, gitlab_url: str | None = None) -> Reference | None:
    """The issue or merge request a whole URL points at, with or without the `/-/` that newer
    GitLab puts before `issues`, with anything after the iid (`/diffs`, `?tab=...`, `#note_1`: the
    note is kept). With `gitlab_url` (the configured base URL, maybe with a path prefix such as
    `https://example.com/gitlab`; an empty one matches nothing) only that GitLab's URLs count and
    the prefix is not part of the project; without it any http(s) host does and the whole path
    before the kind is the project. Either scheme names the same item."""
    pattern = _url_re(gitlab_url)
    match = pattern.fullmatch(url) if pattern is not None else None
    if match is None:
        return None
    iid = int(match["iid"])
    if not 1 <= iid <= MAX_IID:
        return None
    _, _, fragment = (match["tail"] or "").partition("#")
    note = _NOTE_RE.fullmatch(fragment)
    note_id = int(note["note"]) if note and int(note["note"]) <= _MAX_NOTE else None
    return Reference(by_api_path(match["kind"]), iid, match["path"], note_id)


@lru_cache(maxsize=16)
def _url_re(gitlab_url: str | None) -> re.Pattern[str] | None:
    if gitlab_url is None:
        # Any host; a project may be a single segment (an older or relative-root URL).
        return re.compile(r"(?i:https?)://[^/?#\s]+/(?P<path>" + _SEG + r"(?:/" + _SEG + r")*?)(?:/-)?"
                          r"/(?P<kind>" + _API_PATH + r")/(?P<iid>" + _IID + r")" + _URL_TAIL)
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
        r"/(?P<kind>" + _API_PATH + r")/(?P<iid>" + _IID + r")" + _URL_TAIL
    )

"""The vocabulary of GitLab item kinds, declared once.

An issue and a merge request are named differently in every place they appear: GitLab's API path
(`issues`), our table (`issues`), the label junction (`issue_labels`), the foreign key a thread
carries (`issue_id`), GitLab's `noteable_type` (`Issue`), the reference sigil (`#`), what a person
reads (`Issue`, `MR`) and what they type on the command line (`issue`, `mr`, `mrs`). Every module
takes these names from here, so a name means one thing everywhere: the `name` of a kind is what the
store writes in `raw_payloads.resource_type`, `sync_cursors.resource_type`, `documents.source_type`
and `documents.parent_type`.
"""

from dataclasses import dataclass

DISCUSSION = "discussion"
PROJECT = "project"


@dataclass(frozen=True)
class Kind:
    name: str  # issue | merge_request: the store's word for the kind
    api_path: str  # GitLab's collection path: /projects/:id/<api_path>
    table: str  # the normalized table
    labels_table: str  # the item → label junction
    thread_column: str  # discussions' (and the junction's) foreign key to the item
    noteable_type: str  # GitLab's noteable_type of a note or discussion on the item
    sigil: str  # the reference sigil: #12, !34
    display: str  # what a person reads: Issue, MR
    plural_display: str  # Issues, Merge requests
    cli_names: tuple[str, ...]  # what a person may type for it

    def ref(self, iid: int | str, project: str | None = None) -> str:
        """GitLab's short reference: `#12`, or `group/project!34` with a project."""
        return f"{project or ''}{self.sigil}{iid}"


ISSUE = Kind(name="issue", api_path="issues", table="issues", labels_table="issue_labels",
             thread_column="issue_id", noteable_type="Issue", sigil="#", display="Issue", plural_display="Issues",
             cli_names=("issue", "issues"))
MERGE_REQUEST = Kind(name="merge_request", api_path="merge_requests", table="merge_requests",
                     labels_table="mr_labels", thread_column="merge_request_id", noteable_type="MergeRequest",
                     sigil="!", display="MR", plural_display="Merge requests",
                     cli_names=("mr", "mrs", "merge_request", "merge_requests", "merge-request", "merge-requests"))
ITEM_KINDS: tuple[Kind, ...] = (ISSUE, MERGE_REQUEST)
SOURCE_TYPES: tuple[str, ...] = (ISSUE.name, MERGE_REQUEST.name, DISCUSSION)  # what a document can be

_BY_NAME = {k.name: k for k in ITEM_KINDS}
_BY_SIGIL = {k.sigil: k for k in ITEM_KINDS}
_BY_NOTEABLE = {k.noteable_type: k for k in ITEM_KINDS}
_BY_API_PATH = {k.api_path: k for k in ITEM_KINDS}
_BY_CLI = {alias: k for k in ITEM_KINDS for alias in k.cli_names}


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

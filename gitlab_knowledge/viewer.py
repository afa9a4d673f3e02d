"""Who is asking: one GitLab user as a shared server sees them, and what GitLab lets them read.

A `Viewer` is built from GitLab's own answers to that user's token (the MCP server's `gitlab`
auth), never from the sync's token, and handed to the read side, which applies GitLab's rules
underneath every query (store/visibility.py's per-viewer lens, the retrievers' pre-filters). The
local CLI and the stdio server have no viewer: they read as the one token the sync used.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

# GitLab's access levels (a member's `access_level`). NO_ACCESS: not a member; a public project, or
# an internal one for a non-external user, is readable at this level (not its confidential issues
# or internal notes).
NO_ACCESS = 0
GUEST = 10
PLANNER = 15
REPORTER = 20
DEVELOPER = 30
MAINTAINER = 40
OWNER = 50

# The least access that shows a project's confidential issues (beyond their author and assignees)
# and its internal notes.
SEES_CONFIDENTIAL = PLANNER
# The least membership that shows a private project's merge requests (GitLab's permissions table:
# Guests view merge requests of public and internal projects only; the Planner role reads them).
SEES_PRIVATE_MERGE_REQUESTS = PLANNER
PRIVATE, INTERNAL, PUBLIC = "private", "internal", "public"


@dataclass(frozen=True)
class Viewer:
    """A GitLab user and the synced projects they may read, with their access level in each."""

    user_id: int
    username: str
    is_admin: bool = False
    external: bool = False
    # Synced project id → the user's access level in it; every project they may read is a key
    # (NO_ACCESS for a public or internal project they are not a member of). A project absent
    # here does not exist for them.
    access: Mapping[int, int] = field(default_factory=dict)
    # Synced project id → its visibility (private | internal | public) as GitLab answered this user.
    # A membership whose visibility is not known is taken as private (its merge requests hidden
    # below Planner): fail closed.
    visibility: Mapping[int, str] = field(default_factory=dict)

    def reads(self, project_id: int) -> bool:
        return self.is_admin or project_id in self.access

    def sees_confidential(self, project_id: int) -> bool:
        """Whether every confidential issue and internal note of the project is visible to them
        (an issue's author and assignees see that issue whatever their level)."""
        return self.is_admin or self.access.get(project_id, NO_ACCESS) >= SEES_CONFIDENTIAL

    def sees_merge_requests(self, project_id: int) -> bool:
        """Whether the project's merge requests (their threads, diffs and links) exist for them:
        GitLab shows them to every reader of a public project, of an internal one unless they are
        external, and to members with at least Planner of a private one (not to its Guests, not
        even the merge requests they wrote)."""
        if not self.reads(project_id):
            return False
        level = self.access.get(project_id, NO_ACCESS)
        if self.is_admin or level == NO_ACCESS or level >= SEES_PRIVATE_MERGE_REQUESTS:
            return True  # a non-member reads a public project, or an internal one as a non-external user
        shown = self.visibility.get(project_id, PRIVATE)
        return shown == PUBLIC or (shown == INTERNAL and not self.external)

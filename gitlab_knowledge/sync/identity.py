"""Who the token belongs to, recorded by the sync so `me` needs no `--user` and no API call
(graph/people.py reads the record).

`GET /user` is asked at most once an hour per GitLab (the token rarely changes hands, and a
sync every few minutes should not spend a call on it each time). A token that may not read its
own user (a project or group access token without `read_user`) leaves the record as it was:
`me` then asks for `--user`.
"""

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from gitlab_knowledge.errors import AuthError, GitLabError
from gitlab_knowledge.store.db import transaction
from gitlab_knowledge.timeutil import utcnow
from gitlab_knowledge.workspace import Workspace

if TYPE_CHECKING:  # `me` reads the record without loading the HTTP client
    from gitlab_knowledge.gitlab.client import GitLabClient

REFRESH_AFTER = timedelta(hours=1)
log = logging.getLogger(__name__)


async def refresh_identity(workspace: Workspace, client: "GitLabClient") -> None:
    url = workspace.config.gitlab.url
    with workspace.write() as con:
        row = con.execute("SELECT recorded_at FROM gitlab_identity WHERE gitlab_url = ?", [url]).fetchone()
    if row and utcnow() - row[0] < REFRESH_AFTER:
        return
    try:
        user = await client.current_user()
    except AuthError:
        # A rejected token fails every call the sync makes: the sync fails with it, in one line,
        # rather than warning here first (a batch asks this before any project's own call).
        raise
    except GitLabError as exc:
        log.warning("could not record the token's user (GET /user: %s); `me` will need --user", exc)
        return
    if not isinstance(user, dict) or not isinstance(user.get("username"), str):
        return
    with workspace.write() as con, transaction(con):
        con.execute("INSERT OR REPLACE INTO gitlab_identity VALUES (?, ?, ?, ?, ?)",
                    [url, user.get("id") if isinstance(user.get("id"), int) else None, user["username"],
                     user.get("name") if isinstance(user.get("name"), str) else None, utcnow()])

"""Who the current MCP call is asking for: the `Viewer` its credentials named, or None.

None is the single-user model (stdio, or HTTP with the shared bearer token or none): every read
sees what the sync's token saw, less the config's confidential/internal opt-outs. With `[mcp]
auth = "gitlab"` the HTTP transport resolves each request's GitLab token to a Viewer and the tool
handlers read through that viewer's lens (context.py).
"""

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from gitlab_knowledge.viewer import Viewer

_ASKING: ContextVar[Viewer | None] = ContextVar("gitlab_knowledge_viewer", default=None)


def current_viewer() -> Viewer | None:
    """The viewer of the call being handled (None: the single-user model)."""
    return _ASKING.get()


@contextlib.contextmanager
def asking_as(viewer: Viewer | None) -> Iterator[None]:
    """Handle what runs inside as `viewer`'s call."""
    token = _ASKING.set(viewer)
    try:
        yield
    finally:
        _ASKING.reset(token)

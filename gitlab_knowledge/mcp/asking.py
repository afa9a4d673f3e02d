"""Who the current MCP call is asking for: the `Viewer` its credentials named, or None.

None is the single-user model (stdio, or HTTP with the shared bearer token or none): every read
sees what the sync's token saw, less the config's confidential/internal opt-outs. With `[mcp]
auth = "gitlab"` the HTTP transport resolves each request's GitLab token to a Viewer and the tool
handlers read through that viewer's lens (context.py).

How the viewer gets here: the SDK hands each HTTP request to the server's task through memory
streams, so a context variable set in ASGI middleware does not reach the tool handler. The
middleware (gitlab_auth.py) puts the Viewer in the request's ASGI scope instead; the SDK hands the
handler that request (`ctx.request`), and server.py's call_tool runs the handler inside
`asking_as(viewer_of_request(ctx.request), ...)`.
"""

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from gitlab_knowledge.viewer import Viewer

# The ASGI scope keys the GitLab auth middleware fills for the request it let through.
SCOPE_VIEWER = "gitlab_knowledge.viewer"
SCOPE_TOKEN = "gitlab_knowledge.gitlab_token"

_ASKING: ContextVar[Viewer | None] = ContextVar("gitlab_knowledge_viewer", default=None)
_TOKEN: ContextVar[str | None] = ContextVar("gitlab_knowledge_viewer_token", default=None)


def current_viewer() -> Viewer | None:
    """The viewer of the call being handled (None: the single-user model)."""
    return _ASKING.get()


def current_token() -> str | None:
    """The GitLab token the current viewer's client sent (for calls made to GitLab as them, such as
    live reads); None in the single-user model. Never to be stored, logged or answered."""
    return _TOKEN.get()


@contextlib.contextmanager
def asking_as(viewer: Viewer | None, token: str | None = None) -> Iterator[None]:
    """Handle what runs inside as `viewer`'s call (`token`: their GitLab token, if any)."""
    reset = _ASKING.set(viewer), _TOKEN.set(token)
    try:
        yield
    finally:
        _TOKEN.reset(reset[1])
        _ASKING.reset(reset[0])


def viewer_of_request(request: Any) -> tuple[Viewer | None, str | None]:
    """(viewer, token) the GitLab auth middleware found for an HTTP request (a Starlette Request or
    anything with an ASGI `scope`); (None, None) for stdio (no request) or the other HTTP modes."""
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return None, None
    viewer = scope.get(SCOPE_VIEWER)
    token = scope.get(SCOPE_TOKEN)
    return (viewer if isinstance(viewer, Viewer) else None), (token if isinstance(token, str) else None)

"""What every tool handler is handed: the server's settings, its resident search and store reader.

The handlers (tools.py, graph_tools.py, items.py, comments.py, query_tools.py) read through
`Context.workspace`, the CLI's own seam with the server's reader and a lens: the asking user's
(store/viewer_lens.py) when the call names one (mcp/asking.py `current_viewer`, a shared server's
GitLab auth), else, for what agents may see, the config's (store/visibility.py). Searches take
`Context.filters` (the config's opt-outs and the viewer's scope, pushed into both retrievers)
and `Context.search_reads` (the workspace their DuckDB reads go through).
"""

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import StoreBusyError, UsageError
from gitlab_knowledge.mcp.asking import current_token, current_viewer
from gitlab_knowledge.store.overlay import ConfidentialOverlay
from gitlab_knowledge.store.reader import Lens, StoreReader, store_stamp
from gitlab_knowledge.store.viewer_lens import IndexScope, index_scope, lens_key, viewer_lens
from gitlab_knowledge.store.visibility import hidden_lens
from gitlab_knowledge.viewer import Viewer
from gitlab_knowledge.workspace import Workspace, real_embedder

if TYPE_CHECKING:
    from gitlab_knowledge.gitlab.client import GitLabClient
    from gitlab_knowledge.mcp.resident import ResidentSearch
    from gitlab_knowledge.search.filters import Filters

STORE_WAIT_SECONDS = 0.5  # a sync holding DuckDB makes a tool answer "store busy", never wait long
VIEWERS_KEPT = 32  # viewers whose lens and index scope are kept (the reader bounds its lens tables too)
LIVE_REFUSAL = ("live answers come from GitLab with the asking user's own token, which this server does not "
                "hold: ask without live (the store as last synced)")


def _no_live(_config: Config) -> "GitLabClient":
    """A viewer's live call without their token: never with the sync's (GitLab would answer as its user)."""
    raise UsageError(LIVE_REFUSAL)


def _live_as(token: str) -> "Callable[[Config], GitLabClient]":
    """A viewer's live calls, made with the token their client sent (as Bearer: an OAuth access
    token works only so), so GitLab answers what it shows them."""
    def client(config: Config) -> "GitLabClient":
        from gitlab_knowledge.gitlab.client import GitLabClient

        return GitLabClient(config.gitlab, token, bearer=True)
    return client


@dataclass
class Context:
    """What every handler may use: one per server process."""

    config: Config  # with the short DuckDB wait
    resident: "ResidentSearch"
    include_confidential: bool
    include_internal: bool
    reader: StoreReader
    # A viewer's lens and index scope (by lens schema; the scope with the store stamp it was read at).
    _lenses: "OrderedDict[str, Lens]" = field(default_factory=OrderedDict, repr=False)
    _scopes: "OrderedDict[str, tuple[Any, IndexScope]]" = field(default_factory=OrderedDict, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def create(cls, config: Config, resident: "ResidentSearch") -> "Context":
        quick = dataclasses.replace(config, sync=dataclasses.replace(config.sync, lock_wait_seconds=STORE_WAIT_SECONDS))
        # A GitLab users' server learns confidential flips between syncs (mcp/confidential_watch.py).
        overlay = ConfidentialOverlay() if config.mcp.auth == "gitlab" else None
        return cls(config=quick, resident=resident, include_confidential=config.mcp.include_confidential,
                   include_internal=config.mcp.include_internal, reader=StoreReader(quick.duckdb_path, overlay))

    def workspace(self, *, visible_only: bool = False) -> Workspace:
        """The CLI's seam, with the resident process's embedding model (loaded once) and its
        store reader; `visible_only`: its reads see only what the config lets agents see. A call
        asked by a viewer reads through their lens whatever `visible_only` says, and its live
        GitLab calls are made with their own token (refused, LIVE_REFUSAL, when the call came
        without one): the sync's token is not theirs."""
        def embedder(config: Config, provider: str | None = None, model: str | None = None) -> Any:
            if provider is None and model is None:
                return self.resident.provider()
            return real_embedder(config, provider, model)

        viewer = current_viewer()
        if viewer is not None:
            return self._seen_by(viewer, embedder)
        lens = hidden_lens(include_confidential=self.include_confidential,
                           include_internal=self.include_internal) if visible_only else None
        return Workspace(self.config, embedder_factory=embedder).with_(lens=lens, reader=self.reader)

    def _seen_by(self, viewer: Viewer, embedder: Any = None) -> Workspace:
        factories = {"embedder_factory": embedder} if embedder is not None else {}
        token = current_token()
        live = _live_as(token) if token else _no_live
        return Workspace(self.config, gitlab_factory=live, **factories).with_(lens=self.lens_of(viewer),
                                                                                   reader=self.reader)

    def lens_of(self, viewer: Viewer) -> Lens:
        """The viewer's lens, with the config's opt-outs on top (store/viewer_lens.py)."""
        key = lens_key(viewer, self.include_confidential, self.include_internal)
        with self._guard:
            lens = self._lenses.get(key)
            if lens is None:
                lens = self._lenses[key] = viewer_lens(viewer, self.config.gitlab.url,
                                                       include_confidential=self.include_confidential,
                                                       include_internal=self.include_internal)
                while len(self._lenses) > VIEWERS_KEPT:
                    self._lenses.popitem(last=False)
            self._lenses.move_to_end(key)
            return lens

    def filters(self, **keywords: Any) -> "Filters":
        """A search's filters as agents may search: the config's opt-outs forced on and, for a
        viewer, their scope, applied inside both retrievers before the cut."""
        from gitlab_knowledge.search.filters import Filters

        filters = Filters.build(**keywords, exclude_confidential=not self.include_confidential,
                                exclude_internal=not self.include_internal)
        viewer = current_viewer()
        return filters if viewer is None else filters.scoped(self.scope_of(viewer))

    def search_reads(self) -> Workspace | None:
        """What a search's DuckDB reads (graph filters, linked references) go through: the viewer's
        lens; None (the resident searcher's own workspace) without a viewer."""
        return self.workspace() if current_viewer() is not None else None

    def scope_of(self, viewer: Viewer) -> IndexScope | None:
        """The viewer's view as both indexes filter (None: an admin's, everything), read from their
        lens once per version of the store. While a sync writes, the last one read answers."""
        if viewer.is_admin:
            return None
        lens = self.lens_of(viewer)
        # Before the read: a write (or an overlay change) during it reads again.
        overlay = self.reader.overlay
        stamp = (store_stamp(self.config.duckdb_path), overlay.generation if overlay is not None else None)
        with self._guard:
            hit = self._scopes.get(lens.schema)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        try:
            with self._seen_by(viewer).read() as con:
                scope = index_scope(con, lens)
        except StoreBusyError:
            if hit is not None:
                return hit[1]
            raise
        with self._guard:
            self._scopes[lens.schema] = (stamp, scope)
            while len(self._scopes) > VIEWERS_KEPT:
                self._scopes.popitem(last=False)
        return scope


def confidential_refusal(reference: str) -> UsageError:
    """What a tool says when the lens hid the confidential issue a reference names."""
    return UsageError(f"{reference} is confidential and the MCP server leaves confidential issues out: set [mcp] "
                      "include_confidential = true in the config to let agents read them")

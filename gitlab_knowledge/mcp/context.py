"""What every tool handler is handed: the server's settings, its resident search and store reader.

The handlers (tools.py, graph_tools.py, items.py, comments.py) read through `Context.workspace`,
the CLI's own seam with the server's reader and, for what agents may see, the config's lens.
"""

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gitlab_knowledge.config import Config
from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.store.reader import StoreReader
from gitlab_knowledge.store.visibility import hidden_lens
from gitlab_knowledge.workspace import Workspace, real_embedder

if TYPE_CHECKING:
    from gitlab_knowledge.mcp.resident import ResidentSearch

STORE_WAIT_SECONDS = 0.5  # a sync holding DuckDB makes a tool answer "store busy", never wait long


@dataclass
class Context:
    """What every handler may use: one per server process."""

    config: Config  # with the short DuckDB wait
    resident: "ResidentSearch"
    include_confidential: bool
    include_internal: bool
    reader: StoreReader

    @classmethod
    def create(cls, config: Config, resident: "ResidentSearch") -> "Context":
        quick = dataclasses.replace(config, sync=dataclasses.replace(config.sync, lock_wait_seconds=STORE_WAIT_SECONDS))
        return cls(config=quick, resident=resident, include_confidential=config.mcp.include_confidential,
                   include_internal=config.mcp.include_internal, reader=StoreReader(quick.duckdb_path))

    def workspace(self, *, visible_only: bool = False) -> Workspace:
        """The CLI's seam, with the resident process's embedding model (loaded once) and its
        store reader; `visible_only`: its reads see only what the config lets agents see."""
        def embedder(config: Config, provider: str | None = None, model: str | None = None) -> Any:
            if provider is None and model is None:
                return self.resident.provider()
            return real_embedder(config, provider, model)

        lens = hidden_lens(include_confidential=self.include_confidential,
                           include_internal=self.include_internal) if visible_only else None
        return Workspace(self.config, embedder_factory=embedder).with_(lens=lens, reader=self.reader)


def confidential_refusal(reference: str) -> UsageError:
    """What a tool says when the lens hid the confidential issue a reference names."""
    return UsageError(f"{reference} is confidential and the MCP server leaves confidential issues out: set [mcp] "
                      "include_confidential = true in the config to let agents read them")

"""The one resource every asset uses: where the configuration is.

Only the config file's path travels through Dagster run config; the token is read from the
environment variable the config names, inside the step, so it never lands in run config or the
event log.
"""

from typing import Optional

import dagster as dg

from gitlab_knowledge.config import Config, load_config


class KnowledgeSettings(dg.ConfigurableResource):
    """gitlab_knowledge configuration (TOML + environment overrides)."""

    config_path: Optional[str] = None  # noqa: UP045 - Dagster resolves field types at runtime

    def load(self) -> Config:
        return load_config(self.config_path)

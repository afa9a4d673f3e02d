"""The one resource every asset, check, sensor and schedule uses: the workspace.

`workspace_resource` builds a `Workspace` from the config file named in run config; only that
path travels through Dagster, and the token is read from the environment variable the config
names, inside the step, so it never lands in run config or the event log. A run started in this
process (the CLI, tests, benchmarks) hands over a ready-made `Workspace` instead.
"""

import dagster as dg

from gitlab_knowledge.workspace import Workspace

WORKSPACE = "workspace"


@dg.resource(
    config_schema={"config_path": dg.Field(dg.Noneable(str), default_value=None, is_required=False,
                                           description="the gitlab_knowledge TOML file (default: the usual "
                                                       "lookup). The token never goes in run config.")},
    description="gitlab_knowledge's workspace: settings, store connections, GitLab and embedding factories.",
)
def workspace_resource(init_context: dg.InitResourceContext) -> Workspace:
    return Workspace.load(init_context.resource_config.get("config_path"))

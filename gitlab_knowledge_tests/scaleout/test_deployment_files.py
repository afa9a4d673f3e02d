"""The distributed deployment's files say what the repository's single-machine ones say, and the
README shows the instance file the distributed test uses."""

import re

import yaml

from gitlab_knowledge.scaleout.services import CELERY_YAML, INSTANCE_YAML, WORKSPACE_YAML
from gitlab_knowledge_tests.conftest import REPO


def test_the_postgres_instance_keeps_the_repository_limits():
    ours, repository = yaml.safe_load(INSTANCE_YAML.read_text()), yaml.safe_load((REPO / "dagster.yaml").read_text())
    assert ours["concurrency"] == repository["concurrency"]
    assert set(ours["storage"]["postgres"]["postgres_db"]) >= {"hostname", "port", "db_name", "username", "password"}
    assert ours["run_coordinator"]["class"] == "QueuedRunCoordinator"


def test_the_readme_shows_the_instance_file_the_test_uses():
    section = (REPO / "README.md").read_text().split("## Scaling out", 1)[1].split("\n## ", 1)[0]
    shown = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert shown is not None
    assert yaml.safe_load(shown.group(1)) == yaml.safe_load(INSTANCE_YAML.read_text())
    for path in (CELERY_YAML, WORKSPACE_YAML):
        assert str(path.relative_to(REPO)) in section


def test_the_workers_and_the_executor_read_the_same_broker():
    from gitlab_knowledge.scaleout.definitions import BACKEND_ENV, BROKER_ENV

    config = yaml.safe_load(CELERY_YAML.read_text())["execution"]["config"]
    assert config == {"broker": {"env": BROKER_ENV}, "backend": {"env": BACKEND_ENV}}
    assert yaml.safe_load(WORKSPACE_YAML.read_text())["load_from"][0]["python_module"]["module_name"] == \
        "gitlab_knowledge.scaleout.definitions"

"""`groups` in the config: paths or ids, exclude patterns, subgroups and archived switches,
`GITLAB_GROUPS`, `[sync] discovery_minutes`, and one-line errors naming the field."""

from pathlib import Path

import pytest

from gitlab_knowledge.config import GroupSettings, load_config
from gitlab_knowledge.errors import ConfigError

URL = '[gitlab]\nurl = "https://gitlab.example.com"\n'


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None):
    path = tmp_path / "gitlab_knowledge.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, env=env or {})


def test_groups_instead_of_projects(tmp_path: Path) -> None:
    config = load(tmp_path, 'groups = ["acme", "acme/platform-team/", 42]\nexclude = ["acme/sandbox-*"]\n' + URL)
    assert config.projects == ()
    assert config.groups == GroupSettings(paths=("acme", "acme/platform-team", "42"), exclude=("acme/sandbox-*",))
    assert config.groups.include_subgroups and not config.groups.include_archived
    assert config.sync.discovery_minutes == 60


def test_groups_beside_projects_with_their_switches(tmp_path: Path) -> None:
    text = ('projects = ["other/tool"]\ngroups = ["acme"]\ninclude_subgroups = false\ninclude_archived = true\n'
            + URL + "[sync]\ndiscovery_minutes = 15\n")
    config = load(tmp_path, text)
    assert config.projects == ("other/tool",) and config.groups.paths == ("acme",)
    assert not config.groups.include_subgroups and config.groups.include_archived
    assert config.sync.discovery_minutes == 15


def test_exclude_patterns_match_paths_in_any_case() -> None:
    groups = GroupSettings(paths=("acme",), exclude=("acme/sandbox-*", "*/legacy"))
    assert groups.excluded("Acme/Sandbox-old") and groups.excluded("acme/team/legacy")
    assert not groups.excluded("acme/platform")


def test_gitlab_groups_overrides_the_file_and_needs_no_file(tmp_path: Path, monkeypatch) -> None:
    config = load(tmp_path, 'groups = ["acme"]\n' + URL, {"GITLAB_GROUPS": " team/one , 7 ,"})
    assert config.groups.paths == ("team/one", "7")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gitlab_knowledge.toml").unlink()
    config = load_config(env={"GITLAB_URL": "https://gitlab.example.com", "GITLAB_GROUPS": "acme"})
    assert config.groups.paths == ("acme",) and config.projects == ()


@pytest.mark.parametrize(("text", "field"), [
    ('groups = "acme"\n', "groups"),
    ('groups = ["acme", "a b"]\n', "groups[1]"),
    ('groups = ["acme", 0]\n', "groups[1]"),
    ('groups = [true]\n', "groups[0]"),
    ('groups = ["acme", "ACME/"]\n', "groups"),
    ('groups = ["acme"]\nexclude = "acme/x"\n', "exclude"),
    ('groups = ["acme"]\nexclude = [""]\n', "exclude[0]"),
    ('groups = ["acme"]\ninclude_subgroups = "yes"\n', "include_subgroups"),
    ('groups = ["acme"]\ninclude_archived = 1\n', "include_archived"),
    ('groups = []\n', "projects"),
    ('groups = ["acme"]\n' + URL + "[sync]\ndiscovery_minutes = 0\n", "sync.discovery_minutes"),
])
def test_a_bad_groups_setting_is_one_line_naming_the_field(tmp_path: Path, text: str, field: str) -> None:
    if "[gitlab]" not in text:
        text += URL
    with pytest.raises(ConfigError) as err:
        load(tmp_path, text)
    message = str(err.value)
    assert f"config field {field}" in message and "\n" not in message


def test_a_bad_gitlab_groups_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config field GITLAB_GROUPS"):
        load(tmp_path, 'projects = ["a/b"]\n' + URL, {"GITLAB_GROUPS": "acme,no way"})

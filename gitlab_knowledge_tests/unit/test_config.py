"""Config loading: the TOML file, environment overrides, file precedence, one-line errors."""

from pathlib import Path

import pytest
import tomli_w

import gitlab_knowledge.redact as redact_module
from gitlab_knowledge.config import (
    CONFIG_ENV,
    DEFAULT_CONFIG_NAME,
    Config,
    EmbeddingSettings,
    GitLabSettings,
    SearchSettings,
    SyncSettings,
    load_config,
    parse_config,
)
from gitlab_knowledge.errors import ConfigError
from gitlab_knowledge.redact import MASK, redact

MINIMAL = '''
projects = ["group/alpha"]

[gitlab]
url = "https://gitlab.example.com"
'''

FULL = '''
projects = ["group/alpha", "group/sub/beta"]

[gitlab]
url = "https://gitlab.example.com/"
token_env = "CORP_GITLAB_PAT"
ca_bundle = "certs/ca.pem"
rate_limit = 5
concurrency = 3
timeout = 12.5
per_page = 50
max_retries = 2

[storage]
data_dir = "store"

[embedding]
provider = "ollama"
model = "nomic-embed-text"
ollama_host = "http://ollama.internal:11434"
batch_size = 16
timeout = 30

[search]
rrf_k = 40
candidates = 20

[sync]
stale_after_minutes = 5
lock_wait_seconds = 0
'''


@pytest.fixture(autouse=True)
def isolated_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    # Config.token() registers the token process-wide; keep that local to each test.
    monkeypatch.setattr(redact_module, "_secrets", set())


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load_text(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> Config:
    return load_config(write(tmp_path / "conf" / "gk.toml", text), env=env or {})


def config_error(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, text, env)
    message = str(info.value)
    assert "\n" not in message
    return message


# -- loading --------------------------------------------------------------------------------------

def test_loads_every_section(tmp_path: Path) -> None:
    ca = write(tmp_path / "conf" / "certs" / "ca.pem", "-----BEGIN CERTIFICATE-----\n")
    path = write(tmp_path / "conf" / "gk.toml", FULL)

    config = load_config(path, env={})

    assert config.gitlab == GitLabSettings(
        url="https://gitlab.example.com", token_env="CORP_GITLAB_PAT", ca_bundle=ca.resolve(), rate_limit=5.0,
        concurrency=3, timeout=12.5, per_page=50, max_retries=2)
    assert config.gitlab.api_url == "https://gitlab.example.com/api/v4"
    assert config.projects == ("group/alpha", "group/sub/beta")
    assert config.data_dir == (tmp_path / "conf" / "store").resolve()
    assert config.embedding == EmbeddingSettings(provider="ollama", model="nomic-embed-text",
                                                 ollama_host="http://ollama.internal:11434", batch_size=16,
                                                 timeout=30.0)
    assert config.search == SearchSettings(rrf_k=40, candidates=20)
    assert config.sync == SyncSettings(stale_after_minutes=5.0, lock_wait_seconds=0.0)
    assert config.source == str(path)


def test_missing_sections_take_the_defaults(tmp_path: Path) -> None:
    config = load_text(tmp_path, MINIMAL)

    assert config.gitlab == GitLabSettings(url="https://gitlab.example.com")
    assert config.gitlab.rate_limit == 10.0
    assert config.gitlab.per_page == 100
    assert config.embedding == EmbeddingSettings()
    assert config.search == SearchSettings()
    assert config.sync == SyncSettings()
    assert config.data_dir == (tmp_path / "conf" / "data").resolve()


def test_projects_in_flight_defaults_to_8_and_is_read_from_the_sync_section(tmp_path: Path) -> None:
    # A batch of many projects fetches this many at once (sync/many.py).
    assert load_text(tmp_path, MINIMAL).sync.projects_in_flight == 8
    assert load_text(tmp_path, MINIMAL + "[sync]\nprojects_in_flight = 3\n").sync.projects_in_flight == 3


def test_projects_as_array_of_tables(tmp_path: Path) -> None:
    text = '''
[gitlab]
url = "https://gitlab.example.com"

[[projects]]
path = "group/alpha"

[[projects]]
path = "/group/sub/beta/"
'''
    assert load_text(tmp_path, text).projects == ("group/alpha", "group/sub/beta")


def test_projects_as_list_of_strings(tmp_path: Path) -> None:
    text = 'projects = ["a/b", "c/d/e"]\n[gitlab]\nurl = "https://gitlab.example.com"\n'

    assert load_text(tmp_path, text).projects == ("a/b", "c/d/e")


def test_relative_data_dir_resolves_against_the_config_files_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    config = load_text(tmp_path, MINIMAL + '[storage]\ndata_dir = "../state/gk"\n')

    assert config.data_dir == (tmp_path / "state" / "gk").resolve()
    assert config.duckdb_path == config.data_dir / "gitlab_knowledge.duckdb"


# -- environment overrides ----------------------------------------------------------------------

def test_env_overrides_win_over_the_file(tmp_path: Path) -> None:
    env = {
        "GITLAB_URL": "https://other.example.org/",
        "GITLAB_PROJECTS": " team/one ,team/two/three,  ,",
        "GITLAB_KNOWLEDGE_DATA": str(tmp_path / "envdata"),
        "GITLAB_KNOWLEDGE_EMBEDDING": "ollama",
        "OLLAMA_HOST": "gpu-box:11434",
    }

    config = load_text(tmp_path, FULL.replace('ca_bundle = "certs/ca.pem"\n', ""), env)

    assert config.gitlab.url == "https://other.example.org"
    assert config.projects == ("team/one", "team/two/three")
    assert config.data_dir == (tmp_path / "envdata").resolve()
    assert config.embedding.provider == "ollama"
    assert config.embedding.ollama_host == "http://gpu-box:11434"


def test_embedding_provider_env_override_beats_the_file(tmp_path: Path) -> None:
    text = MINIMAL + '[embedding]\nprovider = "ollama"\n'

    assert load_text(tmp_path, text, {"GITLAB_KNOWLEDGE_EMBEDDING": "embedded"}).embedding.provider == "embedded"


@pytest.mark.parametrize(("value", "expected"), [
    ("gpu-box:11434", "http://gpu-box:11434"),
    ("10.0.0.5:11434", "http://10.0.0.5:11434"),
    ("http://gpu-box:11434", "http://gpu-box:11434"),
    ("https://ollama.example.com/", "https://ollama.example.com"),
])
def test_ollama_host_with_and_without_scheme(tmp_path: Path, value: str, expected: str) -> None:
    assert load_text(tmp_path, MINIMAL, {"OLLAMA_HOST": value}).embedding.ollama_host == expected


def test_ollama_host_without_scheme_in_the_file(tmp_path: Path) -> None:
    config = load_text(tmp_path, MINIMAL + '[embedding]\nollama_host = "localhost:11434"\n')

    assert config.embedding.ollama_host == "http://localhost:11434"


def test_environment_alone_is_enough_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    config = load_config(env={"GITLAB_URL": "https://gitlab.example.com", "GITLAB_PROJECTS": "a/b"})

    assert config.source == "environment"
    assert config.projects == ("a/b",)
    assert config.data_dir == (tmp_path / "data").resolve()


def test_no_file_and_no_environment_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    with pytest.raises(ConfigError) as info:
        load_config(env={})

    assert DEFAULT_CONFIG_NAME in str(info.value)
    assert CONFIG_ENV in str(info.value)


# -- which file ---------------------------------------------------------------------------------

@pytest.fixture
def three_configs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    def config_for(name: str) -> str:
        return tomli_w.dumps({"projects": [f"{name}/proj"], "gitlab": {"url": "https://gitlab.example.com"}})

    cwd = tmp_path / "cwd"
    paths = {
        "explicit": write(tmp_path / "explicit" / "explicit.toml", config_for("explicit")),
        "env": write(tmp_path / "fromenv" / "env.toml", config_for("env")),
        "cwd": write(cwd / DEFAULT_CONFIG_NAME, config_for("cwd")),
    }
    monkeypatch.chdir(cwd)
    return paths


def test_explicit_config_path_beats_env_and_cwd(three_configs: dict[str, Path]) -> None:
    config = load_config(three_configs["explicit"], env={CONFIG_ENV: str(three_configs["env"])})

    assert config.projects == ("explicit/proj",)
    assert config.source == str(three_configs["explicit"])


def test_config_env_beats_cwd(three_configs: dict[str, Path]) -> None:
    config = load_config(None, env={CONFIG_ENV: str(three_configs["env"])})

    assert config.projects == ("env/proj",)


def test_cwd_file_is_used_last(three_configs: dict[str, Path]) -> None:
    config = load_config(None, env={})

    assert config.projects == ("cwd/proj",)
    assert Path(config.source).resolve() == three_configs["cwd"].resolve()


def test_explicit_config_pointing_to_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"

    with pytest.raises(ConfigError) as info:
        load_config(missing, env={})

    assert str(missing) in str(info.value)
    assert "\n" not in str(info.value)


def test_config_env_pointing_to_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"

    with pytest.raises(ConfigError) as info:
        load_config(None, env={CONFIG_ENV: str(missing)})

    assert str(missing) in str(info.value)
    assert CONFIG_ENV in str(info.value)


# -- invalid ------------------------------------------------------------------------------------

INVALID = {
    "missing url": ('projects = ["a/b"]\n[gitlab]\ntoken_env = "GITLAB_TOKEN"\n', "gitlab.url"),
    "no gitlab section": ('projects = ["a/b"]\n', "gitlab.url"),
    "url scheme": ('projects = ["a/b"]\n[gitlab]\nurl = "ftp://gitlab.example.com"\n', "gitlab.url"),
    "url without host": ('projects = ["a/b"]\n[gitlab]\nurl = "https://"\n', "gitlab.url"),
    "url not a string": ('projects = ["a/b"]\n[gitlab]\nurl = 42\n', "gitlab.url"),
    "empty projects": ('projects = []\n[gitlab]\nurl = "https://g.example.com"\n', "projects"),
    "no projects": ('[gitlab]\nurl = "https://g.example.com"\n', "projects"),
    "projects not a list": ('projects = "a/b"\n[gitlab]\nurl = "https://g.example.com"\n', "projects"),
    "project without slash": ('projects = ["a/b", "alpha"]\n[gitlab]\nurl = "https://g.example.com"\n',
                              "projects[1]"),
    "table project without slash": ('[gitlab]\nurl = "https://g.example.com"\n[[projects]]\npath = "alpha"\n',
                                    "projects[0].path"),
    "table project without path": ('[gitlab]\nurl = "https://g.example.com"\n[[projects]]\nname = "a/b"\n',
                                   "projects[0].path"),
    "duplicate projects": ('projects = ["a/b", "c/d", "a/b/"]\n[gitlab]\nurl = "https://g.example.com"\n',
                           "projects"),
    "per_page over 100": (MINIMAL + "per_page = 101\n", "gitlab.per_page"),
    "per_page zero": (MINIMAL + "per_page = 0\n", "gitlab.per_page"),
    "negative rate_limit": (MINIMAL + "rate_limit = -1\n", "gitlab.rate_limit"),
    "boolean rate_limit": (MINIMAL + "rate_limit = true\n", "gitlab.rate_limit"),
    "string timeout": (MINIMAL + 'timeout = "30s"\n', "gitlab.timeout"),
    "zero concurrency": (MINIMAL + "concurrency = 0\n", "gitlab.concurrency"),
    "bad token_env": (MINIMAL + 'token_env = "MY-TOKEN"\n', "gitlab.token_env"),
    "unknown top-level key": ('colour = "red"\n' + MINIMAL, "colour"),
    "unknown gitlab key": (MINIMAL + 'tokn = "x"\n', "gitlab.tokn"),
    "unknown embedding key": (MINIMAL + '[embedding]\nmodle = "x"\n', "embedding.modle"),
    "unknown storage key": (MINIMAL + '[storage]\ndatadir = "x"\n', "storage.datadir"),
    "unknown provider": (MINIMAL + '[embedding]\nprovider = "openai"\n', "embedding.provider"),
    "section not a table": ('storage = "data"\n' + MINIMAL, "[storage]"),
    "data_dir not a string": (MINIMAL + "[storage]\ndata_dir = 5\n", "storage.data_dir"),
    "missing ca_bundle": (MINIMAL + 'ca_bundle = "missing-ca.pem"\n', "gitlab.ca_bundle"),
    "boolean batch_size": (MINIMAL + "[embedding]\nbatch_size = false\n", "embedding.batch_size"),
    "negative lock wait": (MINIMAL + "[sync]\nlock_wait_seconds = -1\n", "sync.lock_wait_seconds"),
    "zero projects in flight": (MINIMAL + "[sync]\nprojects_in_flight = 0\n", "sync.projects_in_flight"),
    "fractional projects in flight": (MINIMAL + "[sync]\nprojects_in_flight = 2.5\n", "sync.projects_in_flight"),
    "projects in flight past the maximum": (MINIMAL + "[sync]\nprojects_in_flight = 100000\n",
                                            "sync.projects_in_flight"),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_config_is_a_one_line_error_naming_the_field(tmp_path: Path, case: str) -> None:
    text, field = INVALID[case]

    message = config_error(tmp_path, text)

    assert f"config field {field}" in message


@pytest.mark.parametrize(("env", "field"), [
    ({"GITLAB_URL": "gitlab.example.com"}, "gitlab.url"),
    ({"GITLAB_PROJECTS": "a/b,justname"}, "GITLAB_PROJECTS"),
    ({"GITLAB_PROJECTS": "a/b, a/b"}, "projects"),
    ({"GITLAB_KNOWLEDGE_EMBEDDING": "openai"}, "embedding.provider"),
])
def test_invalid_environment_override_names_the_field(tmp_path: Path, env: dict[str, str], field: str) -> None:
    message = config_error(tmp_path, MINIMAL, env)

    assert f"config field {field}" in message


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "broken.toml", '[gitlab\nurl = "https://gitlab.example.com"\n')

    with pytest.raises(ConfigError) as info:
        load_config(path, env={})

    message = str(info.value)
    assert str(path) in message
    assert "TOML" in message
    assert "\n" not in message


def test_non_string_ollama_host_is_a_config_error(tmp_path: Path) -> None:
    message = config_error(tmp_path, MINIMAL + "[embedding]\nollama_host = 11434\n")

    assert "config field embedding.ollama_host" in message


def test_data_dir_with_tilde_expands_to_the_home_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))

    config = load_text(tmp_path, MINIMAL + '[storage]\ndata_dir = "~/gk-data"\n')

    assert config.data_dir == (home / "gk-data").resolve()


def test_ca_bundle_with_tilde_expands_to_the_home_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    ca = write(home / "ca.pem", "-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("HOME", str(home))

    config = load_text(tmp_path, MINIMAL + 'ca_bundle = "~/ca.pem"\n')

    assert config.gitlab.ca_bundle == ca


# -- token --------------------------------------------------------------------------------------

def minimal_config(tmp_path: Path, **gitlab: str) -> Config:
    return parse_config({"gitlab": {"url": "https://gitlab.example.com", **gitlab}, "projects": ["a/b"]},
                        tmp_path, {}, "test")


@pytest.mark.parametrize("value", [None, "", "   "], ids=["unset", "empty", "blank"])
def test_token_unset_is_a_config_error_naming_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("GITLAB_TOKEN", raising=False)
    else:
        monkeypatch.setenv("GITLAB_TOKEN", value)

    with pytest.raises(ConfigError) as info:
        minimal_config(tmp_path).token()

    assert "GITLAB_TOKEN" in str(info.value)
    assert "\n" not in str(info.value)


def test_token_error_names_a_custom_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CORP_GITLAB_PAT", raising=False)
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-not-this-one")

    with pytest.raises(ConfigError) as info:
        minimal_config(tmp_path, token_env="CORP_GITLAB_PAT").token()

    assert "CORP_GITLAB_PAT" in str(info.value)


def test_token_is_returned_and_registered_for_redaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "glpat-CONFIG-tok-987"
    monkeypatch.setenv("CORP_GITLAB_PAT", f"  {secret}\n")
    assert redact(f"x {secret} y") == f"x {secret} y"

    assert minimal_config(tmp_path, token_env="CORP_GITLAB_PAT").token() == secret

    assert redact(f"x {secret} y") == f"x {MASK} y"

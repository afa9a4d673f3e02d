"""Config values that once passed validation and then crashed a command (exit 70): each is now one
line naming the field or the value, a ConfigError (exit 2)."""

from pathlib import Path

import pytest

from gitlab_knowledge.config import load_config
from gitlab_knowledge.errors import ConfigError
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.redact import redact

URL = 'url = "http://127.0.0.1:9"\n'
BASE = 'projects = ["a/b"]\n[gitlab]\n' + URL

CASES = {
    "inf in an integer field": (BASE + "concurrency = inf\n", "gitlab.concurrency"),
    "nan": (BASE + "per_page = nan\n", "gitlab.per_page"),
    "a fraction in an integer field": (BASE + "max_retries = 2.5\n", "gitlab.max_retries"),
    "an hour of 1e300 minutes": (BASE + "[sync]\nstale_after_minutes = 1e300\n", "sync.stale_after_minutes"),
    "a huge integer": (BASE + "[search]\ncandidates = 100000000000000000000\n", "search.candidates"),
    "an IPv6 URL left open": ('projects = ["a/b"]\n[gitlab]\nurl = "http://[::1"\n', "gitlab.url"),
    "port 99999": ('projects = ["a/b"]\n[gitlab]\nurl = "http://h:99999"\n', "gitlab.url"),
    "a newline in a project": ('projects = ["a/b\\nc"]\n[gitlab]\n' + URL, "projects[0]"),
    "../ in a project": ('projects = ["a/../b"]\n[gitlab]\n' + URL, "projects[0]"),
    "a newline in a key": (BASE + '"tok\\nen" = 1\n', "gitlab."),
    "a NUL in a path": (BASE + '[storage]\ndata_dir = "a\\u0000b"\n', "storage.data_dir"),
}


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "gitlab_knowledge.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_a_value_that_would_crash_later_is_refused_naming_the_field(tmp_path: Path, case: str) -> None:
    text, field = CASES[case]
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), env={})
    assert f"config field {field}" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(("raw", "words"), [(b"\xff\xfe[gitlab]", "not UTF-8"), (b"x = " + b"[" * 5000, "deeply")])
def test_a_file_that_is_not_a_config_is_one_line(tmp_path: Path, raw: bytes, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        load_config(write(tmp_path, raw), env={})


def test_a_data_dir_that_is_a_file_and_a_ca_bundle_that_is_no_certificate(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="storage.data_dir"):
        load_config(write(tmp_path, BASE + f'[storage]\ndata_dir = "{tmp_path / "afile"}"\n'), env={})
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    config = load_config(write(tmp_path, BASE + f'ca_bundle = "{tmp_path / "ca.pem"}"\n'), env={})
    with pytest.raises(ConfigError, match="gitlab.ca_bundle"):
        GitLabClient(config.gitlab, "glpat-x")


@pytest.mark.parametrize("token", ["t\u00f6ken", "glpat-a\nb", "glpat a"])
def test_a_token_no_header_can_carry_is_refused_without_showing_it(tmp_path: Path, token: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITLAB_TOKEN", token)
    config = load_config(write(tmp_path, BASE), env={})
    with pytest.raises(ConfigError, match="GITLAB_TOKEN") as info:
        config.token()
    assert token not in info.value.message


def test_a_password_in_the_url_is_kept_out_of_what_is_shown(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, 'projects = ["a/b"]\n[gitlab]\nurl = "https://me:pw-123@h.example"\n'),
                         env={})
    assert config.gitlab.display_url == "https://h.example"
    assert "pw-123" not in redact("GitLab at https://me:pw-123@h.example failed")  # as secret as the token

"""Fuzz what an operator can type: every config field (odd numbers, odd strings, odd types, files
that are not UTF-8 or nest 5,000 deep), the token variable, and every argument of the search CLI
(any text, lone surrogates as undecodable bytes arrive, dates from year 1 to 9999). The answer is
always either success or one line with a documented exit code: never 70, never a traceback."""

import asyncio
import io
import os
import string
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from datetime import timedelta
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gitlab_knowledge.cli import main as cli_main
from gitlab_knowledge.config import load_config
from gitlab_knowledge.errors import ConfigError
from gitlab_knowledge.gitlab.client import GitLabClient
from gitlab_knowledge.search.__main__ import main as search_main

DOCUMENTED = {0, 1, 2, 3, 4, 5, 6, 130}
odd_numbers = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True, allow_infinity=True),
                        st.sampled_from([0, 1, 1e300, -0.0, 2**63, 0.5, 100, 101, 99999]))
odd_text = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30),
    st.sampled_from(["", " ", "a\nb", "../../etc", "group/../x", "a/b\n", "http://[::1", "http://h:99999",
                     "https://user:s3cret@h.example", "ftp://x", "~", "data", "\u00e9t\u00e9/proj", "a/b/c", "g/p",
                     "http://127.0.0.1:9", "ollama:11434", "[::1]:11434", "embedded", "ollama", "NOT_SET_VAR"]),
)
odd_value = st.one_of(odd_numbers, odd_text, st.booleans(), st.lists(odd_text, max_size=3),
                      st.dictionaries(odd_text, odd_text, max_size=2))
FIELDS = {
    "gitlab": ["url", "token_env", "ca_bundle", "rate_limit", "concurrency", "timeout", "per_page", "max_retries"],
    "storage": ["data_dir"],
    "embedding": ["provider", "model", "ollama_host", "batch_size", "timeout"],
    "search": ["rrf_k", "candidates"],
    "sync": ["stale_after_minutes", "lock_wait_seconds", "projects_in_flight"],
}
sections = st.fixed_dictionaries({}, optional={
    name: st.fixed_dictionaries({}, optional={key: odd_value for key in keys}) for name, keys in FIELDS.items()})
tokens = st.one_of(st.just("glpat-sandbox-token-000000"), st.text(max_size=20),
                   st.sampled_from(["t\u00f6ken", "glpat-a\nb", " glpat-x ", "glpat\x00x", "\u200b"]))


def run(main, argv: list[str]) -> tuple[int, str]:
    # Encoded as a process's own streams are: stdout strict UTF-8 (a pipe), stderr backslashreplace.
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    umask = os.umask(0o022)  # the CLI sets its own (077); this process keeps the one it had
    os.umask(umask)
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
            out.flush()
        except UnicodeEncodeError as exc:  # what a real process would die of while printing
            return 70, f"Traceback: {exc}"
        finally:
            os.umask(umask)
    err.flush()
    return code, err.buffer.getvalue().decode("utf-8")


def assert_clean(code: int, err: str) -> None:
    assert code in DOCUMENTED, (code, err)
    assert "Traceback" not in err and "internal error" not in err, err
    assert len([line for line in err.splitlines() if line.startswith("error:")]) <= 1, err


def consume(config) -> None:
    """What the commands build from a loaded config before they talk to anything."""
    timedelta(minutes=config.sync.stale_after_minutes)
    asyncio.Semaphore(config.gitlab.concurrency)

    async def build() -> None:
        await GitLabClient(config.gitlab, config.token()).aclose()

    asyncio.run(build())


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=sections, projects=st.one_of(st.just(["acme/platform"]), st.lists(odd_text, max_size=2), odd_value),
       token=tokens, raw=st.one_of(st.none(), st.sampled_from([b"\xff\xfe[gitlab]", b"x = " + b"[" * 5000,
                                                               b"[gitlab]\nurl = 'http://h'\n\xc3(", b"\x00"])))
def test_no_config_makes_a_command_exit_70(tmp_path: Path, doc, projects, token, raw) -> None:
    path = tmp_path / "fuzzed.toml"
    doc = {**doc, "projects": projects}
    doc.setdefault("storage", {}).setdefault("data_dir", str(tmp_path / "data"))
    if isinstance(doc["storage"].get("data_dir"), str) and not doc["storage"]["data_dir"].startswith(str(tmp_path)):
        doc["storage"]["data_dir"] = str(tmp_path / "d" / doc["storage"]["data_dir"].lstrip("/~"))
    if isinstance(doc.get("gitlab", {}).get("ca_bundle"), str):
        doc["gitlab"]["ca_bundle"] = str(tmp_path / "ca.pem")  # a file that is not a certificate
        (tmp_path / "ca.pem").write_text("not a certificate\n")
    try:
        path.write_bytes(raw if raw is not None else tomli_w.dumps(doc).encode())
    except (TypeError, ValueError):
        return  # not representable in TOML: no user can write it either
    saved = os.environ.get("GITLAB_TOKEN")
    os.environ["GITLAB_TOKEN"] = token.replace("\x00", "")
    try:
        try:
            config = load_config(path, env={})
            consume(config)
        except ConfigError as exc:
            assert "\n" not in str(exc)
        code, err = run(cli_main, ["--config", str(path), "count", "issues", "--json"])
        assert_clean(code, err)
    finally:
        os.environ.pop("GITLAB_TOKEN", None)
        if saved is not None:
            os.environ["GITLAB_TOKEN"] = saved


# Undecodable argv bytes reach Python as lone surrogates (\udc80-\udcff), so those are in too.
any_text = st.text(alphabet=st.one_of(st.characters(blacklist_characters="\x00"),
                                      st.sampled_from(["\udcff", "\udc80", "\ud800"])), max_size=20)
dates = st.one_of(st.dates().map(str), st.sampled_from(["9999-12-31", "0001-01-01", "2262-04-12", "1677-09-20"]),
                  st.text(alphabet=string.digits + "-", max_size=12))
def valid_or(values: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(values), st.sampled_from(values), any_text)  # mostly valid: the search runs


flags = st.lists(st.one_of(
    st.tuples(st.sampled_from(["--after", "--before"]), dates),
    st.tuples(st.sampled_from(["--label", "--author", "--project", "--state"]), any_text),
    st.tuples(st.just("--type"), valid_or(["issue", "mr", "discussion"])),
    st.tuples(st.just("--limit"), valid_or(["1", "10", "100", "0", "101", "-1", "1e3"])),
    st.tuples(st.just("--mode"), valid_or(["hybrid", "lexical", "semantic"])),
    st.tuples(st.just("--model"), valid_or(["embedded", "ollama:nomic-embed-text", "embedded:other", "openai"])),
    st.tuples(st.sampled_from(["--no-confidential", "--no-internal", "--json", "--explain"])),
), max_size=4)


@pytest.fixture(scope="module")
def shared_embedder() -> Iterator[None]:
    """One loaded embedded model for every search of the module (each CLI call would load its own)."""
    from gitlab_knowledge.embeddings import providers as provider_module

    real, loaded = provider_module.get_provider, {}

    def cached(config, name=None, model=None):
        key = (name or config.embedding.provider, model)
        if key not in loaded:
            loaded[key] = real(config, name, model)
        return loaded[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(provider_module, "get_provider", cached)
        yield


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.lists(any_text, min_size=0, max_size=3), options=flags)
@example(query=["x"], options=[("--label", "\udcff")])  # found by a fuzzer before: always tried
@example(query=["\udcff\udcfe"], options=[("--mode", "lexical")])
@example(query=["x"], options=[("--before", "9999-12-31")])
@example(query=["x"], options=[("--after", "0001-01-01"), ("--mode", "semantic")])
def test_no_search_argument_makes_it_exit_70(sample, shared_embedder, query, options) -> None:
    argv = [*query, *(part for option in options for part in option), "--config", str(sample.config_path)]
    code, err = run(search_main, argv)
    assert_clean(code, err)

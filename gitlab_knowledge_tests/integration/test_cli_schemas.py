"""Every command that answers a question has --json with a published schema: the real output of
each command, run as a subprocess, validates against its schema under gitlab_knowledge/cli/schemas/
(read as the installed package ships it). Read commands run on a private copy of the synced sample;
`sync`, `embed` and `doctor` on a sandbox GitLab serving a tiny generated dataset and a private
data directory (one sync, then one that fails)."""

import argparse
import importlib.resources
import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import tomli_w

from gitlab_knowledge.store.db import read_connection, write_connection
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import forked, project_paths, subprocess_env, write_config_file

BAD_TOKEN = "glpat-THIS-IS-A-WRONG-TOKEN-123"
# command -> schema file; every command that answers a question and has no schema elsewhere
SCHEMAS = {"doctor": "doctor", "sync": "sync", "sync-status": "sync_status", "list": "list", "count": "count",
           "show": "show", "embed": "embed", "stats": "stats", "index": "index_status", "explain": "explain",
           "related": "related", "history": "history", "me": "me", "person": "person"}


def schema(name: str) -> dict[str, Any]:
    return json.loads(importlib.resources.files("gitlab_knowledge.cli").joinpath("schemas", f"{name}.json").read_text())


def validate(command: str, payload: Any) -> None:
    validator = jsonschema.Draft202012Validator(schema(SCHEMAS[command]), format_checker=jsonschema.FormatChecker())
    errors = [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:300]}"
              for e in validator.iter_errors(payload)]
    assert not errors, f"{command} --json does not match cli/schemas/{SCHEMAS[command]}.json:\n" + "\n".join(errors[:10])


def cli(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    # cwd is the private home: never a directory with a dagster.yaml (the repository's).
    return forked(["gitlab_knowledge", *args], cwd=home, env=subprocess_env(**env), timeout=180)


def checked(home: Path, *args: str, code: int = 0, **env: str) -> Any:
    """Run `args --json`, check the exit code, validate stdout against the command's schema."""
    result = cli(home, *args, "--json", **env)
    assert result.returncode == code, (args, result.returncode, result.stderr)
    payload = json.loads(result.stdout)
    validate(args[0], payload)
    return payload


def test_every_schema_is_a_valid_draft_2020_12_schema():
    shipped = importlib.resources.files("gitlab_knowledge.cli").joinpath("schemas")
    assert {p.name for p in shipped.iterdir() if p.name.endswith(".json")} == {f"{n}.json" for n in SCHEMAS.values()}
    for name in SCHEMAS.values():
        jsonschema.Draft202012Validator.check_schema(schema(name))


@pytest.mark.parametrize("name", ["me", "person", "history"])
def test_a_nullable_timestamp_is_one_test_that_means_what_the_anyof_meant(name):
    """The graph tools' answers hold hundreds of nullable timestamps, and an MCP client validates
    each answer: the definition is a single nullable string (an anyOf per value cost the SDK's
    validation of a 100-entry `me` several times over), accepting and refusing as before."""
    definition = schema(name)["$defs"]["timestamp_or_null"]
    assert "anyOf" not in definition
    validator = jsonschema.Draft202012Validator(definition, format_checker=jsonschema.FormatChecker())
    for good in (None, "2024-03-15T09:12:44Z", "2024-03-15T09:12:44.5+01:00"):
        assert validator.is_valid(good), good
    for bad in ("2024-03-15", "yesterday", 1710494000, True, [], {}):
        assert not validator.is_valid(bad), bad


def test_the_help_names_each_schema():
    from gitlab_knowledge.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, name in SCHEMAS.items():
        help_texts = [a.help for a in sub.choices[command]._actions if "--json" in a.option_strings]
        assert help_texts and f"cli/schemas/{name}.json" in help_texts[0], (command, help_texts)


@pytest.fixture(scope="module")
def store_home(sample, tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """A private copy of the synced sample (GitLab unreachable), one document made stale, and the
    references the read commands ask about."""
    home = tmp_path_factory.mktemp("schemas-store")
    shutil.copytree(sample.config.data_dir, home / "data", ignore=shutil.ignore_patterns("dagster"))
    (home / "gitlab_knowledge.toml").write_text(tomli_w.dumps({
        "projects": list(sample.config.projects), "gitlab": {"url": "http://127.0.0.1:9"},
        "storage": {"data_dir": str(home / "data")}}), encoding="utf-8")
    db = home / "data" / sample.config.duckdb_path.name
    with read_connection(db) as con:
        project, issue, _ = con.execute("""
            SELECT p.path_with_namespace, i.iid, count(*) FROM issues i JOIN projects p ON p.id = i.project_id
            JOIN discussions d ON d.issue_id = i.id GROUP BY 1, 2 ORDER BY 3 DESC, 2 LIMIT 1""").fetchone()
        mr_project, mr = con.execute("""
            SELECT p.path_with_namespace, m.iid FROM merge_requests m JOIN projects p ON p.id = m.project_id
            JOIN notes n ON n.noteable_type = 'MergeRequest' AND n.noteable_id = m.id
            ORDER BY (n.type = 'DiffNote') DESC, m.id LIMIT 1""").fetchone()
        thread, stale = (r[0] for r in con.execute("""
            (SELECT id FROM documents WHERE source_type = 'discussion' ORDER BY id LIMIT 1)
            UNION ALL (SELECT id FROM documents WHERE source_type = 'issue' ORDER BY id DESC LIMIT 1)""").fetchall())
    # A document whose text changed after its vector and lexical entry were written: stale.
    with write_connection(db) as con:
        con.execute("UPDATE documents SET content_hash = ? WHERE id = ?", ["0" * 64, stale])
    return home, {"project": project, "issue": str(issue), "mr_project": mr_project, "mr": str(mr),
                  "thread": thread, "stale": stale}


READ_COMMANDS = [
    ("sync-status",),
    ("list", "issues", "--limit", "100"),
    ("list", "mrs", "--state", "locked"),  # none: an empty list is a list
    ("count", "merge_requests", "--project", "{project}"),
    ("show", "issue", "{issue}", "--project", "{project}"),
    ("show", "mr", "{mr}", "--project", "{mr_project}"),
    ("stats",),
    ("index", "status"),
    ("explain", "{mr_project}!{mr}"),
    ("explain", "{thread}"),
    ("related", "{mr_project}!{mr}"),
    ("history", "services/auth"),
    ("me", "--user", "janedoe", "--since", "2020-01-01"),
    ("person", "janedoe"),
    # The sample's wiki: pages are listed, counted, shown, explained by a section's URL.
    ("list", "wiki"),
    ("count", "wiki", "--project", "acme/platform"),
    ("show", "wiki", "adr/ADR-012-jwt-access-tokens"),
    ("explain", "https://gitlab.example.com/acme/platform/-/wikis/runbooks/postgresql-failover#promote-the-replica"),
    # The sample's releases: listed, counted, shown, explained by their URL, named by `related`.
    ("list", "releases"),
    ("count", "releases", "--project", "acme/web-app"),
    ("show", "release", "v2025.1.0"),
    ("explain", "https://gitlab.example.com/acme/web-app/-/releases/v3.2.0"),
    ("related", "acme/web-app!119"),
    ("related", "acme/platform#234"),
]


def test_read_commands_match_their_schemas(store_home):
    home, refs = store_home
    # Two at a time: each is mostly a Python start-up.
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda args: checked(home, *(a.format(**refs) for a in args)), READ_COMMANDS))
    stale = checked(home, "explain", refs["stale"])
    assert stale["verdict"] == "stale" and stale["reasons"]
    # Errors are not JSON: nothing on stdout, one `error:` line on stderr, exit 2.
    missing = cli(home, "show", "issue", "999999", "--json")
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.startswith("error: ") and missing.stderr.count("\n") == 1, missing.stderr
    # doctor --json reports failed checks in its own shape (GitLab is unreachable here), exit 1.
    doctor = checked(home, "doctor", code=1)
    assert not doctor["success"] and any(c["name"] == "gitlab" and c["status"] == "fail" for c in doctor["checks"])


def test_pipeline_commands_match_their_schemas(tmp_path):
    # Smaller than the small dataset: the sync embeds every document with the real model.
    generate_dataset(tmp_path / "dataset", projects=2, issues=8, mrs=4, seed=11, threads_per_parent_mean=2.0)
    with SandboxGitLab(dataset=tmp_path / "dataset") as sb:
        write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data")
        synced = checked(tmp_path, "sync")
        assert synced["success"] and len(synced["projects"]) == len(project_paths(sb))
        assert all({"raw_gitlab_payloads", "document_embeddings"} <= set(p["assets"]) for p in synced["projects"])
        embedded = checked(tmp_path, "embed")
        assert all(p["success"] and p["to_embed"] == 0 for p in embedded["projects"])
        assert checked(tmp_path, "doctor")["success"]

        # With --live, and for a note only GitLab has: the chain's other shapes.
        project = project_paths(sb)[0]
        issue = next(i for i in sb.state.list_items(project, "issues") if i["user_notes_count"] > 0)
        thread = next(t for t in sb.state.discussions(project, "issues", issue["iid"]) if not t["notes"][0]["system"])
        sb.state.reply(project, "issues", issue["iid"], thread["id"], "a reply the store has not seen")
        live = checked(tmp_path, "explain", f"discussion:{thread['id']}", "--live")
        assert live["verdict"] == "stale" and "thread_notes" in live["chain"]["gitlab"]
        note = sb.state.add_note(project, "issues", issue["iid"], "a note the store has not seen")
        missing = checked(tmp_path, "explain", f"{issue['web_url']}#note_{note['id']}")
        assert missing["document_id"] == f"note:{note['id']}" and set(missing["chain"]) == {"gitlab"}

        # A failed sync still prints its JSON (success false, the error per project), exit 3.
        failed = checked(tmp_path, "sync", code=3, GITLAB_TOKEN=BAD_TOKEN)
        assert not failed["success"] and failed["projects"][0]["error"]
        status = checked(tmp_path, "sync-status")
        assert "succeeded" in {r["status"] for r in status["runs"]}


def test_sync_status_shows_the_backlog_pending_rechecks_and_layers_behind(store_home, tmp_path):
    home, refs = store_home
    shutil.copytree(home / "data", tmp_path / "data")
    (tmp_path / "gitlab_knowledge.toml").write_text(
        (home / "gitlab_knowledge.toml").read_text().replace(str(home / "data"), str(tmp_path / "data")))
    db = next((tmp_path / "data").glob("*.duckdb"))
    with write_connection(db) as con:  # two items whose threads were never fetched: rechecks pending
        con.execute("UPDATE raw_payloads SET discussions_fetched_at = NULL WHERE id IN (SELECT raw_payload_id "
                    "FROM issues ORDER BY id LIMIT 2)")
    status = checked(tmp_path, "sync-status")
    by_project = {b["project"]: b for b in status["backlog"]}
    assert set(by_project) == set(status["configured_projects"])
    assert sum(b["pending_rechecks"] for b in by_project.values()) >= 2
    # The stale document of the fixture: its vector and lexical entry are behind the documents.
    assert any(line.startswith("vectors: 1 entry behind") for b in by_project.values() for line in b["behind"])
    human = cli(tmp_path, "sync-status")
    assert human.returncode == 0 and "Backlog" in human.stdout and "thread recheck(s) pending" in human.stdout
    assert "vectors: 1 entry behind documents" in human.stdout

"""`explain`: resolves every reference form, shows the chain, and says which layer is behind."""

import json

import pytest

from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.explain import explain
from gitlab_knowledge_tests.conftest import forked, subprocess_env, write_config_file
from gitlab_knowledge_tests.helpers import index_all, rows, run_layers, workspace


@pytest.fixture
def store(sandbox, synced):
    return sandbox, synced


def test_reference_forms_resolve(store):
    sb, config = store
    project = config.projects[0]
    issue = next(i for i in sb.state.list_items(project, "issues") if i["user_notes_count"])
    doc = f"issue:{issue['id']}"
    assert explain(workspace(config), f"{project}#{issue['iid']}").document_id == doc
    assert explain(workspace(config), f"#{issue['iid']}", project).document_id == doc
    assert explain(workspace(config), doc).document_id == doc
    assert explain(workspace(config), issue["web_url"]).document_id == doc
    thread = next(t for t in sb.state.discussions(project, "issues", issue["iid"]) if not t["notes"][0]["system"])
    note_url = f"{issue['web_url']}#note_{thread['notes'][0]['id']}"
    assert explain(workspace(config), note_url).document_id == f"discussion:{thread['id']}"
    with pytest.raises(UsageError, match="several projects"):
        explain(workspace(config), "#1")
    for bad in ("#999999", "nonsense", "discussion:nope"):
        with pytest.raises(UsageError):
            explain(workspace(config), bad, project)


def test_fresh_after_a_sync_and_the_chain_is_complete(store):
    sb, config = store
    project = config.projects[0]
    issue = sb.state.list_items(project, "issues")[0]
    result = explain(workspace(config), f"{project}#{issue['iid']}", live=True)
    assert result.verdict == "fresh", result.reasons
    chain = result.chain
    assert chain["raw_payloads"][0]["sync_status"] == "succeeded" and chain["raw_payloads"][0]["dagster_run_id"]  # the job wrote it
    assert chain["document"]["content_hash"] == chain["vector"]["content_hash"] == chain["lexical"]["content_hash"]
    assert chain["gitlab"]["exists"]


def test_stale_layers_are_named(store):
    sb, config = store
    project = config.projects[0]
    issue = sb.state.list_items(project, "issues")[0]
    ref = f"{project}#{issue['iid']}"
    sb.clock.advance(3600)
    sb.state.update_issue(project, issue["iid"], description="a new description about cache stampedes")
    live = explain(workspace(config), ref, live=True)
    assert live.verdict == "stale" and any("GitLab has a newer version" in r for r in live.reasons)
    run_layers(config, [project], ["raw_gitlab_payloads"])
    raw_only = explain(workspace(config), ref)
    assert any("after the last normalization" in r for r in raw_only.reasons)
    run_layers(config, [project], ["normalized_gitlab"])
    assert any("after documents were last built" in r for r in explain(workspace(config), ref).reasons)
    run_layers(config, [project], ["search_documents"])
    behind = explain(workspace(config), ref).reasons
    assert any("embedded from an older text" in r for r in behind)
    assert any("lexical entry is from an older version" in r for r in behind)
    index_all(config)
    assert explain(workspace(config), ref, live=True).verdict == "fresh"


def test_cli_explain(store, tmp_path):
    sb, config = store
    path = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, config.data_dir)
    project = config.projects[0]
    iid = sb.state.list_items(project, "issues")[0]["iid"]
    run = forked(["gitlab_knowledge", "--config", str(path), "explain", f"{project}#{iid}", "--json"],
                 env=subprocess_env(), timeout=120)
    assert run.returncode == 0, run.stderr
    payload = json.loads(run.stdout)
    assert payload["verdict"] == "fresh" and payload["chain"]["vector"]["present"]
    human = forked(["gitlab_knowledge", "--config", str(path), "explain", f"{project}#{iid}"], env=subprocess_env(),
                   timeout=120)
    assert "raw payload" in human.stdout and "fresh" in human.stdout
    assert rows(config, "SELECT count(*) FROM documents")[0][0] > 0


def test_live_sees_a_throttled_note_and_names_the_thread_notes_the_store_lacks(store):
    sb, config = store
    project = config.projects[0]
    issue = next(i for i in sb.state.list_items(project, "issues") if i["user_notes_count"] > 0)
    thread = next(t for t in sb.state.discussions(project, "issues", issue["iid"]) if not t["notes"][0]["system"])
    sb.clock.advance(3600)
    sb.state.update_issue(project, issue["iid"], description="touched: a note right after stays invisible")
    run_layers(config, [project], None)
    assert explain(workspace(config), f"{project}#{issue['iid']}", live=True).verdict == "fresh"
    # Inside GitLab's 60 s window: updated_at does not move, user_notes_count does.
    touched = sb.state.get(project, "issues", issue["iid"])["updated_at"]
    reply = sb.state.reply(project, "issues", issue["iid"], thread["id"], "a throttled reply")
    assert sb.state.get(project, "issues", issue["iid"])["updated_at"] == touched
    item = explain(workspace(config), f"{project}#{issue['iid']}", live=True)
    assert item.verdict == "stale" and any("user notes, the raw payload" in r for r in item.reasons), item.reasons
    doc = f"discussion:{thread['id']}"
    threaded = explain(workspace(config), doc, live=True)
    assert any(f"lacks {reply['id']}" in r for r in threaded.reasons), threaded.reasons


def test_a_note_not_stored_yet_is_looked_up_in_gitlab(store):
    sb, config = store
    project = config.projects[0]
    issue = next(i for i in sb.state.list_items(project, "issues") if i["user_notes_count"] > 0)
    note = sb.state.add_note(project, "issues", issue["iid"], "a note the store has not seen")
    url = f"{issue['web_url']}#note_{note['id']}"
    result = explain(workspace(config), url)
    assert result.verdict == "stale" and result.chain["gitlab"]["note_id"] == note["id"]
    assert any(f"GitLab has note {note['id']}" in r and "the store lacks" in r for r in result.reasons)
    with pytest.raises(UsageError, match="GitLab has no such user note"):
        explain(workspace(config), f"{issue['web_url']}#note_987654321")


def test_a_note_the_raw_layer_holds_says_normalization_is_behind(store, tmp_path):
    """Issue 28 point 8: the raw thread payload has the note, only normalization is behind: no sync
    has to fetch it, and explain says which layer is behind instead."""
    import importlib.resources

    import jsonschema

    sb, config = store
    project = config.projects[0]
    issue = next(i for i in sb.state.list_items(project, "issues") if i["user_notes_count"] > 0)
    sb.clock.advance(3600)
    note = sb.state.add_note(project, "issues", issue["iid"], "a note only the raw layer has")
    run_layers(config, [project], ["raw_gitlab_payloads"])  # the normalized watermark stays behind
    url = f"{issue['web_url']}#note_{note['id']}"
    result = explain(workspace(config), url)
    assert result.verdict == "stale" and "gitlab" not in result.chain, result.chain
    assert [r["resource_type"] for r in result.chain["raw_payloads"]] == ["discussion"]
    assert result.chain["raw_payloads"][0]["change_seq"] > result.chain["watermarks"]["normalized"]
    assert len(result.reasons) == 1 and "the normalized layer is behind" in result.reasons[0], result.reasons
    assert str(note["id"]) in result.reasons[0] and "fetches" not in result.reasons[0]

    path = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, config.data_dir)
    run = forked(["gitlab_knowledge", "--config", str(path), "explain", url, "--json"], env=subprocess_env(),
                 timeout=120)
    assert run.returncode == 0, run.stderr
    schema = json.loads(importlib.resources.files("gitlab_knowledge.cli").joinpath("schemas", "explain.json")
                        .read_text())
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(json.loads(run.stdout))

"""`person`, `similar` and `list_items` through `python -m gitlab_knowledge.mcp` driven by the SDK's
client over stdio, against a copy of the synced sample: each answer is what the CLI's function
returns (validated by the published schema), and confidential issues and internal notes stay out
unless the config opts in. Before these tools an agent could not ask who works on what, what is
like an item, or for "open MRs labelled security updated this week" without a query."""

from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import jsonschema
import pytest

from gitlab_knowledge.config import load_config
from gitlab_knowledge.graph import people
from gitlab_knowledge.mcp.inline_schema import inlined
from gitlab_knowledge.mcp.query_tools import list_output
from gitlab_knowledge.mcp.tools import plain, schema
from gitlab_knowledge.store.queries import ListFilters, list_items
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.integration.test_mcp_graph import (
    CONFIDENTIAL,
    INTERNAL,
    answer,
    configs,  # noqa: F401 - the module fixture the sessions use
    excerpts,
    failure,
    references,
    session,
)

OUTPUTS = {"person": schema("cli/schemas/person.json"), "similar": schema("search/schema.json"),
           "list_items": list_output()}
SINCE = "2024-06-01"
CALLS = [
    ("person", {"user": "janedoe", "limit": 50}),
    ("person", {"user": "@johndoe", "project": "acme/platform", "since": SINCE, "limit": 5}),
    ("list_items", {"kind": "issue", "limit": 100}),
    ("list_items", {"kind": "mr", "state": "merged", "labels": ["security"], "updated_since": SINCE,
                    "sort": "updated_asc", "limit": 100}),
    ("list_items", {"kind": "merge_request", "path": "services/auth", "participant": "li.wei"}),
    ("list_items", {"kind": "issue", "assignee": "janedoe", "author": "johndoe", "created_since": "2024-01-01",
                    "sort": "created_desc", "limit": 100}),
    ("similar", {"ref": "acme/platform#219", "limit": 5}),
    ("similar", {"ref": "acme/platform#212", "mode": "lexical", "limit": 50}),
    ("list_items", {"kind": "wiki", "project": "acme/platform"}),
    ("list_items", {"kind": "releases", "project": "acme/web-app"}),
]
ERRORS = [
    ("similar", {"ref": "acme/platform#215"}),  # confidential
    ("list_items", {"kind": "issue", "reviewer": "janedoe"}),
    ("list_items", {"kind": "issue", "state": "weird"}),
    ("list_items", {"kind": "mr", "updated_since": "last week"}),
    ("person", {"user": "nobody.at.all"}),
]


@pytest.fixture(scope="module")
def default(configs: dict[str, Path]) -> tuple[list[Any], list[Any]]:  # noqa: F811 - the fixture above
    return session(configs["default"], CALLS + ERRORS)


@pytest.fixture(scope="module")
def opted_in(configs: dict[str, Path]) -> tuple[list[Any], list[Any]]:  # noqa: F811
    return session(configs["opted_in"], CALLS + ERRORS[:1])


def test_the_tools_are_listed_with_their_schemas(default: tuple[list[Any], list[Any]]) -> None:
    listed = {t.name: t for t in default[0]}
    for name, output in OUTPUTS.items():
        jsonschema.Draft202012Validator.check_schema(listed[name].input_schema)
        assert listed[name].output_schema == inlined(output) and listed[name].annotations.read_only_hint
    assert "query" not in listed["list_items"].input_schema["properties"]


def test_opted_in_answers_are_the_cli_functions(opted_in: tuple[list[Any], list[Any]],
                                                configs: dict[str, Path]) -> None:  # noqa: F811
    workspace = Workspace(load_config(configs["opted_in"]))
    results = [answer(r, OUTPUTS[name]) for (name, _), r in zip(CALLS, opted_in[1], strict=False)]
    assert results[0] == people.person(workspace, "janedoe", limit=50).as_dict()
    assert results[1] == people.person(workspace, "johndoe", "acme/platform", datetime.fromisoformat(SINCE),
                                       5).as_dict()
    from gitlab_knowledge import kinds

    def listed(kind: kinds.Kind, **filters: Any) -> list[dict[str, Any]]:
        limit = filters.pop("limit", 20)
        return plain(list_items(workspace, kind, None, limit, None, ListFilters(**filters)))

    assert results[2]["items"] == listed(kinds.ISSUE, limit=100)
    assert results[3]["items"] == listed(kinds.MERGE_REQUEST, state="merged", labels=("security",),
                                         updated_since=datetime.fromisoformat(SINCE), sort="updated_asc", limit=100)
    assert results[4]["items"] == listed(kinds.MERGE_REQUEST, path="services/auth", participant="li.wei")
    assert results[5]["items"] == listed(kinds.ISSUE, assignee="janedoe", author="johndoe",
                                         created_since=datetime(2024, 1, 1), sort="created_desc", limit=100)
    from gitlab_knowledge.store.keyed_queries import list_keyed

    assert results[8]["items"] == list_keyed(workspace, kinds.WIKI_PAGE, "acme/platform", 20) and results[8]["items"]
    assert results[9]["items"] == list_keyed(workspace, kinds.RELEASE, "acme/web-app", 20) and results[9]["items"]
    assert answer(opted_in[1][len(CALLS)], OUTPUTS["similar"])["results"]


def test_list_items_filters_say_what_the_tables_say(default: tuple[list[Any], list[Any]],
                                                    configs: dict[str, Path]) -> None:  # noqa: F811
    """"Merged MRs labelled security updated since a day", oldest first, straight from SQL."""
    data = load_config(configs["default"]).duckdb_path
    with duckdb.connect(str(data), read_only=True) as con:
        want = [r[0] for r in con.execute("""
            SELECT p.path_with_namespace || '!' || m.iid FROM merge_requests m JOIN projects p ON p.id = m.project_id
            WHERE m.state = 'merged' AND list_contains(m.labels, 'security') AND m.updated_at >= ?::TIMESTAMP
            ORDER BY m.updated_at, m.id""", [SINCE]).fetchall()]
        auth = {r[0] for r in con.execute("""
            SELECT p.path_with_namespace || '!' || m.iid FROM merge_requests m JOIN projects p ON p.id = m.project_id
            WHERE (m.id IN (SELECT merge_request_id FROM mr_files WHERE starts_with(new_path, 'services/auth/')
                                                                      OR starts_with(old_path, 'services/auth/'))
                   OR m.id IN (SELECT n.noteable_id FROM notes n JOIN note_positions np ON np.note_id = n.id
                               WHERE starts_with(np.new_path, 'services/auth/')))
              AND (m.author_username = 'li.wei' OR list_contains(m.assignees, 'li.wei')
                   OR list_contains(m.reviewers, 'li.wei')
                   OR m.id IN (SELECT noteable_id FROM notes WHERE noteable_type = 'MergeRequest'
                               AND author_username = 'li.wei'))""").fetchall()}
    merged = answer(default[1][3], OUTPUTS["list_items"])
    assert [f"{r['project']}!{r['iid']}" for r in merged["items"]] == want and want
    assert "security" in default[1][3].content[0].text
    touched = answer(default[1][4], OUTPUTS["list_items"])
    got = {f"{r['project']}!{r['iid']}" for r in touched["items"]}
    assert got and got <= auth and len(got) == min(20, len(auth))
    assert all(r["reviewers"] is not None for r in touched["items"])


def test_confidential_issues_and_internal_notes_stay_out_by_default(default: tuple[list[Any], list[Any]],
                                                                     opted_in: tuple[list[Any], list[Any]]) -> None:
    for (name, _), hidden, shown in zip(CALLS, default[1], opted_in[1], strict=False):
        hidden_doc, shown_doc = answer(hidden, OUTPUTS[name]), answer(shown, OUTPUTS[name])
        if name == "list_items":
            hidden_refs = {f"{r['project']}#{r.get('iid')}" for r in hidden_doc["items"]}
            assert not hidden_refs & CONFIDENTIAL, name
        elif name == "similar":
            assert not any(r.get("confidential") for r in hidden_doc["results"]), name
            assert not {r["project"] + r["reference"] for r in hidden_doc["results"]} & CONFIDENTIAL
        else:
            assert not references(hidden_doc) & CONFIDENTIAL, name
            assert references(hidden_doc) == references(shown_doc) - CONFIDENTIAL, name
        assert not any(e.startswith(INTERNAL) for e in excerpts(hidden_doc)), name
        assert INTERNAL not in hidden.content[0].text
    everything = answer(opted_in[1][2], OUTPUTS["list_items"])
    assert {f"{r['project']}#{r['iid']}" for r in everything["items"]} >= CONFIDENTIAL


def test_errors_are_one_line_saying_what_to_do(default: tuple[list[Any], list[Any]]) -> None:
    confidential, reviewer, state, day, nobody = (failure(r) for r in default[1][len(CALLS):])
    assert "confidential" in confidential and "include_confidential" in confidential
    assert "reviewer" in reviewer and "issues" in reviewer
    assert "state" in state and "input schema" in state
    assert "updated_since" in day
    assert "nobody.at.all" in nobody

"""The knowledge-graph tools (related, file_history, me) and the links and files of get_issue /
get_merge_request, through `python -m gitlab_knowledge.mcp` driven by the SDK's client over stdio,
against a copy of the synced sample: each answer is the CLI function's own document, validated by
the CLI's schema, and confidential issues and internal notes stay out unless the config opts in."""

import asyncio
import copy
import json
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import tomli_w
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from gitlab_knowledge.config import load_config
from gitlab_knowledge.graph import people, queries
from gitlab_knowledge.graph.answers import ME_LIMIT
from gitlab_knowledge.graph.history import history as file_history
from gitlab_knowledge.mcp.bounds import GRAPH_LIST
from gitlab_knowledge.mcp.inline_schema import inlined
from gitlab_knowledge.mcp.tools import schema
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import DEFAULT_TOKEN
from gitlab_knowledge_tests.conftest import REPO, subprocess_env

GRAPH_TOOLS = {"related": "related.json", "file_history": "history.json", "me": "me.json"}
# The sample's confidential issues, and the opening of every internal note in it.
CONFIDENTIAL = {"acme/platform#215", "acme/platform#226", "acme/platform#243", "acme/web-app#69"}
INTERNAL = "Internal:"
SINCE = "2024-10-01"


@pytest.fixture(scope="module")
def configs(sample: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One store copy, two configs: the default one and one opting in to everything."""
    base = tmp_path_factory.mktemp("mcp-graph")
    shutil.copytree(sample.config.data_dir, base / "data", ignore=shutil.ignore_patterns("*.sock"))
    out = {}
    for name, mcp in (("default", {}), ("opted_in", {"include_confidential": True, "include_internal": True})):
        path = base / f"{name}.toml"
        path.write_text(tomli_w.dumps({"projects": ["acme/platform", "acme/web-app"],
                                       "gitlab": {"url": "http://127.0.0.1:9"},
                                       "storage": {"data_dir": str(base / "data")}, "mcp": mcp}))
        out[name] = path
    return out


def session(config_path: Path, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    """The listed tools and each call's result, from one server process over stdio."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "gitlab_knowledge.mcp", "--config",
                                                                 str(config_path)], env=subprocess_env(), cwd=str(REPO))

    async def go() -> tuple[list[Any], list[Any]]:
        async with Client(params) as client:
            listed = (await client.list_tools()).tools
            return listed, [await client.call_tool(name, arguments) for name, arguments in calls]

    return asyncio.run(go())


def answer(result: Any, output_schema: dict[str, Any]) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    assert result.content[0].text.strip()
    jsonschema.validate(result.structured_content, output_schema, format_checker=jsonschema.FormatChecker())
    return result.structured_content


def failure(result: Any) -> str:
    assert result.is_error
    text = result.content[0].text
    assert "\n" not in text and DEFAULT_TOKEN not in text
    return text


def references(value: Any) -> set[str]:
    """Every `reference` anywhere in a document."""
    if isinstance(value, dict):
        own = {value["reference"]} if isinstance(value.get("reference"), str) else set()
        return own.union(*(references(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(references(v) for v in value)) if value else set()
    return set()


def excerpts(value: Any) -> list[str]:
    """Every note `excerpt` anywhere in a document."""
    if isinstance(value, dict):
        own = [value["excerpt"]] if isinstance(value.get("excerpt"), str) else []
        return own + [e for v in value.values() for e in excerpts(v)]
    return [e for v in value for e in excerpts(v)] if isinstance(value, list) else []


CALLS = [
    ("related", {"ref": "acme/platform!847"}),
    ("related", {"ref": "acme/platform!827"}),
    ("related", {"ref": "acme/platform#234"}),
    ("file_history", {"path": "services/auth/jwt.py", "project": "acme/platform"}),
    ("file_history", {"path": "./services/", "limit": 3}),
    ("me", {"user": "johndoe", "since": SINCE, "limit": GRAPH_LIST}),
    ("me", {"user": "sam.okafor", "since": SINCE, "project": "acme/platform"}),
    ("get_merge_request", {"iid": 847, "project": "acme/platform"}),
    ("get_issue", {"iid": 234, "project": "acme/platform"}),
    ("me", {"user": "johndoe", "since": "2000-01-01", "limit": GRAPH_LIST}),  # 120 new comments: more than a list holds
    ("me", {"user": "johndoe", "since": "2000-01-01"}),  # the default limit
]
ERRORS = [
    ("related", {"ref": "acme/platform#215"}),
    ("related", {"ref": "acme/platform#99999"}),
    ("related", {"ref": "not a reference"}),
    ("file_history", {"path": "/"}),
    ("file_history", {"path": "src", "limit": 51}),
    ("file_history", {"path": "src", "project": "acme/nope"}),
    ("me", {}),
    ("me", {"user": "johndoe", "since": "2024-13-45"}),
    ("me", {"user": "johndoe", "since": "yesterday"}),
    ("me", {"user": "johndoe", "limit": GRAPH_LIST + 1}),
]


@pytest.fixture(scope="module")
def default(configs: dict[str, Path]) -> tuple[list[Any], list[Any]]:
    return session(configs["default"], CALLS + ERRORS)


@pytest.fixture(scope="module")
def opted_in(configs: dict[str, Path]) -> tuple[list[Any], list[Any]]:
    return session(configs["opted_in"], CALLS + [ERRORS[0]])


def test_the_graph_tools_are_listed_with_the_cli_schemas(default: tuple[list[Any], list[Any]]) -> None:
    listed = {t.name: t for t in default[0]}
    assert set(GRAPH_TOOLS) <= set(listed)
    for name, file in GRAPH_TOOLS.items():
        tool = listed[name]
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        assert tool.output_schema == inlined(schema(f"cli/schemas/{file}"))
        assert tool.annotations.read_only_hint and tool.description
    # Published with their definitions in place: a client validating every answer resolves no `$ref`.
    for tool in default[0]:
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        assert '"$ref"' not in json.dumps(tool.output_schema) and "$defs" not in tool.output_schema, tool.name


def leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in leaves(v, (*path, k))] or [path]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in leaves(v, (*path, i))] or [path]
    return [path]


def test_the_published_schemas_judge_answers_as_the_files_do(default: tuple[list[Any], list[Any]]) -> None:
    """Each answer, and each answer with one value replaced by one of another type, is accepted
    or rejected alike by the schema file and by the inlined copy the server lists."""
    listed = {t.name: t.output_schema for t in default[0]}
    judged = rejected = 0
    for (name, _), result in zip(CALLS, default[1], strict=False):
        file = schema(f"cli/schemas/{GRAPH_TOOLS[name]}") if name in GRAPH_TOOLS else schema("item.schema.json")
        ours, theirs = jsonschema.Draft202012Validator(file), jsonschema.Draft202012Validator(listed[name])
        doc = result.structured_content
        assert not list(ours.iter_errors(doc)) and not list(theirs.iter_errors(doc))
        for path in leaves(doc)[::7]:
            bad = copy.deepcopy(doc)
            *parents, last = path or (None,)
            if last is None:
                continue
            node = bad
            for key in parents:
                node = node[key]
            node[last] = {"a": 1} if not isinstance(node[last], dict) else 1
            assert bool(list(ours.iter_errors(bad))) == bool(list(theirs.iter_errors(bad))), (name, path)
            judged, rejected = judged + 1, rejected + bool(list(ours.iter_errors(bad)))
    assert judged > 100 and rejected > 0.9 * judged


def test_opted_in_answers_are_the_cli_documents(opted_in: tuple[list[Any], list[Any]],
                                                configs: dict[str, Path]) -> None:
    """Nothing hidden: each tool returns exactly what the CLI function returns."""
    workspace = Workspace(load_config(configs["opted_in"]))
    since = datetime.fromisoformat(SINCE)
    expected = [
        queries.related(workspace, "acme/platform!847").as_dict(),
        queries.related(workspace, "acme/platform!827").as_dict(),
        queries.related(workspace, "acme/platform#234").as_dict(),
        file_history(workspace, "services/auth/jwt.py", "acme/platform").as_dict(),
        file_history(workspace, "./services/", None, 3).as_dict(),
        people.me(workspace, "johndoe", since, limit=GRAPH_LIST).as_dict(),
        people.me(workspace, "sam.okafor", since, "acme/platform", limit=ME_LIMIT).as_dict(),
    ]
    results = opted_in[1]
    for (name, _), result, want in zip(CALLS, results, expected, strict=False):
        assert answer(result, schema(f"cli/schemas/{GRAPH_TOOLS[name]}")) == want
    # The sample's links and renames are there to be hidden or followed.
    assert "acme/platform#243" in references(results[0].structured_content["links"]["mentioned_in"])
    assert "acme/platform#215" in references(results[1].structured_content["links"]["closes"])
    history = results[3].structured_content
    assert {"from": "services/auth/tokens.py", "to": "services/auth/jwt.py"}.items() <= history["renames"][0].items()
    assert results[4].structured_content["total"] > 3 == len(results[4].structured_content["merge_requests"])
    assert any(e.startswith(INTERNAL) for e in excerpts(results[5].structured_content))
    secret = answer(opted_in[1][len(CALLS)], schema("cli/schemas/related.json"))
    assert secret["item"]["reference"] == "acme/platform#215"
    # A list past GRAPH_LIST keeps its newest entries, and the text says how many there were.
    everything = people.me(workspace, "johndoe", datetime.fromisoformat("2000-01-01")).as_dict()
    capped = answer(results[9], schema("cli/schemas/me.json"))
    assert len(everything["changes"]["notes"]) > GRAPH_LIST
    assert capped["changes"]["notes"] == everything["changes"]["notes"][:GRAPH_LIST]
    assert f"(first {GRAPH_LIST} of {len(everything['changes']['notes'])})" in results[9].content[0].text
    # Unless asked for more, the newest ME_LIMIT of each list; the counts are the whole lists'.
    cut = answer(results[10], schema("cli/schemas/me.json"))
    assert cut["counts"] == everything["counts"] and cut["counts"]["notes"] > ME_LIMIT
    for key in ("assigned_issues", "assigned_mrs", "review_requested", "authored_open_mrs", "mentions"):
        assert cut[key] == everything[key][:ME_LIMIT], key
    for key in ("notes", "state_changes"):
        assert cut["changes"][key] == everything["changes"][key][:ME_LIMIT], key
    assert f"(first {ME_LIMIT} of {len(everything['changes']['notes'])})" in results[10].content[0].text


def cut_lists(doc: dict[str, Any]) -> bool:
    """A `me` answer some list of which holds fewer entries than it counts."""
    counts = doc.get("counts") if "changes" in doc else None
    if not counts:
        return False
    lists = {**{k: v for k, v in doc.items() if isinstance(v, list)}, **doc["changes"]}
    return any((counts.get(k) or 0) > len(v) for k, v in lists.items())


def test_confidential_issues_and_internal_notes_stay_out_by_default(default: tuple[list[Any], list[Any]],
                                                                     opted_in: tuple[list[Any], list[Any]]) -> None:
    for (name, _), hidden, shown in zip(CALLS, default[1][:len(CALLS)], opted_in[1][:len(CALLS)], strict=True):
        output = schema(f"cli/schemas/{GRAPH_TOOLS[name]}") if name in GRAPH_TOOLS else schema("item.schema.json")
        hidden_doc, shown_doc = answer(hidden, output), answer(shown, output)
        assert not references(hidden_doc) & CONFIDENTIAL, name
        assert not any(e.startswith(INTERNAL) for e in excerpts(hidden_doc)), name
        assert INTERNAL not in hidden.content[0].text and "SSRF" not in hidden.content[0].text
        # What is left is what the opted-in answer holds, less the hidden items (when no list was
        # cut: a cut list shows the newest of what is left).
        if not cut_lists(shown_doc):
            assert references(hidden_doc) == references(shown_doc) - CONFIDENTIAL, name
    related_847 = default[1][0].structured_content
    assert related_847["links"]["mentioned_in"] and related_847["links"]["closes"] == \
        opted_in[1][0].structured_content["links"]["closes"]
    assert "acme/platform#215" not in references(default[1][1].structured_content)


def test_items_carry_their_links_and_an_mrs_files(default: tuple[list[Any], list[Any]],
                                                  configs: dict[str, Path]) -> None:
    mr = answer(default[1][7], schema("item.schema.json"))
    issue = answer(default[1][8], schema("item.schema.json"))
    full = queries.related(Workspace(load_config(configs["default"])), "acme/platform#234").as_dict()["links"]
    assert issue["links"] == {g: [{k: x[k] for k in ("reference", "type", "title", "state")} for x in links]
                              for g, links in full.items()}
    assert issue["counts"]["links"] == sum(len(v) for v in full.values()) > 0
    assert "acme/platform!847" in references(issue["links"]["closed_by"] + issue["links"]["mentioned_in"])
    assert "files" not in issue and "files_over_limit" not in issue["omitted"]
    assert mr["counts"]["files"] == len(mr["files"]) == 23 and mr["omitted"]["files_over_limit"] == 0
    assert all(set(f) == {"old_path", "new_path", "new_file", "renamed_file", "deleted_file"} for f in mr["files"])
    assert "## Files changed (23)" in default[1][7].content[0].text
    assert f"`{mr['files'][0]['new_path']}`" in default[1][7].content[0].text
    assert "## Links" in default[1][8].content[0].text


def test_tool_errors_are_one_line_saying_what_to_do(default: tuple[list[Any], list[Any]]) -> None:
    messages = [failure(result) for result in default[1][len(CALLS):]]
    confidential, unknown, garbled, empty, over, project, nobody, bad_day, not_a_day, too_many = messages
    assert "confidential" in confidential and "include_confidential" in confidential
    assert "#99999" in unknown
    assert "related expects" in garbled
    assert "path" in empty
    assert "limit" in over and "50" in over
    assert "acme/nope" in project
    assert "pass user" in nobody and "--user" not in nobody
    assert "since" in bad_day
    assert "since" in not_a_day and "input schema" in not_a_day
    assert "limit" in too_many and str(GRAPH_LIST) in too_many


def test_file_history_cuts_each_group_of_links_as_related_does(configs: dict[str, Path], tmp_path: Path) -> None:
    """An MR mentioning 130 issues listed all 130 in `file_history` (related cut them at GRAPH_LIST):
    each group is cut there too, and `links_omitted` and the text say how many more there were."""
    import duckdb

    from gitlab_knowledge.mcp.context import Context
    from gitlab_knowledge.mcp.tools import all_tools

    shutil.copytree(configs["default"].parent / "data", tmp_path / "data")
    path = tmp_path / "capped.toml"
    path.write_text(configs["default"].read_text().replace(str(configs["default"].parent / "data"),
                                                         str(tmp_path / "data")))
    config = load_config(path)
    with duckdb.connect(str(config.duckdb_path)) as con:
        mr_id, project_id, file = con.execute("""
            SELECT m.id, m.project_id, f.new_path FROM merge_requests m JOIN projects p ON p.id = m.project_id
            JOIN mr_files f ON f.merge_request_id = m.id WHERE p.path_with_namespace = 'acme/platform' AND m.iid = 847
            ORDER BY f.position LIMIT 1""").fetchone()
        before = con.execute("SELECT count(*) FROM item_references WHERE source_type = 'merge_request' "
                             "AND source_id = ? AND kind = 'mentions'", [mr_id]).fetchone()[0]
        con.execute("""
            INSERT INTO item_references (project_id, source_type, source_id, note_id, found_in, kind, target_type,
                                         target_path, target_iid, target_project_id, external, text)
            SELECT ?, 'merge_request', ?, NULL, 'description', 'mentions', 'issue', 'elsewhere/tracker', 5000 + i,
                   NULL, true, 'elsewhere/tracker#' || (5000 + i) FROM range(130) t(i)""", [project_id, mr_id])
    tool = {t.name: t for t in all_tools()}["file_history"]
    ctx = Context.create(config, resident=None)  # type: ignore[arg-type]  # file_history searches nothing
    text, out = asyncio.run(tool.handler(ctx, {"path": file, "project": "acme/platform"}))
    jsonschema.validate(out, tool.output_schema, format_checker=jsonschema.FormatChecker())
    [mr] = [m for m in out["merge_requests"] if m["reference"] == "acme/platform!847"]
    total = before + 130
    assert len(mr["links"]["mentions"]) == GRAPH_LIST and mr["links_omitted"] == {"mentions": total - GRAPH_LIST}
    # The newest GRAPH_LIST of what the CLI's function lists through the same lens.
    whole = file_history(ctx.workspace(visible_only=True), file, "acme/platform").as_dict()["merge_requests"]
    [full] = [m for m in whole if m["reference"] == "acme/platform!847"]
    assert mr["links"]["mentions"] == full["links"]["mentions"][:GRAPH_LIST]
    assert f"[{total - GRAPH_LIST:,} more link(s) (mentions) not shown" in text
    assert all("links_omitted" not in m for m in out["merge_requests"] if m is not mr)

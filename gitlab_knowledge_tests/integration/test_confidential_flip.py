"""An issue made confidential in GitLab is hidden by a shared server within `auth_cache_seconds`,
not at the next sync (mcp/confidential_watch.py, store/overlay.py, store/viewer_lens.py).

The server runs in this process over a copy of the synced sample (uvicorn on a 127.0.0.1 socket,
the SDK's Streamable HTTP app behind the GitLab users guard as serve_http stacks them, with an
injected clock); the sandbox GitLab the sample was synced from knows a Guest of acme/platform
(internal here, so that the Guest reads its merge requests: the MR that closes the issue is part
of what must hide), the author of the issue flipped and a Reporter. The official SDK client asks with
each user's own token. Nothing is synced after the flip: only the server's check can know it."""

import asyncio
import json
import shutil
import threading
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gitlab_knowledge.config import Config, parse_config
from gitlab_knowledge.mcp import server as server_module
from gitlab_knowledge.mcp.gitlab_auth import gitlab_auth_app
from gitlab_knowledge.mcp.http import listen, transport_security, whole_body
from gitlab_knowledge.mcp.resident import Resident
from gitlab_knowledge_sandbox import SAMPLE_DATASET, SandboxGitLab
from gitlab_knowledge_sandbox.users import GUEST, REPORTER, set_visibility
from gitlab_knowledge_tests.helpers import Clock

PLATFORM, WEB = 101, 102
FLIPPED_IID, FLIPPED_ID, CLOSER = 196, 48446, 812  # "Users are logged out on every deploy", closed by !812
CLOSER_DOC = "merge_request:91549"  # !812's document: its `Closes:` line was written with #196's title
TITLE = "Users are logged out on every deploy"
REF = f"acme/platform#{FLIPPED_IID}"
TOKENS = {"gus": "glpat-flip-gus-0123456", "janedoe": "glpat-flip-jane-012345", "rita": "glpat-flip-rita-012345"}
BOUND = 300.0


@pytest.fixture(scope="module")
def gitlab() -> Iterator[SandboxGitLab]:
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        users = sb.state.users
        users.add_user("gus", TOKENS["gus"], user_id=921)
        users.set_member(PLATFORM, 921, GUEST)
        users.add_user("janedoe", TOKENS["janedoe"], user_id=17)  # the issue's author (the dataset's id)
        users.set_member(PLATFORM, 17, GUEST)
        users.add_user("rita", TOKENS["rita"], user_id=923)
        users.set_member(PLATFORM, 923, REPORTER)
        set_visibility(sb.state, PLATFORM, "internal")  # a private project's Guest sees no MR at all
        set_visibility(sb.state, WEB, "public")
        yield sb


@pytest.fixture(scope="module")
def server(sample: Any, gitlab: SandboxGitLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Clock]]:
    import uvicorn

    base = tmp_path_factory.mktemp("confidential-flip")
    shutil.copytree(sample.config.data_dir, base / "data", ignore=shutil.ignore_patterns("*.sock"))
    config: Config = parse_config({
        "gitlab": {"url": gitlab.url, "rate_limit": 0, "max_retries": 0, "timeout": 10},
        "projects": ["acme/platform", "acme/web-app"], "storage": {"data_dir": str(base / "data")},
        "mcp": {"auth": "gitlab", "include_confidential": True, "include_internal": True,
                "auth_cache_seconds": BOUND}}, base, {}, "test")
    resident = Resident(config, local_socket=False)
    clock = Clock()
    context = resident.context
    app = whole_body(server_module.build_server(context, http=True).streamable_http_app(
        host="127.0.0.1", transport_security=transport_security("127.0.0.1")))
    app = gitlab_auth_app(app, config, clock=clock, reader=context.reader)
    sock = listen("127.0.0.1", 0)
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=lambda: asyncio.run(uv.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", clock
    finally:
        uv.should_exit = True
        thread.join(timeout=30)
        resident.stop()


def ask(url: str, user: str, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[bool, Any, str]]:
    """(is_error, structured output, text) per call, over one Streamable HTTP session as `user`."""
    async def run() -> list[tuple[bool, Any, str]]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS[user]}"}, timeout=httpx2.Timeout(120))
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            out = []
            for name, args in calls:
                result = await client.call_tool(name, args)
                text = result.content[0].text if result.content else ""
                out.append((bool(result.is_error), result.structured_content, text))
            return out
    return asyncio.run(run())


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("search", {"query": TITLE, "mode": "lexical", "limit": 5}),
    ("search", {"query": "logged out deploy session", "mode": "hybrid", "limit": 5}),
    ("get_issue", {"project": "acme/platform", "iid": FLIPPED_IID}),
    ("related", {"ref": REF}),
    ("related", {"ref": f"acme/platform!{CLOSER}"}),
    ("get_merge_request", {"project": "acme/platform", "iid": CLOSER}),
    ("list_items", {"kind": "issue", "limit": 100}),
    ("index_status", {}),
    ("explain", {"ref": REF}),
    ("person", {"user": "janedoe"}),
]


def refs(value: Any) -> Iterator[str]:
    """Every string of the structured output (references, ids, titles)."""
    if isinstance(value, dict):
        for v in value.values():
            yield from refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from refs(v)
    elif isinstance(value, str | int):
        yield str(value)


def shows(answers: list[tuple[bool, Any, str]]) -> dict[str, bool]:
    """Per call, whether the answer shows the flipped issue: its title anywhere (but the query
    echoed), its reference or its document id as a value. (An MR's description saying
    "Closes #196" is text GitLab shows a Guest too.)"""
    seen = {}
    for (name, args), (error, out, text) in zip(CALLS, answers, strict=True):
        dump = text + json.dumps(out, default=str)
        if args.get("query") == TITLE:
            dump = dump.replace(TITLE, "", 2)  # the query, echoed in the text and the output
        values = set(refs(out))
        key = f"{name} {args.get('ref') or args.get('iid') or args.get('query') or args.get('kind') or ''}".strip()
        seen[key] = (not error) and (TITLE in dump or REF in values or f"#{FLIPPED_IID}" in values
                                     or f"issue:{FLIPPED_ID}" in values)
    return seen


def found(answer: tuple[bool, Any, str]) -> set[str]:
    return {r["document_id"] for r in answer[1]["results"]}


def documents(answers: list[tuple[bool, Any, str]]) -> int:
    [(_, status, _)] = [a for (name, _), a in zip(CALLS, answers, strict=True) if name == "index_status"]
    return sum(p["documents"] for p in status["projects"])


def test_a_confidential_flip_hides_the_issue_within_the_bound(server: tuple[str, Clock], gitlab: SandboxGitLab) -> None:
    url, clock = server
    before = {user: ask(url, user, CALLS) for user in TOKENS}
    for user in TOKENS:
        seen = shows(before[user])
        assert seen[f"search {TITLE}"] and seen[f"get_issue {FLIPPED_IID}"] and seen[f"related acme/platform!{CLOSER}"], \
            (user, seen)
    full = len(before["gus"][1][1]["results"])
    assert full == 5

    gitlab.reset_stats()
    gitlab.state.update_issue(PLATFORM, FLIPPED_IID, confidential=True)  # what GitLab's edit does (updated_at too)
    clock.now += BOUND - 1  # within the bound: the last check stands, GitLab is not asked
    still = ask(url, "gus", CALLS)
    assert shows(still)[f"get_issue {FLIPPED_IID}"]
    assert gitlab.stats()["by_route"].get("issues", 0) == 0

    clock.now += 1  # the bound: the next request checks first
    after = {user: ask(url, user, CALLS) for user in TOKENS}
    hidden = shows(after["gus"])
    assert not any(hidden.values()), hidden
    # One call per synced project, whatever the number of issues (none here needed a second page).
    assert gitlab.stats()["by_route"].get("issues", 0) == 2
    error, out, text = after["gus"][2]
    assert error and "confidential" not in text  # as GitLab: it does not exist for them (404)
    assert len(after["gus"][1][1]["results"]) == full  # top-k stays full
    # The title's words no longer find the MR whose text was built with it (until the sync rebuilds it).
    assert CLOSER_DOC in found(before["gus"][0]) and CLOSER_DOC not in found(after["gus"][0])
    assert CLOSER_DOC in found(after["rita"][0])
    assert documents(after["gus"]) < documents(before["gus"])  # its documents and the closing MR's left
    for user in ("janedoe", "rita"):  # its author and a Reporter still see it
        seen = shows(after[user])
        assert seen[f"search {TITLE}"] and seen[f"get_issue {FLIPPED_IID}"] and seen[f"related {REF}"], (user, seen)
        assert documents(after[user]) == documents(before[user])


def test_the_check_costs_a_call_per_project_whatever_the_issues(server: tuple[str, Clock],
                                                                 gitlab: SandboxGitLab) -> None:
    url, clock = server
    for n in range(120):  # more than a page of issues updated since the sync, none confidential
        gitlab.state.create(PLATFORM, "issues", {"title": f"Filler issue {n}"})
    gitlab.reset_stats()
    clock.now += BOUND
    ask(url, "gus", CALLS[:1])
    assert gitlab.stats()["by_route"].get("issues", 0) == 2


def platform_issues(url: str, user: str) -> int:
    [(error, out, text)] = ask(url, user, [("list_items", {"kind": "issue", "limit": 100})])
    assert not error, text
    return sum(1 for item in out["items"] if item["project"] == "acme/platform")


def test_a_project_gitlab_does_not_check_is_out_of_sight_below_planner(server: tuple[str, Clock], gitlab: SandboxGitLab,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Fail closed: while the check of acme/platform fails, a flip there cannot be seen, so its
    Guest does not see the project; its Reporter (who sees every confidential issue) still does.
    The next period asks again; one line is logged per failed check, without the token."""
    url, clock = server
    clock.now += BOUND
    assert platform_issues(url, "gus") > 0
    rita = platform_issues(url, "rita")
    gitlab.set_faults(f"503:path=^/api/v4/projects/{PLATFORM}/issues$")
    clock.now += BOUND
    with caplog.at_level("WARNING", logger="gitlab_knowledge.mcp.confidential_watch"):
        assert platform_issues(url, "gus") == 0
        assert platform_issues(url, "rita") == rita
    [line] = [r.getMessage() for r in caplog.records if r.name.endswith("confidential_watch")]
    assert "1 of 2 projects not checked" in line and "glpat" not in line and "\n" not in line
    gitlab.set_faults(None)
    assert platform_issues(url, "gus") == 0  # not asked again before the next period
    clock.now += BOUND
    assert platform_issues(url, "gus") > 0


def test_a_flag_the_sync_stored_before_the_documents_follow_hides_them_from_search(
        sample: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The sync writes an issue's new `confidential` flag; its documents (and the indexes built from
    them) say public until the documents layer runs. The Guest's search must not find them meanwhile
    (the index scope denies a hidden issue's documents not flagged confidential)."""
    import duckdb

    from gitlab_knowledge.mcp.asking import asking_as
    from gitlab_knowledge.mcp.tools import all_tools
    from gitlab_knowledge.viewer import GUEST as GUEST_LEVEL
    from gitlab_knowledge.viewer import NO_ACCESS, Viewer

    base = tmp_path_factory.mktemp("flag-before-documents")
    shutil.copytree(sample.config.data_dir, base / "data", ignore=shutil.ignore_patterns("*.sock"))
    config = parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": ["acme/platform", "acme/web-app"],
                           "storage": {"data_dir": str(base / "data")},
                           "mcp": {"include_confidential": True, "include_internal": True}}, base, {}, "test")
    with duckdb.connect(str(config.duckdb_path)) as con:  # what the sync's write did, and only that
        con.execute("UPDATE issues SET confidential = true WHERE id = ?", [FLIPPED_ID])
    search = {t.name: t for t in all_tools()}["search"]
    resident = Resident(config, local_socket=False)
    try:
        for mode in ("lexical", "semantic"):
            with asking_as(Viewer(921, "gus", access={PLATFORM: GUEST_LEVEL, WEB: NO_ACCESS})):
                _, out = asyncio.run(search.handler(resident.context, {"query": TITLE, "mode": mode, "limit": 5}))
            assert not {r["document_id"] for r in out["results"]} & {f"issue:{FLIPPED_ID}", CLOSER_DOC}, mode
            assert TITLE not in {r["title"] for r in out["results"]} and len(out["results"]) == 5, mode
    finally:
        resident.stop()

"""A shared server shows each user exactly what GitLab shows them: the oracle is GitLab itself.

`python -m gitlab_knowledge.mcp --http` with `[mcp] auth = "gitlab"` serves the sample store; the
sandbox GitLab the store was synced from knows three users with different memberships. For each
user, the official SDK client calls the item, search and related tools over Streamable HTTP with
the user's own token (more than 200 calls each), and every answer is checked against what the
sandbox's REST API answers that same token: no item, title or note text GitLab hides from them
appears, and every item GitLab shows them is there (found first by its exact title).

The server lets agents read confidential issues and internal notes (`include_confidential`,
`include_internal`), so GitLab's rules, applied by the viewer lens, are all that hides them."""

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
import pytest
import tomli_w
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab
from gitlab_knowledge_sandbox.users import GUEST, set_visibility
from gitlab_knowledge_tests.conftest import REPO, subprocess_env

PLATFORM, WEB = 101, 102
PATHS = {PLATFORM: "acme/platform", WEB: "acme/web-app"}
TOKENS = {"rita": "glpat-oracle-rita-0123", "gus": "glpat-oracle-gus-01234", "xena": "glpat-oracle-xena-0123"}
REPORTER = 20


@dataclass
class View:
    """What GitLab's REST API shows one token: items by reference, their titles and note texts."""

    items: dict[str, str] = field(default_factory=dict)  # reference → title
    notes: list[str] = field(default_factory=list)


def _pages(client: httpx.Client, path: str) -> list[Any]:
    out: list[Any] = []
    page: str | None = "1"
    while page:
        answer = client.get(path, params={"per_page": 100, "page": page})
        if answer.status_code in (403, 404):  # GitLab refuses it to this token: nothing of it is shown
            return []
        answer.raise_for_status()
        out += answer.json()
        page = answer.headers.get("x-next-page") or None
    return out


def gitlab_view(url: str, token: str) -> View:
    view = View()
    with httpx.Client(base_url=f"{url}/api/v4", headers={"PRIVATE-TOKEN": token}, timeout=30) as client:
        for pid, path in PATHS.items():
            for kind, sigil in (("issues", "#"), ("merge_requests", "!")):
                for item in _pages(client, f"/projects/{pid}/{kind}"):
                    view.items[f"{path}{sigil}{item['iid']}"] = item["title"]
                    view.notes += [n["body"] for n in _pages(client, f"/projects/{pid}/{kind}/{item['iid']}/notes")
                                   if not n.get("system")]
                    view.notes.append(item.get("description") or "")
            # A release's notes as written: they name merge requests by title, and GitLab shows
            # them to every reader of the project, Guests of a private one included.
            view.notes += [r.get("description") or "" for r in _pages(client, f"/projects/{pid}/releases")]
    return view


@pytest.fixture(scope="module")
def gitlab() -> Iterator[SandboxGitLab]:
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        users = sb.state.users
        users.add_user("rita", TOKENS["rita"], user_id=911)
        users.set_member(PLATFORM, 911, REPORTER)  # sees platform's confidential issues and internal notes
        users.add_user("gus", TOKENS["gus"], user_id=912)
        users.set_member(PLATFORM, 912, GUEST)  # platform, not its confidential issues, internal notes or MRs
        users.add_user("xena", TOKENS["xena"], user_id=913, external=True)  # public projects only
        set_visibility(sb.state, PLATFORM, "private")
        set_visibility(sb.state, WEB, "public")
        yield sb


@pytest.fixture(scope="module")
def server(sample: Any, gitlab: SandboxGitLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("oracle")
    shutil.copytree(sample.config.data_dir, base / "data", ignore=shutil.ignore_patterns("*.sock"))
    config = base / "gitlab_knowledge.toml"
    config.write_text(tomli_w.dumps({
        "projects": list(PATHS.values()), "storage": {"data_dir": str(base / "data")},
        "gitlab": {"url": gitlab.url, "rate_limit": 0, "max_retries": 1, "timeout": 10},
        "mcp": {"auth": "gitlab", "include_confidential": True, "include_internal": True}}))
    proc = subprocess.Popen([sys.executable, "-m", "gitlab_knowledge.mcp", "--config", str(config), "--http",
                             "--port", "0"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=REPO,
                            env=subprocess_env())
    try:
        line = proc.stderr.readline() if proc.stderr else ""
        match = re.search(r"(http://\S+/mcp)", line)
        assert match, line
        yield match.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()


def calls_for(everything: View) -> list[tuple[str, dict[str, Any]]]:
    """Every item of the sample by its get_ tool and a search by its exact title; every third's links."""
    calls: list[tuple[str, dict[str, Any]]] = [("index_status", {})]
    for n, ref in enumerate(sorted(everything.items)):
        path, sigil, iid = re.fullmatch(r"(.+)([#!])(\d+)", ref).groups()  # type: ignore[union-attr]
        tool = "get_issue" if sigil == "#" else "get_merge_request"
        calls += [(tool, {"project": path, "iid": int(iid)}),
                  ("search", {"query": everything.items[ref], "mode": "lexical", "limit": 5})]
        if n % 3 == 0:
            calls.append(("related", {"ref": ref}))
    return calls


async def ask(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[bool, Any, str]]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(120))
    answers = []
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        for name, args in calls:
            result = await client.call_tool(name, args)
            text = " ".join(getattr(c, "text", "") for c in result.content)
            answers.append((bool(result.is_error), result.structured_content, text))
    return answers


def references(value: Any) -> Iterator[str]:
    """Every item reference in an answer, made whole with its record's project where it is short."""
    if isinstance(value, dict):
        ref = value.get("reference")
        if isinstance(ref, str):
            if ref[:1] in "#!" and isinstance(value.get("project"), str):
                ref = value["project"] + ref
            if ref[:1] not in "#!":
                yield ref
        for inner in value.values():
            yield from references(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from references(inner)


@pytest.mark.parametrize("user", sorted(TOKENS))
def test_every_answer_is_what_gitlab_shows_that_user(server: str, gitlab: SandboxGitLab, user: str) -> None:
    everything = gitlab_view(gitlab.url, DEFAULT_TOKEN)
    theirs = gitlab_view(gitlab.url, TOKENS[user])
    hidden = set(everything.items) - set(theirs.items)
    assert hidden and theirs.items  # each user sees some of the store, and not all of it
    platform_mrs = {r for r in everything.items if r.startswith(PATHS[PLATFORM] + "!")}
    # GitLab hides a private project's merge requests from its Guest, not from a Reporter.
    assert platform_mrs and (platform_mrs <= hidden if user != "rita" else not platform_mrs & hidden)
    calls = calls_for(everything)
    assert len(calls) > 200
    answers = asyncio.run(ask(server, TOKENS[user], calls))

    shown_text = " ".join(list(theirs.items.values()) + theirs.notes)
    forbidden = {everything.items[r] for r in hidden} | {n.strip()[:60] for n in everything.notes}
    forbidden = {t for t in forbidden if len(t) >= 12 and t not in shown_text}
    titles = list(everything.items.values())
    for (name, args), (error, out, text) in zip(calls, answers, strict=True):
        # The answer's echo of the query is the user's own words, not something the store showed.
        said = {k: v for k, v in (out or {}).items() if k != "query"}
        blob = json.dumps(said) + (text.replace(args["query"], "") if name == "search" else text)
        leaked = [t for t in forbidden if t in blob]
        assert not leaked, (user, name, args, leaked[:3])
        synced = [r for r in references(out) if r.split("#")[0].split("!")[0] in PATHS.values()]
        assert set(synced) <= set(theirs.items), (user, name, args, set(synced) - set(theirs.items))
        ref = args.get("ref") or (f"{args['project']}{'#' if name == 'get_issue' else '!'}{args['iid']}"
                                  if "iid" in args else None)
        if name in ("get_issue", "get_merge_request", "related"):
            assert error == (ref not in theirs.items), (user, name, args, text[:200])
        if name == "search" and not error:
            query = args["query"]
            mine = [r for r, t in theirs.items.items() if t == query]
            if mine and titles.count(query) == 1:
                first = next(references(out["results"][:1]), None)
                assert first == mine[0], (user, query, first)

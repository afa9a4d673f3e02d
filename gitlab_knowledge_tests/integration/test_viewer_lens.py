"""A shared server's users each see what GitLab lets them see, under every tool (store/viewer_lens.py,
the retrievers' scope, mcp/context.py).

Every MCP tool is called in-process as several viewers (a reporter of one project, a guest of one
project who also reads a public one, an admin, a user who reads nothing) on a copy of the synced
sample, and every answer is checked against an oracle computed here from the store's own rows
with GitLab's rules, written out independently of the lens's SQL: no id, title or note text of
something outside the view appears, everything inside it can be found (a search for an item's
exact title finds it first; `list_items` lists exactly the visible items), and a search's top-k
stays full under the lens.
"""

import asyncio
import dataclasses
import http.server
import json
import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gitlab_knowledge import kinds
from gitlab_knowledge.config import parse_config
from gitlab_knowledge.errors import KnowledgeError
from gitlab_knowledge.mcp.asking import asking_as
from gitlab_knowledge.mcp.context import LIVE_REFUSAL
from gitlab_knowledge.mcp.resident import Resident
from gitlab_knowledge.mcp.tools import all_tools
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.search.lexical_retriever import search_lexical
from gitlab_knowledge.search.semantic import MemoryVectors, search_vectors
from gitlab_knowledge.store.db import read_connection
from gitlab_knowledge.viewer import GUEST, NO_ACCESS, PLANNER, REPORTER, Viewer
from gitlab_knowledge.workspace import Workspace

PLATFORM, WEB_APP = 101, 102  # the sample's projects: acme/platform, acme/web-app
VIEWERS = {
    "reporter_of_platform": Viewer(11, "reporter.a", access={PLATFORM: REPORTER}),
    # A guest of acme/platform reading the public acme/web-app; assignee of one confidential issue.
    "guest": Viewer(12, "johndoe", access={PLATFORM: GUEST, WEB_APP: NO_ACCESS},
                    visibility={PLATFORM: "internal", WEB_APP: "public"}),
    # The same guest when acme/platform is private: its merge requests, and everything of them, go.
    "guest_of_private": Viewer(16, "johndoe", access={PLATFORM: GUEST, WEB_APP: NO_ACCESS},
                               visibility={PLATFORM: "private", WEB_APP: "public"}),
    "admin": Viewer(13, "root", is_admin=True),
    "stranger": Viewer(14, "nobody.at.all"),
}
TOOLS = {t.name: t for t in all_tools()}


@dataclass
class Store:
    """The sample's rows, read without any lens."""

    projects: dict[int, str]
    items: dict[tuple[str, int], dict[str, Any]]  # (kind, id) → row with kind, project_id, iid, title, ...
    notes: dict[int, dict[str, Any]]  # user and system notes: discussion_id, body, internal, parent
    docs: dict[str, tuple[str, int, str | None]]  # id → (parent kind, parent id, thread id or None)
    files: list[str]
    keyed: dict[tuple[str, int], int]  # (keyed kind: wiki page, release; row id) → project id
    keyed_text: dict[tuple[str, int], str] = field(default_factory=dict)  # a release's notes, a page's content

    def ref(self, key: tuple[str, int]) -> str:
        item = self.items[key]
        return kinds.kind(key[0]).ref(item["iid"], self.projects[item["project_id"]])


@dataclass
class View:
    """What GitLab shows one viewer, by the oracle."""

    items: set[tuple[str, int]] = field(default_factory=set)
    notes: set[int] = field(default_factory=set)
    docs: set[str] = field(default_factory=set)
    projects: set[str] = field(default_factory=set)
    hidden_refs: set[str] = field(default_factory=set)
    forbidden: set[str] = field(default_factory=set)  # titles and note texts of hidden things


def read_store(config: Any) -> Store:
    with read_connection(config.duckdb_path, 5) as con:
        projects = dict(con.execute("SELECT id, path_with_namespace FROM projects").fetchall())
        items = {}
        for kind in kinds.ITEM_KINDS:
            confidential = "coalesce(confidential, false)" if kind is kinds.ISSUE else "false"
            for row in con.execute(f"SELECT id, project_id, iid, title, description, author_username, "
                                   f"coalesce(assignees, []), {confidential} FROM {kind.table}").fetchall():
                items[(kind.name, row[0])] = {"project_id": row[1], "iid": row[2], "title": row[3] or "",
                                              "description": row[4] or "", "author": row[5], "assignees": row[6],
                                              "confidential": row[7]}
        notes = {}
        for table, system in (("notes", False), ("system_notes", True)):
            for nid, thread, pid, ntype, parent, body, internal in con.execute(
                    f"SELECT id, discussion_id, project_id, noteable_type, noteable_id, body, "
                    f"coalesce(internal, false) FROM {table}").fetchall():
                notes[nid] = {"thread": thread, "project_id": pid, "parent": (kinds.by_noteable_type(ntype).name, parent),
                              "body": body or "", "internal": internal, "system": system}
        docs = {d: (pt, pid, src if st == kinds.DISCUSSION else None) for d, pt, pid, st, src in con.execute(
            "SELECT id, parent_type, parent_id, source_type, source_id FROM documents").fetchall()}
        files = sorted({r[0] for r in con.execute("SELECT new_path FROM mr_files WHERE new_path IS NOT NULL").fetchall()})
        keyed, keyed_text = {}, {}
        for kind in kinds.KEYED_KINDS:
            for rid, pid, text in con.execute(f"SELECT id, project_id, {kind.text_column} FROM {kind.table}").fetchall():
                keyed[(kind.name, rid)], keyed_text[(kind.name, rid)] = pid, text or ""
    return Store(projects, items, notes, docs, files, keyed, keyed_text)


def view_of(store: Store, viewer: Viewer) -> View:
    """GitLab's rules, from the rows: a project is read by its members at any level, by anyone when
    public, by non-external users when internal (the access map holds all three) and by admins; a
    confidential issue by its author, assignees, Planner+ members and admins; an internal note
    (and so its whole thread) by Planner+ members and admins only; a private project's merge
    requests by Planner+ members and admins only (a Guest reads an internal or public project's),
    and with them every system note that names one ("mentioned in merge request !12")."""
    def reads(pid: int) -> bool:
        return viewer.is_admin or pid in viewer.access

    def trusted(pid: int) -> bool:
        return viewer.is_admin or viewer.access.get(pid, -1) >= PLANNER

    def sees_mrs(pid: int) -> bool:
        level = viewer.access.get(pid, -1)
        return viewer.is_admin or level == NO_ACCESS or level >= PLANNER or \
            viewer.visibility.get(pid) == "public" or (viewer.visibility.get(pid) == "internal" and not viewer.external)

    out = View(projects={path for pid, path in store.projects.items() if reads(pid)})
    for key, item in store.items.items():
        pid = item["project_id"]
        if key[0] == kinds.MERGE_REQUEST.name and not sees_mrs(pid):
            out.hidden_refs.add(store.ref(key))
        elif reads(pid) and (not item["confidential"] or trusted(pid) or item["author"] == viewer.username
                           or viewer.username in item["assignees"]):
            out.items.add(key)
        else:
            out.hidden_refs.add(store.ref(key))
    internal_threads = {n["thread"] for n in store.notes.values() if n["internal"] and not trusted(n["project_id"])}
    paths = {path: pid for pid, path in store.projects.items()}

    def names_hidden_mr(note: dict[str, Any]) -> bool:
        """A system note naming a merge request the viewer does not see."""
        return note["system"] and any(
            (paths.get(path) if path else note["project_id"]) in store.projects and
            not sees_mrs(paths.get(path) if path else note["project_id"])
            for path, _iid in re.findall(r"((?:[\w.-]+/)+[\w.-]+)?!(\d+)", note["body"]))

    out.notes = {nid for nid, n in store.notes.items() if n["parent"] in out.items and n["thread"] not in internal_threads
                 and not names_hidden_mr(n)}
    out.docs = {d for d, (pt, pid, thread) in store.docs.items()
                if (pt, pid) in out.items and (thread is None or thread not in internal_threads)}
    # A wiki page's or a release's documents: whoever reads the project (neither is confidential).
    out.docs |= {d for d, (pt, pid, _thread) in store.docs.items()
                 if (pt, pid) in store.keyed and reads(store.keyed[(pt, pid)])}
    seen = " ".join([store.items[k]["title"] for k in out.items] + [store.items[k]["description"] for k in out.items]
                    + [store.notes[n]["body"] for n in out.notes]
                    # A release's notes as written (they may name a hidden MR's title: GitLab shows them).
                    + [t for k, t in store.keyed_text.items() if reads(store.keyed[k])])
    hidden_text = [store.items[k]["title"] for k in store.items if k not in out.items] + \
        [n["body"].strip()[:60] for nid, n in store.notes.items() if nid not in out.notes]
    out.forbidden = {t for t in hidden_text if len(t) >= 12 and t not in seen}
    return out


@pytest.fixture(scope="module")
def served(sample: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A server context over a copy of the sample that lets agents read confidential issues and
    internal notes, so that GitLab's rules are what hides them."""
    base = tmp_path_factory.mktemp("viewer-lens")
    shutil.copytree(sample.config.data_dir, base / "data", ignore=shutil.ignore_patterns("*.sock"))
    doc = {"gitlab": {"url": "http://127.0.0.1:9"}, "projects": ["acme/platform", "acme/web-app"],
           "storage": {"data_dir": str(base / "data")},
           "mcp": {"include_confidential": True, "include_internal": True}}
    config = parse_config(doc, base, {}, "test")
    resident = Resident(config, local_socket=False)
    yield resident, read_store(config)
    resident.stop()


def call(resident: Resident, viewer: Viewer | None, name: str, args: dict[str, Any]) -> tuple[Any, str]:
    """(structured output or None on a tool error, the text or the error's line)."""
    with asking_as(viewer):
        try:
            text, out = asyncio.run(TOOLS[name].handler(resident.context, args))
        except KnowledgeError as exc:
            return None, str(exc)
    return out, text


def walk(value: Any, key: str | None = None) -> Any:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from walk(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v, key)
    else:
        yield key, value


def check(view: View, store: Store, out: Any, text: str, what: str, asked: str = "") -> None:
    """Nothing outside the view in one answer: no hidden title or note text anywhere (but the
    query it echoes), no hidden item's reference, document id or note id in the structured output."""
    dump = (text + json.dumps(out, default=str, ensure_ascii=False)).replace(asked, "") if asked else \
        text + json.dumps(out, default=str, ensure_ascii=False)
    leaked = [t for t in view.forbidden if t in dump]
    assert not leaked, f"{what}: {leaked[:3]}"
    for key, value in walk(out):
        if key == "reference":
            assert value not in view.hidden_refs, f"{what}: {value}"
        elif key in ("doc_id", "document_id", "related_documents"):
            assert value in view.docs, f"{what}: {value}"
        elif key == "note_id" or (key == "id" and isinstance(value, int) and value in store.notes):
            assert value in view.notes, f"{what}: note {value}"


def chosen(store: Store) -> list[tuple[str, int]]:
    """The items the tools are asked about: every confidential issue and a ninth of the rest, from
    both projects and both kinds (the whole sample would take minutes on a loaded machine)."""
    keys = sorted(store.items)
    return sorted({k for k in keys if store.items[k]["confidential"]} | set(keys[::9]))


def calls_for(store: Store) -> list[tuple[str, dict[str, Any]]]:
    """Every tool, with arguments naming visible and hidden things alike."""
    calls: list[tuple[str, dict[str, Any]]] = [("index_status", {}), ("me", {}), ("me", {"user": "sam.okafor"})]
    for n, key in enumerate(chosen(store)):
        item = store.items[key]
        kind, project = kinds.kind(key[0]), store.projects[item["project_id"]]
        ref = store.ref(key)
        calls += [(f"get_{kind.name}", {"iid": item["iid"], "project": project}),
                  ("related", {"ref": ref}), ("explain", {"ref": ref}),
                  ("search", {"query": item["title"], "mode": "lexical"})]
        if kind is kinds.MERGE_REQUEST:
            calls.append(("gitlab_get_mr_comments", {"project": project, "mr": item["iid"], "includeSystem": True}))
        if n % 3 == 0 or item["confidential"]:
            calls += [("similar", {"ref": ref, "mode": "lexical"})]
    calls += [("file_history", {"path": path}) for path in store.files[::100]]
    calls += [("person", {"user": user}) for user in sorted({i["author"] for i in store.items.values() if i["author"]})[:5]]
    calls += [("list_items", {"kind": k.name, "limit": 100}) for k in kinds.ITEM_KINDS]
    calls += [("search", {"query": word, "limit": 10}) for word in ("deploy", "token", "security", "login error")]
    return calls


def key_of(store: Store, kind: str, project: str, iid: int) -> tuple[str, int]:
    return next(k for k, i in store.items.items()
                if k[0] == kind and i["iid"] == iid and store.projects[i["project_id"]] == project)


@pytest.mark.parametrize("name", list(VIEWERS))
def test_every_tool_shows_what_gitlab_shows_the_viewer(served: Any, name: str) -> None:
    resident, store = served
    viewer = VIEWERS[name]
    view = view_of(store, viewer)
    assert view.forbidden or name == "admin"  # something to hide, else the check proves nothing
    answered = 0
    for tool, args in calls_for(store):
        out, text = call(resident, viewer, tool, args)
        what = f"{name} {tool} {args}"
        if tool.startswith("get_"):
            # Nothing hidden, nothing lost: a visible item answers, a hidden one does not exist
            # (and nothing says why: GitLab answers 404).
            visible = key_of(store, tool[4:], args["project"], args["iid"]) in view.items
            assert (out is not None) == visible and "confidential" not in (text if out is None else ""), what
        if out is None:
            assert not any(t in text for t in view.forbidden), what
            continue
        answered += 1
        check(view, store, out, text, what, str(args.get("query") or ""))
    listed = set()
    for kind in kinds.ITEM_KINDS:
        out, _ = call(resident, viewer, "list_items", {"kind": kind.name, "limit": 100})
        listed |= {key_of(store, kind.name, r["project"], r["iid"]) for r in out["items"]}
    assert listed == view.items
    status, _ = call(resident, viewer, "index_status", {})
    assert {p["project"] for p in status["projects"]} == view.projects
    assert sum(p["documents"] for p in status["projects"]) == len(view.docs)
    assert answered > 30 or name == "stranger"


@pytest.mark.parametrize("name", ["reporter_of_platform", "guest"])
def test_an_exact_title_finds_the_visible_item_first(served: Any, name: str) -> None:
    """No over-filtering: every item the viewer may read is found first by its exact title."""
    resident, store = served
    view = view_of(store, VIEWERS[name])
    titles = [store.items[k]["title"] for k in store.items]
    unique = [k for k in sorted(view.items) if titles.count(store.items[k]["title"]) == 1]
    assert len(unique) > 20
    for key in unique[::3]:
        title = store.items[key]["title"]
        out, text = call(resident, VIEWERS[name], "search", {"query": title, "mode": "lexical"})
        assert out is not None and out["results"], f"{title}: {text}"
        first = out["results"][0]
        assert first["title"] == title and first["document_id"] == f"{key[0]}:{key[1]}", f"{name} {title}"


# A reporter of one project and a guest of the other: every project read, one of them guarded.
MIXED = Viewer(15, "mixed", access={PLATFORM: REPORTER, WEB_APP: GUEST})


@pytest.mark.parametrize("viewer", [VIEWERS["guest"], VIEWERS["reporter_of_platform"], MIXED,
                                    VIEWERS["guest_of_private"]],
                         ids=["all guarded", "one project", "one guarded", "merge requests hidden"])
def test_top_k_stays_full_and_every_retriever_agrees(served: Any, viewer: Viewer) -> None:
    """The scope is applied inside the retrievers before their cut: a viewer's top-k is the
    unrestricted ranking with the hidden documents taken out (not fewer results), in BM25 and in
    both vector paths (LanceDB's where-clause, the in-memory mask)."""
    resident, store = served
    view = view_of(store, viewer)
    context = resident.context
    with asking_as(viewer):
        scoped = context.filters()
    assert scoped.scope is not None
    workspace = Workspace(context.config)
    cold = workspace.searcher()
    index, provider = cold.lexical(), cold.provider()
    assert index is not None
    vectors = workspace.vectors(provider.provider, provider.model)
    memory = MemoryVectors(vectors)
    # The hidden issues' (and merge requests') own titles: their documents rank first when nothing hides them.
    queries = [store.items[k]["title"] for k in store.items if store.items[k]["confidential"] and k not in view.items]
    queries += [store.items[k]["title"] for k in sorted(store.items)
                if k[0] == kinds.MERGE_REQUEST.name and k not in view.items
                and store.items[k]["project_id"] in viewer.access][::6]  # hidden in a project they read
    assert queries
    for query in queries:
        ranked = [h.doc_id for h in search_lexical(index, query, Filters(), 1000)]
        expected = [d for d in ranked if d in view.docs]
        assert ranked[0] not in view.docs and len(expected) >= 10
        assert [h.doc_id for h in search_lexical(index, query, scoped, 10)] == expected[:10]
        vector = provider.embed_query(query)
        for retrieve in (search_vectors, lambda _store, v, f, n: memory.search(v, f, n)):
            ranked = [h.doc_id for h in retrieve(vectors, vector, Filters(), 1000)]
            expected = [d for d in ranked if d in view.docs]
            assert [h.doc_id for h in retrieve(vectors, vector, scoped, 10)] == expected[:10]
        shown = cold.search(query, scoped, "hybrid", 10, floor=False)
        assert len(shown.results) == 10 and {r.doc_id for r in shown.results} <= view.docs


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A GitLab that records the credentials each request carried and lists nothing."""

    seen: list[tuple[str | None, str | None]] = []

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        type(self).seen.append((self.headers.get("Authorization"), self.headers.get("PRIVATE-TOKEN")))
        body = b"[]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        pass


def _live_calls(resident: Resident, store: Any, token: str | None) -> list[tuple[Any, str]]:
    mr = next(i for k, i in sorted(store.items.items()) if k[0] == kinds.MERGE_REQUEST.name)
    out = []
    for tool, args in (("gitlab_get_mr_comments", {"project": store.projects[mr["project_id"]], "mr": mr["iid"],
                                                   "live": True}),
                       ("explain", {"ref": kinds.MERGE_REQUEST.ref(mr["iid"], store.projects[mr["project_id"]]),
                                    "live": True})):
        with asking_as(VIEWERS["admin"], token):
            try:
                out.append(asyncio.run(TOOLS[tool].handler(resident.context, args))[::-1])
            except KnowledgeError as exc:
                out.append((None, str(exc)))
    return out


def test_a_viewer_never_calls_gitlab_with_the_syncs_token(served: Any) -> None:
    """Without the viewer's own token a live call is refused; with it, GitLab is asked with that
    token (as Bearer) and never with the sync's."""
    resident, store = served
    assert all(out is None and text == LIVE_REFUSAL for out, text in _live_calls(resident, store, None))

    _Recorder.seen = []
    gitlab = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=gitlab.serve_forever, daemon=True).start()
    at = f"http://127.0.0.1:{gitlab.server_address[1]}"
    config = resident.context.config
    context = dataclasses.replace(resident.context, config=dataclasses.replace(
        config, gitlab=dataclasses.replace(config.gitlab, url=at)))
    real, resident.context = resident.context, context
    try:
        answers = _live_calls(resident, store, "glpat-viewer-own-token")
    finally:
        resident.context = real
        gitlab.shutdown()
        gitlab.server_close()
    assert all(text != LIVE_REFUSAL for _out, text in answers)
    assert _Recorder.seen and set(_Recorder.seen) == {("Bearer glpat-viewer-own-token", None)}


def test_file_history_leaves_out_the_merge_requests_a_guest_does_not_see(served: Any) -> None:
    """The MRs a private project's Guest does not see are not in `file_history`, neither by their
    file lists nor by their review notes on the path, nor in its count; the same Guest of an
    internal project, and an admin, get them all."""
    resident, store = served
    with read_connection(resident.context.config.duckdb_path, 5) as con:
        # Paths a platform MR's file list names, and paths only its review notes are on.
        listed = {r[0] for r in con.execute(
            f"SELECT f.new_path FROM mr_files f JOIN merge_requests m ON m.id = f.merge_request_id "
            f"WHERE m.project_id = {PLATFORM} AND f.new_path IS NOT NULL").fetchall()}
        noted = {r[0] for r in con.execute(
            f"SELECT np.new_path FROM note_positions np JOIN notes n ON n.id = np.note_id "
            f"WHERE n.noteable_type = 'MergeRequest' AND n.project_id = {PLATFORM} AND np.new_path IS NOT NULL").fetchall()}
    paths = sorted(listed)[:3] + sorted(noted - listed)[:2] + sorted(noted & listed)[:2]
    assert noted and paths
    seen_hidden = 0
    for path in paths:
        args = {"path": path, "limit": 50}
        every, _ = call(resident, VIEWERS["admin"], "file_history", args)
        assert every["total"] == len(every["merge_requests"]), path  # all of them listed: the sets compare
        platform = {m["reference"] for m in every["merge_requests"] if m["reference"].startswith("acme/platform!")}
        seen_hidden += len(platform)
        for name, hidden in (("guest_of_private", platform), ("guest", set())):
            out, _ = call(resident, VIEWERS[name], "file_history", args)
            shown = {m["reference"] for m in out["merge_requests"]}
            assert shown == {m["reference"] for m in every["merge_requests"]} - hidden, (name, path)
            assert out["total"] == len(shown), (name, path)
    assert seen_hidden  # something to hide, else the check proves nothing


def test_the_configs_opt_outs_still_apply_to_a_viewer(sample: Any) -> None:
    """A reporter sees confidential issues as GitLab allows, unless the operator keeps them from
    every agent (`[mcp] include_confidential = false`, the default)."""
    resident = Resident(sample.config, local_socket=False)
    try:
        out, text = call(resident, VIEWERS["reporter_of_platform"], "get_issue", {"iid": 215, "project": "acme/platform"})
        assert out is None and "confidential" not in text
        opted = Resident(parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": ["acme/platform"],
                                       "storage": {"data_dir": str(sample.config.data_dir)},
                                       "mcp": {"include_confidential": True}}, Path("."), {}, "test"),
                         local_socket=False)
        try:
            out, _ = call(opted, VIEWERS["reporter_of_platform"], "get_issue", {"iid": 215, "project": "acme/platform"})
            assert out is not None and out["confidential"]
            out, text = call(opted, VIEWERS["guest"], "get_issue", {"iid": 215, "project": "acme/platform"})
            assert out is None and "confidential" not in text
        finally:
            opted.stop()
    finally:
        resident.stop()


def test_a_reader_keeps_a_bounded_number_of_viewers_lenses(sample: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One lens per viewer is built once per store version; beyond MAX_LENSES the least recently
    used idle one is dropped, and built again when its viewer comes back."""
    from gitlab_knowledge.store import reader as reader_module
    from gitlab_knowledge.store.viewer_lens import viewer_lens

    monkeypatch.setattr(reader_module, "MAX_LENSES", 2)
    reader = reader_module.StoreReader(sample.config.duckdb_path)
    workspace = Workspace(sample.config)
    lenses = [viewer_lens(Viewer(n, f"user{n}", access={PLATFORM: GUEST}, visibility={PLATFORM: "internal"}), "http://x",
                          include_confidential=True,
                          include_internal=True) for n in range(3)]
    try:
        counts = []
        for lens in (*lenses, lenses[0]):
            with workspace.with_(lens=lens, reader=reader).read() as con:
                counts.append(con.execute("SELECT count(*) FROM merge_requests").fetchone()[0])
                schemas = {r[0] for r in con.execute("SELECT schema_name FROM duckdb_schemas() "
                                                     "WHERE schema_name LIKE 'gk_viewer_%'").fetchall()}
                assert lens.schema in schemas and len(schemas) <= 2
        assert len(set(counts)) == 1 and counts[0] > 0
    finally:
        reader.close()


def test_the_view_follows_the_store(sample: Any, tmp_path: Path) -> None:
    """What a sync writes reaches a viewer's next call (the lens and the index scope are rebuilt
    when the store's files change): an issue assigned to them becomes theirs to read, one made
    confidential leaves them."""
    from gitlab_knowledge.store.db import write_connection

    shutil.copytree(sample.config.data_dir, tmp_path / "data", ignore=shutil.ignore_patterns("*.sock"))
    config = parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": ["acme/platform", "acme/web-app"],
                           "storage": {"data_dir": str(tmp_path / "data")},
                           "mcp": {"include_confidential": True, "include_internal": True}}, tmp_path, {}, "test")
    resident = Resident(config, local_socket=False)
    guest = VIEWERS["guest"]
    with read_connection(config.duckdb_path, 5) as con:  # an issue that is not the guest's own
        other = con.execute("SELECT min(iid) FROM issues WHERE project_id = ? AND NOT coalesce(confidential, false) "
                            "AND author_username <> 'johndoe' AND NOT list_contains(assignees, 'johndoe')",
                            [PLATFORM]).fetchone()[0]
    try:
        before, _ = call(resident, guest, "get_issue", {"iid": 215, "project": "acme/platform"})
        with asking_as(guest):
            allowed = resident.context.filters().scope.allowed  # type: ignore[union-attr]
        shown, _ = call(resident, guest, "get_issue", {"iid": other, "project": "acme/platform"})
        assert before is None and shown is not None
        with write_connection(config.duckdb_path, 5) as con:
            con.execute("UPDATE issues SET assignees = list_append(assignees, 'johndoe') WHERE iid = 215 "
                        "AND project_id = ?", [PLATFORM])
            con.execute("UPDATE issues SET confidential = true WHERE iid = ? AND project_id = ?", [other, PLATFORM])
        after, _ = call(resident, guest, "get_issue", {"iid": 215, "project": "acme/platform"})
        gone, text = call(resident, guest, "get_issue", {"iid": other, "project": "acme/platform"})
        with asking_as(guest):
            grown = resident.context.filters().scope.allowed  # type: ignore[union-attr]
        assert after is not None and after["confidential"] and gone is None and "confidential" not in text
        assert len(grown) > len(allowed)
    finally:
        resident.stop()

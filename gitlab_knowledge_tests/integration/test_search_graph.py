"""Search with the knowledge graph: `--path` and `--participant` pushed into both retrievers as
sets of document ids, and a referenced item's closing links pinned right after it.

The graph rows are written here (the synced sample's `mr_files` and `item_references` replaced by
known ones), so each expectation follows from rows the test can see; the last test reads the
graph the pipeline itself builds from the sample."""

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest

from gitlab_knowledge.config import Config, parse_config
from gitlab_knowledge.errors import StoreBusyError
from gitlab_knowledge.search import pinned
from gitlab_knowledge.search.engine import Searcher
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.search.graph_filters import resolve
from gitlab_knowledge.search.output import render_human, response_json
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import REPO, forked, subprocess_env
from gitlab_knowledge_tests.helpers import rows

SCHEMA = json.loads((REPO / "gitlab_knowledge" / "search" / "schema.json").read_text())
MODES = ("lexical", "semantic", "hybrid")
PLATFORM = "acme/platform"
# (MR iid, old path, new path): !853 renamed a file out of services/auth; !851 touched a sibling
# whose name starts like the directory.
FILES = [(847, "services/auth/jwt.py", "services/auth/jwt.py"), (847, None, "services/auth/keys.py"),
         (853, "services/auth/refresh.py", "services/identity/refresh.py"), (851, "services/authz.py",
                                                                              "services/authz.py")]


@dataclass
class GraphStore:
    config: Config
    config_path: Path
    docs: set[str]  # every document id
    mr: dict[int, str]  # acme/platform MR iid → its document id
    issue: dict[int, str]  # acme/platform issue iid → its document id
    closed_issue: int  # an issue (not #234) that the sample says !853 closed

    def searcher(self) -> Searcher:
        return Workspace(self.config).searcher()


def _config(data_dir: Path, **search: int) -> Config:
    return parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": [PLATFORM, "acme/web-app"],
                         "storage": {"data_dir": str(data_dir)}, "sync": {"lock_wait_seconds": 0.3},
                         **({"search": search} if search else {})}, data_dir, {}, "test")


@pytest.fixture(scope="module")
def graph(sample, tmp_path_factory) -> GraphStore:
    base = tmp_path_factory.mktemp("graph-store")
    shutil.copytree(sample.config.data_dir, base / "data")
    # Candidates above the sample's 254 documents: a filtered semantic search returns every match.
    config = _config(base / "data", candidates=500)
    with Workspace(config).write() as con:
        ids = dict(con.execute("SELECT m.iid, m.id FROM merge_requests m JOIN projects p ON p.id = m.project_id "
                               "WHERE p.path_with_namespace = ?", [PLATFORM]).fetchall())
        issues = dict(con.execute("SELECT i.iid, i.id FROM issues i JOIN projects p ON p.id = i.project_id "
                                  "WHERE p.path_with_namespace = ?", [PLATFORM]).fetchall())
        project = con.execute("SELECT id FROM projects WHERE path_with_namespace = ?", [PLATFORM]).fetchone()[0]
        con.execute("DELETE FROM mr_files")
        con.execute("DELETE FROM item_references")
        for position, (iid, old, new) in enumerate(FILES):
            con.execute("INSERT INTO mr_files VALUES (?, ?, ?, ?, ?, ?, ?, false, NULL)",
                        [ids[iid], project, position, old, new, old is None, old not in (None, new)])
        closed = min(iid for iid in issues if iid != 234)

        def link(source_type: str, source_id: int, kind: str, target_type: str, target_iid: int,
                 target_project: int | None = project) -> None:
            con.execute("INSERT INTO item_references VALUES (?, ?, ?, NULL, 'description', ?, ?, ?, ?, ?, false, ?)",
                        [project, source_type, source_id, kind, target_type, PLATFORM, target_iid, target_project,
                         f"{kind} {target_iid}"])

        link("merge_request", ids[847], "closes", "issue", 234)  # written in the MR: "Closes #234"
        link("issue", issues[closed], "closed_by", "merge_request", 853)  # the issue's system note
        link("merge_request", ids[812], "mentions", "issue", 234)  # a mention is no closing link
        link("merge_request", ids[851], "closes", "issue", 234, target_project=None)  # a project not synced
    path = base / "gitlab_knowledge.toml"
    path.write_text(f'projects = ["{PLATFORM}", "acme/web-app"]\n[gitlab]\nurl = "http://127.0.0.1:9"\n'
                    f'[storage]\ndata_dir = "{base / "data"}"\n[search]\ncandidates = 500\n')
    docs = {r[0] for r in rows(config, "SELECT id FROM documents")}
    return GraphStore(config, path, docs, {iid: f"merge_request:{i}" for iid, i in ids.items()},
                      {iid: f"issue:{i}" for iid, i in issues.items()}, closed)


def _under(path: str | None, wanted: str) -> bool:
    return path is not None and (path == wanted or path.startswith(wanted + "/"))


def _path_oracle(store: GraphStore, wanted: str) -> set[str]:
    """What --path must match, worked out in Python from the rows themselves."""
    mrs = {store.mr[iid] for iid, old, new in FILES if _under(old, wanted) or _under(new, wanted)}
    threads = {f"discussion:{d}" for d, old, new in rows(
        store.config, "SELECT n.discussion_id, p.old_path, p.new_path FROM note_positions p "
                      "JOIN notes n ON n.id = p.note_id") if _under(old, wanted) or _under(new, wanted)}
    return (mrs | threads) & store.docs


def _participant_oracle(store: GraphStore, user: str) -> set[str]:
    user = user.lower()
    found = {f"discussion:{d}" for d, a in rows(store.config, "SELECT discussion_id, author_username FROM notes")
             if (a or "").lower() == user}
    for kind, people in (("issue", "assignees"), ("merge_request", "list_concat(assignees, reviewers)")):
        for item, author, others in rows(store.config, f"SELECT id, author_username, {people} FROM {kind}s"):
            if user in {(p or "").lower() for p in [author, *(others or [])]}:
                found.add(f"{kind}:{item}")
    return found & store.docs


def _ids(response) -> set[str]:
    return {r.doc_id for r in response.results}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("typed,wanted", [("services/auth", "services/auth"), ("services/auth/", "services/auth"),
                                          ("./services/auth/jwt.py", "services/auth/jwt.py"),
                                          ("services/authz.py", "services/authz.py")])
def test_path_matches_mrs_that_changed_it_and_threads_on_its_lines(graph, mode, typed, wanted):
    expected = _path_oracle(graph, wanted)
    assert graph.mr[847] in expected or wanted == "services/authz.py"
    response = graph.searcher().search("auth tokens secrets", Filters.build(path=typed), mode, 500, floor=False)
    found = _ids(response)
    if mode == "lexical":
        assert found and found <= expected  # keywords: the matches that hold a query word
    else:
        assert found == expected
    assert response.filters.describe()["path"] == wanted


def test_a_directory_is_a_prefix_of_whole_path_segments(graph):
    auth = _path_oracle(graph, "services/auth")
    # !853 renamed services/auth/refresh.py away: its old path is under the directory.
    assert {graph.mr[847], graph.mr[853]} <= auth and graph.mr[851] not in auth
    assert _path_oracle(graph, "services/authz.py") >= {graph.mr[851]}
    assert any(d.startswith("discussion:") for d in auth)  # DiffNotes on services/auth/jwt.py
    search = graph.searcher().search
    assert graph.mr[851] not in _ids(search("auth", Filters.build(path="services/auth"), "semantic", 500, floor=False))
    assert _ids(search("auth", Filters.build(path="services/identity"), "semantic", 500, floor=False)) == \
        _path_oracle(graph, "services/identity") == {graph.mr[853]}


def _third_note_only(store: GraphStore) -> tuple[str, str]:
    """(user, thread document) where the user wrote the third note and no other, and did not start it."""
    threads: dict[str, list[str]] = {}
    for thread, author in rows(store.config, "SELECT discussion_id, author_username FROM notes ORDER BY position"):
        threads.setdefault(thread, []).append(author)
    for thread, authors in sorted(threads.items()):
        if len(authors) >= 3 and authors.count(authors[2]) == 1 and f"discussion:{thread}" in store.docs:
            return authors[2], f"discussion:{thread}"
    raise AssertionError("the sample has no thread whose third note's author wrote nothing else in it")


@pytest.mark.parametrize("mode", MODES)
def test_participant_finds_a_thread_where_the_user_wrote_only_the_third_note(graph, mode):
    user, thread = _third_note_only(graph)
    expected = _participant_oracle(graph, user)
    assert thread in expected
    searcher = graph.searcher()
    query = rows(graph.config, "SELECT content_text FROM documents WHERE id = ?", [thread])[0][0][:300]
    response = searcher.search(query, Filters.build(participant="@" + user.upper()), mode, 500, floor=False)
    assert thread in _ids(response)
    assert _ids(response) <= expected if mode == "lexical" else _ids(response) == expected
    # --author reads the thread's first note only: it does not find this thread.
    assert thread not in _ids(searcher.search(query, Filters.build(author=user), mode, 500, floor=False))


def test_participant_covers_authors_assignees_and_reviewers_of_items(graph):
    reviewer = rows(graph.config, "SELECT reviewers[1] FROM merge_requests m JOIN projects p ON p.id = m.project_id "
                                  "WHERE p.path_with_namespace = ? AND m.iid = 847", [PLATFORM])[0][0]
    found = _ids(graph.searcher().search("auth", Filters.build(participant=reviewer), "semantic", 500, floor=False))
    assert graph.mr[847] in found and found == _participant_oracle(graph, reviewer)


def test_graph_filters_apply_before_each_retrievers_cut(graph, tmp_path):
    """With the default 50 candidates, the filtered documents the unfiltered top 50 leaves out are
    found all the same: the ids are pushed into both retrievers, not applied to their top 50."""
    searcher = Workspace(_config(graph.config.data_dir)).searcher()
    users = {r[0] for r in rows(graph.config, "SELECT DISTINCT author_username FROM notes")}
    user = min(sorted(users), key=lambda u: len(_participant_oracle(graph, u)))
    expected = _participant_oracle(graph, user)
    assert 0 < len(expected) <= 50
    for mode in ("semantic", "lexical"):
        unfiltered = _ids(searcher.search("we", mode=mode, limit=50, floor=False))
        filtered = _ids(searcher.search("we", Filters.build(participant=user), mode, 50, floor=False))
        assert filtered <= expected and filtered - unfiltered, mode
        if mode == "semantic":
            assert filtered == expected


@pytest.mark.parametrize("mode", MODES)
def test_graph_filters_compose_with_each_other_and_the_column_filters(graph, mode):
    filters = Filters.build(path="services/auth", participant="johndoe", types=["discussion"], project=PLATFORM)
    expected = {d for d in _path_oracle(graph, "services/auth") & _participant_oracle(graph, "johndoe")
                if d.startswith("discussion:")}
    assert expected
    response = graph.searcher().search("token", filters, mode, 100, floor=False)
    assert _ids(response) <= expected and (mode == "lexical" or _ids(response) == expected)
    payload = response_json(response)
    jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(json.dumps(payload)))
    assert payload["filters"]["path"] == "services/auth" and payload["filters"]["participant"] == "johndoe"


def test_the_in_memory_vectors_and_the_complement_agree_with_the_lancedb_set(graph):
    """The warm path masks by the same ids; a set pushed as its complement matches the same documents."""
    filters, _ = resolve(Workspace(graph.config), Filters.build(participant="johndoe"))
    complement = filters.resolved(frozenset(graph.docs - filters.doc_ids), complement=True)
    cold, warm = graph.searcher(), Workspace(graph.config).searcher(warm=True)
    expected = _participant_oracle(graph, "johndoe")
    for searcher in (cold, warm):
        for pushed in (filters, complement):
            assert _ids(searcher.search("deploy", pushed, "semantic", 500, floor=False)) == expected
    assert _ids(cold.search("deploy", complement, "lexical", 500, floor=False)) == \
        _ids(cold.search("deploy", filters, "lexical", 500, floor=False))


def test_a_set_larger_than_half_the_store_is_pushed_as_its_complement(graph, monkeypatch):
    from gitlab_knowledge.search import graph_filters

    monkeypatch.setattr(graph_filters, "COMPLEMENT_FROM", 1)
    # Every MR on the path and every thread: more than half of the documents, by construction here.
    monkeypatch.setitem(graph_filters.RESOLVERS, "path", (
        "SELECT id FROM documents WHERE source_type <> 'issue'", lambda _path: {}, graph_filters._path_empty))
    filters, warnings = resolve(Workspace(graph.config), Filters.build(path="anything"))
    assert filters.complement and not warnings
    assert filters.doc_ids == {d for d in graph.docs if d.startswith("issue:")}
    found = _ids(graph.searcher().search("the", filters, "semantic", 500, floor=False))
    assert found == {d for d in graph.docs if not d.startswith("issue:")}


@pytest.mark.parametrize("mode", MODES)
def test_a_graph_filter_that_matches_nothing_says_so(graph, mode):
    response = graph.searcher().search("authentication tokens", Filters.build(path="no/such/dir"), mode, 10)
    assert response.results == [] and response.total == 0
    assert any(w.startswith("--path no/such/dir: no merge request changed it") for w in response.warnings)
    text = render_human(response, color=False)
    assert text.startswith('No results for "authentication tokens"') and "path=no/such/dir" in text
    nobody = graph.searcher().search("tokens", Filters.build(participant="nobody.here"), mode, 10)
    assert nobody.results == [] and any(w.startswith("--participant nobody.here: no issue") for w in nobody.warnings)
    both = graph.searcher().search("tokens", Filters.build(path="services/authz.py", participant="janedoe"), mode, 10)
    assert both.results == [] and any("no document matches all of them" in w for w in both.warnings)


def test_a_referenced_item_is_followed_by_what_closes_it_then_its_threads(graph):
    search = graph.searcher().search
    response = search("#234", limit=10)
    matches = [(r.doc_id, r.match) for r in response.results]
    assert matches[0] == (graph.issue[234], "exact_reference")
    assert matches[1] == (graph.mr[847], "linked")  # the mention from !812 and the unsynced target are not links
    threads = [m for m in matches[2:] if m[0].startswith("discussion:")]
    assert threads and all(how == "exact_reference" for _, how in threads)
    assert all(r.fields["iid"] == 234 for r in response.results[2:2 + len(threads)])
    # The other direction: the MR's own reference puts the issue it closes next.
    mr = [(r.doc_id, r.match) for r in search("!847", limit=3).results]
    assert mr[:2] == [(graph.mr[847], "exact_reference"), (graph.issue[234], "linked")]
    # A closed_by row (the issue's system note) links both ways as well.
    issue = [(r.doc_id, r.match) for r in search(f"#{graph.closed_issue}", limit=3).results]
    assert issue[:2] == [(graph.issue[graph.closed_issue], "exact_reference"), (graph.mr[853], "linked")]
    assert (graph.issue[graph.closed_issue], "linked") in [(r.doc_id, r.match) for r in search("!853", limit=3).results]
    jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(json.dumps(response_json(response))))
    text = render_human(response, color=False)
    assert "MR !847 - Refactor auth to use JWT tokens (1.00) [linked: closes or closed by the referenced item]" in text


def test_linked_items_obey_the_filters_and_are_found_when_the_item_is_filtered_out(graph):
    search = graph.searcher().search
    assert graph.mr[847] not in _ids(search("#234", Filters.build(types=["issue", "discussion"]), limit=20))
    # "Which MR closed #234": the issue is left out by the filter, the MR that closes it is first.
    for filters in (Filters.build(types=["mr"]), Filters.build(path="services/auth/jwt.py")):
        only = search("#234", filters, limit=5)
        assert [(r.doc_id, r.match) for r in only.results][:1] == [(graph.mr[847], "linked")]
        assert graph.issue[234] not in _ids(only)


def test_links_are_left_out_with_a_warning_while_a_writer_holds_the_store(graph, monkeypatch):
    monkeypatch.setattr(pinned, "LINK_WAIT_SECONDS", 0.2)
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                               "print('held', flush=True); time.sleep(120)", str(graph.config.duckdb_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        response = graph.searcher().search("#234", limit=5)
        assert response.results[0].doc_id == graph.issue[234]
        assert all(r.match == "exact_reference" for r in response.results)
        assert any(w.startswith("items linked to the referenced ones are not shown: the store") for w in
                   response.warnings)
        # A graph filter cannot be left out: it fails, in one line, after the configured wait.
        with pytest.raises(StoreBusyError, match="busy"):
            graph.searcher().search("tokens", Filters.build(path="services/auth"))
    finally:
        holder.kill()
        holder.wait()


def _cli(args: list[str], config_path: Path) -> subprocess.CompletedProcess:
    return forked(["gitlab_knowledge.search", *args, "--config", str(config_path)], env=subprocess_env(), timeout=120)


def test_cli_flags_json_and_bad_input(graph):
    ok = _cli(["token", "--path", "services/auth/", "--participant", "@johndoe", "--json", "--mode", "lexical"],
              graph.config_path)
    assert ok.returncode == 0, ok.stderr
    payload = json.loads(ok.stdout)
    jsonschema.validate(payload, SCHEMA)
    assert payload["filters"]["path"] == "services/auth" and payload["filters"]["participant"] == "johndoe"
    allowed = _path_oracle(graph, "services/auth") & _participant_oracle(graph, "johndoe")
    assert payload["results"] and {r["document_id"] for r in payload["results"]} <= allowed
    for bad in (["token", "--path", ""], ["token", "--path", "/"], ["token", "--participant", "@"]):
        result = _cli(bad, graph.config_path)
        assert result.returncode == 2, (bad, result.stderr)
        assert result.stderr.startswith("error: --") and result.stderr.count("\n") == 1, result.stderr


def test_on_the_synced_sample_the_mr_that_closes_234_follows_it(sample):
    """The graph as the pipeline builds it from the sample (no rows written by this test): !847's
    description closes #234 and changes services/auth/jwt.py."""
    searcher = Workspace(sample.config).searcher()
    top = [(r.fields["project"], r.fields["source_type"], r.fields["iid"], r.match)
           for r in searcher.search("#234", limit=3).results]
    assert top[0] == (PLATFORM, "issue", 234, "exact_reference")
    assert (PLATFORM, "merge_request", 847, "linked") in top
    on_path = searcher.search("JWT access tokens", Filters.build(path="services/auth/jwt.py"), limit=10)
    assert on_path.results and all(r.fields["project"] == PLATFORM for r in on_path.results)
    assert ("merge_request", 847) in {(r.fields["source_type"], r.fields["iid"]) for r in on_path.results}

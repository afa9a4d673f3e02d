"""A batch runs the store layers (normalized, graph, documents) of the projects whose fetches have
landed meanwhile in one pass per layer (defs/many_projects.py `_landed_together`, store/watermarks.py
`run_together`): the statements of a pass do not grow with its projects, the file is opened once
for the group, the rows and each project's stats are those of one project at a time, and a project
failing in a pass spares the others (the pass is rolled back and redone one by one)."""

import re
import shutil
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import tomli_w

import gitlab_knowledge.store.db as db
from gitlab_knowledge.config import load_config
from gitlab_knowledge.defs import many_projects
from gitlab_knowledge.defs.many_projects import Batch, Carried
from gitlab_knowledge.layers import DOCUMENTS, GRAPH, NORMALIZED, RAW
from gitlab_knowledge.sync.many import Fetches, Landed
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import project_paths

PROJECTS = 6
STORE_LAYERS = (NORMALIZED, GRAPH, DOCUMENTS)
# Columns that differ between two runs over the same rows: when, which run, the shared sequence
# (a watermark is a value of it).
VOLATILE = {"change_seq", "watermark", "built_at", "updated_at", "dagster_run_id"}


@pytest.fixture(scope="module")
def fetched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], dict[str, Any]]:
    """A store holding the raw rows of six projects (no store layer run yet), and their fetches."""
    out = tmp_path_factory.mktemp("together")
    generate_dataset(out / "dataset", projects=PROJECTS, issues=12, mrs=6, seed=34, threads_per_parent_mean=1.0)
    mp = pytest.MonkeyPatch()
    from gitlab_knowledge_sandbox import DEFAULT_TOKEN
    from gitlab_knowledge_tests.conftest import TOKEN_ENV

    mp.setenv(TOKEN_ENV, DEFAULT_TOKEN)
    try:
        with SandboxGitLab(dataset=out / "dataset") as sb:
            projects = project_paths(sb)
            workspace = workspace_at(out / "raw", sb.url)
            results = {p: RAW.refresh(workspace, p) for p in projects}
    finally:
        mp.undo()
    return out / "raw", projects, results


def workspace_at(data: Path, url: str = "http://127.0.0.1:9", in_flight: int = 1) -> Workspace:
    data.mkdir(parents=True, exist_ok=True)
    path = data.parent / f"{data.name}.toml"
    path.write_text(tomli_w.dumps({"projects": ["a/b"], "sync": {"projects_in_flight": in_flight},
                                   "gitlab": {"url": url, "rate_limit": 0, "max_retries": 0},
                                   "storage": {"data_dir": str(data)}}), encoding="utf-8")
    return Workspace(load_config(str(path)))


def copy_of(fetched: tuple[Path, list[str], dict[str, Any]], tmp_path: Path) -> Workspace:
    shutil.copytree(fetched[0], tmp_path / "data")
    return workspace_at(tmp_path / "data")


class Counting:
    """A held connection's cursor that counts the statements run through it."""

    def __init__(self, con: Any, counts: Counter[str]) -> None:
        self._con, self._counts = con, counts

    def execute(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        self._counts[re.sub(r"\s+", " ", sql.strip())[:60]] += 1
        return self._con.execute(sql, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def together(workspace: Workspace, projects: list[str], results: dict[str, Any],
             batch: Batch | None = None) -> tuple[Batch, list[tuple[str, str, dict[str, Any]]]]:
    batch = batch or Batch({p: Carried(p) for p in projects})
    group = [Landed(p, result=results[p]) for p in projects]
    done = [(p, layer.name, m) for p, layer, m in many_projects._landed_together(workspace, group, batch, run_id=None,
                                                                                  log=None)]
    return batch, done


def one_at_a_time(workspace: Workspace, projects: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for project in projects:
        with db.holding_open(workspace.config.duckdb_path):
            out[project] = {layer.name: many_projects._store_layer(workspace, project, layer, run_id=None, log=None)
                            for layer in STORE_LAYERS}
    return out


def stored(workspace: Workspace) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, without the columns that differ between two runs."""
    out = {}
    with db.read_connection(workspace.config.duckdb_path) as con:
        for (table,) in con.execute("SELECT table_name FROM information_schema.tables "
                                    "WHERE table_type = 'BASE TABLE' ORDER BY 1").fetchall():
            columns = [c for (c,) in con.execute("SELECT column_name FROM information_schema.columns "
                                                 "WHERE table_name = ? ORDER BY ordinal_position", [table]).fetchall()
                       if c not in VOLATILE]
            out[table] = con.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY ALL").fetchall()
    return out


def steady(metadata: dict[str, Any]) -> dict[str, Any]:
    """A layer's stats without its time (and batches: a pass counts its own)."""
    return {k: v for k, v in metadata.items() if not k.endswith(("duration_s", "batches"))}


def test_the_store_layers_of_a_batch_run_no_more_statements_for_more_projects(fetched, tmp_path, monkeypatch,
                                                                              token_env):
    """Through `carry`, fetching three at a time, every fetch landed before the store layers
    start: the statements the step's thread runs on the held store (the store layers) and its
    holds of the store, for two projects and for six."""
    dataset, projects = fetched[0].parent / "dataset", fetched[1]
    counts: Counter[str] = Counter()
    holds: list[str] = []
    step = threading.get_ident()
    real_cursor, real_hold = db._cursor_of_held, many_projects.holding_open

    def cursor(path: Path) -> Any:
        con = real_cursor(path)
        return Counting(con, counts) if con is not None and threading.get_ident() == step else con

    def hold(path: Path, wait: float = 120.0) -> Any:
        holds.append(str(path))
        return real_hold(path, wait)

    monkeypatch.setattr(db, "_cursor_of_held", cursor)
    monkeypatch.setattr(many_projects, "holding_open", hold)
    # Every fetch lands before the step's thread takes the first: the projects that land while it
    # is busy are one group, here all of them.
    real_landed = Fetches.landed

    def landed_together(self: Fetches) -> Any:
        self._thread.join()
        yield from real_landed(self)

    monkeypatch.setattr(Fetches, "landed", landed_together)
    # Only the store layers are counted: the index layers are not what this is about.
    monkeypatch.setattr(many_projects, "_lexical", lambda workspace, ps: {p: {} for p in ps})
    monkeypatch.setattr(many_projects, "_embeddings", lambda workspace, ps, progress, log, **_: {p: {} for p in ps})
    monkeypatch.setattr(many_projects, "embedding_ahead", lambda workspace: None)
    runs = {}
    with SandboxGitLab(dataset=dataset) as sb:
        for n in (2, 6):
            counts.clear()
            holds.clear()
            workspace = workspace_at(tmp_path / f"n{n}", sb.url, in_flight=3)
            batch = Batch({p: Carried(p) for p in projects[:n]})
            done = list(many_projects.carry(workspace, projects[:n], batch))
            assert batch.unfinished == []
            assert len(done) == n * 6
            runs[n] = (sum(counts.values()), len(holds))
    (two, two_holds), (six, six_holds) = runs[2], runs[6]
    # A pass's statements are per table and kind, not per project (a few inserts depend on what
    # the projects hold: a table with no rows for them is not written). One project at a time ran
    # ~130 a project, and held the store once a project.
    assert six <= two + 4, (two, six)
    assert two_holds == six_holds == 1


def test_a_pass_stores_the_rows_and_stats_of_one_project_at_a_time(fetched, tmp_path):
    _, projects, results = fetched
    passed = copy_of(fetched, tmp_path / "passed")
    batch, done = together(passed, projects, results)
    assert batch.unfinished == []
    singly = copy_of(fetched, tmp_path / "singly")
    expected = one_at_a_time(singly, projects)
    assert stored(passed) == stored(singly)
    for project, layer, metadata in done:
        if layer != RAW.name:
            assert steady(metadata) == steady(expected[project][layer]), (project, layer)
    assert any(metadata.get("documents_new") for _, _, metadata in done)


def test_a_project_failing_in_a_pass_spares_the_others(fetched, tmp_path, monkeypatch):
    _, projects, results = fetched
    workspace = copy_of(fetched, tmp_path)
    bad = projects[1]
    import gitlab_knowledge.graph.refresh as graph

    real_extract = graph.extract

    def extract(text: str | None, *, project_path: str, **kwargs: Any) -> Any:
        if project_path == bad:
            raise RuntimeError("links of a broken project")
        return real_extract(text, project_path=project_path, **kwargs)

    monkeypatch.setattr(graph, "extract", extract)
    batch, done = together(workspace, projects, results)
    assert batch.unfinished == [bad]
    assert batch.carried[bad].failed_layer == GRAPH.name
    assert "links of a broken project" in str(batch.carried[bad].error)
    assert batch.stopped is None
    for project in projects:
        want = {RAW.name, NORMALIZED.name} if project == bad else {layer.name for layer in (RAW, *STORE_LAYERS)}
        assert {layer for p, layer, _ in done if p == project} == want, project
    with db.read_connection(workspace.config.duckdb_path) as con:
        with_documents = {r[0] for r in con.execute("SELECT DISTINCT project_path FROM documents").fetchall()}
    assert with_documents == set(projects) - {bad}


def test_an_interrupt_in_a_pass_still_records_what_committed_before_it(fetched, tmp_path, monkeypatch):
    _, projects, results = fetched
    workspace = copy_of(fetched, tmp_path)
    import gitlab_knowledge.graph.refresh as graph

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(graph, "extract", interrupted)
    batch = Batch({p: Carried(p) for p in projects})
    seen: list[tuple[str, str]] = []
    with pytest.raises(KeyboardInterrupt):
        for project, layer, _ in many_projects._landed_together(workspace, [Landed(p, result=results[p])
                                                                            for p in projects], batch,
                                                                 run_id=None, log=None):
            seen.append((project, layer.name))
    # The normalized pass committed before the graph pass was interrupted: it is recorded.
    assert sorted(seen) == sorted((p, layer.name) for p in projects for layer in (RAW, NORMALIZED))
    with db.read_connection(workspace.config.duckdb_path) as con:
        layers = con.execute("SELECT layer, count(*) FROM layer_state GROUP BY layer").fetchall()
    assert layers == [(NORMALIZED.state, len(projects))]


def passes_of(fetched: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[list[str]]]:
    """The fixture's projects carried by a batch fetching two at a time (the index layers and the
    work ahead left out), and the groups its store-layer passes took, in order."""
    dataset, projects = fetched[0].parent / "dataset", fetched[1]
    groups: list[list[str]] = []
    real = many_projects._stored_together

    def counting(workspace: Workspace, carried: list[Carried], batch: Batch, **kwargs: Any) -> Any:
        groups.append([c.project for c in carried])
        return (yield from real(workspace, carried, batch, **kwargs))

    monkeypatch.setattr(many_projects, "_stored_together", counting)
    monkeypatch.setattr(many_projects, "_lexical", lambda workspace, ps: {p: {} for p in ps})
    monkeypatch.setattr(many_projects, "_embeddings", lambda workspace, ps, progress, log, **_: {p: {} for p in ps})
    monkeypatch.setattr(many_projects, "embedding_ahead", lambda workspace: None)
    with SandboxGitLab(dataset=dataset) as sb:
        workspace = workspace_at(tmp_path / "data", sb.url, in_flight=2)
        batch = Batch({p: Carried(p) for p in projects})
        done = list(many_projects.carry(workspace, projects, batch))
    assert batch.unfinished == []
    assert len(done) == len(projects) * 6
    return projects, groups


def test_a_pass_waits_for_more_projects_to_land_while_they_are_being_fetched(fetched, tmp_path, monkeypatch,
                                                                              token_env):
    """Fetching two at a time, the step's thread does not take each project as it lands: a pass
    costs ~110 statements whatever its size, so it waits until `TOGETHER_LEAST` have landed, or
    every fetch has ended, and carries them in one pass. The old code took the first project
    alone (it lands while the others are still being fetched): 2 to 6 passes for 6 projects."""
    monkeypatch.setattr(many_projects, "TOGETHER_FIRST", len(fetched[1]))
    assert len(fetched[1]) < many_projects.TOGETHER_LEAST
    projects, groups = passes_of(fetched, tmp_path, monkeypatch)
    assert [sorted(g) for g in groups] == [sorted(projects)]


def test_the_first_pass_takes_fewer_projects_so_the_work_ahead_starts_early(fetched, tmp_path, monkeypatch,
                                                                           token_env):
    """The first pass waits for `TOGETHER_FIRST` landed projects, the later ones for
    `TOGETHER_LEAST`: the work ahead can only embed documents that committed, and waiting for 32
    projects before the first pass left its worker idle for the first seconds of the fetch phase.
    (What landed meanwhile is left out here, so the group sizes do not depend on timing.)"""
    monkeypatch.setattr(many_projects, "TOGETHER_FIRST", 2)
    monkeypatch.setattr(many_projects.Fetches, "landed_meanwhile", lambda self: [])
    assert len(fetched[1]) > 2
    projects, groups = passes_of(fetched, tmp_path, monkeypatch)
    assert [len(g) for g in groups] == [2, len(projects) - 2]
    assert sorted(p for g in groups for p in g) == sorted(projects)

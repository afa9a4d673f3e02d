"""The embedding fan-out (embeddings/fanout.py, scaleout/embedding.py) gives the single step's
result: the same documents embedded, each vector within 1e-5 (cosine), the same metadata,
failures and deletes; and its chunking covers every document once, in order."""

import shutil
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gitlab_knowledge.embeddings import fanout
from gitlab_knowledge.embeddings.embedded import EmbeddedProvider
from gitlab_knowledge.embeddings.vectors import VectorStore
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import store_config

MODEL = (EmbeddedProvider.provider, EmbeddedProvider.MODEL)
COSINE_TOLERANCE = 1e-5


# -- chunking --------------------------------------------------------------------------------

def _staged(path: Path, n: int) -> Path:
    ids = [f"doc-{i:05d}" for i in range(n)]
    pq.write_table(pa.table({"id": ids, "content_text": [f"text {i}" for i in range(n)]}), path, row_group_size=37)
    return path


@pytest.mark.parametrize(("n", "size"), [(0, 5), (1, 5), (10, 5), (11, 5), (100, 7), (100, 1), (5000, 4500), (9000, 4096)])
def test_split_covers_every_document_once_in_order(tmp_path, n, size):
    staged = _staged(tmp_path / "staged.parquet", n)
    parts = list(fanout.split_staged(staged, size, tmp_path, "chunk"))
    assert [len(ids) for _, ids in parts] == [size] * (n // size) + ([n % size] if n % size else [])
    assert [i for _, ids in parts for i in ids] == [f"doc-{i:05d}" for i in range(n)]
    for path, ids in parts:
        assert pq.read_table(path).column("id").to_pylist() == ids


def test_split_refuses_empty_chunks(tmp_path):
    with pytest.raises(ValueError):
        list(fanout.split_staged(_staged(tmp_path / "s.parquet", 3), 0, tmp_path, "chunk"))


def test_chunk_keys_are_valid_mapping_keys():
    spec = fanout.ChunkSpec("acme/web-app", "ollama", "nomic-embed-text:v1.5", 3, "d", (), None, "v")
    assert spec.key == "vectors__ollama_nomic_embed_text_v1_5_00003"


# -- same result as the single step ---------------------------------------------------------------

def _vectors(data_dir: Path) -> dict[tuple[str, int], dict]:
    store = VectorStore(data_dir / "lancedb", *MODEL)
    rows = store.table().to_arrow().to_pylist()
    return {(r["doc_id"], r["chunk"]): r for r in rows}


def assert_same_vectors(single: dict, fanned: dict) -> None:
    assert single.keys() == fanned.keys()
    worst = 0.0
    for key, row in single.items():
        a, b = np.asarray(row["vector"], dtype=np.float64), np.asarray(fanned[key]["vector"], dtype=np.float64)
        worst = max(worst, 1.0 - float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
        for column, value in row.items():
            if column not in ("vector", "embedded_at"):
                assert fanned[key][column] == value, (key, column)
    assert worst <= COSINE_TOLERANCE, worst


def _fanned(workspace: Workspace, project: str, run_id: str, chunk_documents: int, everything: bool = False) -> list:
    plan = fanout.plan_chunks(workspace, project, [MODEL], run_id=run_id, everything=everything,
                              chunk_documents=chunk_documents)
    results = [fanout.embed_chunk(workspace, spec) for spec in reversed(plan.chunks)]  # any order
    stats = fanout.commit_chunks(workspace, plan, results)
    assert not Path(plan.staging).exists()
    return plan, stats


def test_fanout_embeds_what_the_single_step_embeds(small_store, tmp_path):
    # The single step's result is the session's store itself: its vectors were written by the sync
    # job's embeddings step (embedding the small dataset again here cost the same CPU twice).
    fanned_dir = tmp_path / "fanned"
    shutil.copytree(small_store, fanned_dir)
    shutil.rmtree(fanned_dir / "lancedb")
    fanned = Workspace(store_config(fanned_dir))
    single = VectorStore(small_store / "lancedb", *MODEL)
    from gitlab_knowledge_tests.helpers import rows

    projects = [r[0] for r in rows(fanned.config, "SELECT DISTINCT project_path FROM documents ORDER BY 1")]
    assert len(projects) == 2
    for project in projects:
        documents = rows(fanned.config, "SELECT count(*) FROM documents WHERE project_path = ?", [project])[0][0]
        assert single.count(project)[0] == documents and not single.failures(project)
        plan, (stats,) = _fanned(fanned, project, f"run-{project}", chunk_documents=29)
        assert len(plan.chunks) >= 2
        assert (stats.documents, stats.to_embed, stats.embedded, stats.chunks, stats.failed) == \
               (documents, documents, documents, single.count(project)[1], 0)
    assert_same_vectors(_vectors(small_store), _vectors(fanned_dir))

    # Nothing changed: nothing to embed, no chunk; a document gone: deleted by the commit.
    plan, (stats,) = _fanned(fanned, projects[0], "again", chunk_documents=29)
    assert (plan.chunks, stats.embedded, stats.deleted) == ([], 0, 0)
    from gitlab_knowledge.store.db import write_connection

    with write_connection(fanned.config.duckdb_path) as con:
        gone = con.execute("SELECT id FROM documents WHERE project_path = ? ORDER BY id LIMIT 1", [projects[0]]).fetchone()[0]
        con.execute("DELETE FROM documents WHERE id = ?", [gone])
    plan, (stats,) = _fanned(fanned, projects[0], "deleted", chunk_documents=29)
    assert (plan.chunks, stats.deleted) == ([], 1)
    assert not any(doc == gone for doc, _ in _vectors(fanned_dir))


class _Broken(EmbeddedProvider):
    """Fails every batch holding a given document: its chunk records failures, others commit."""

    def __init__(self, poison: str) -> None:
        super().__init__()
        self.poison = poison

    def embed_documents(self, texts):
        if any(self.poison in t for t in texts):
            raise RuntimeError("boom")
        return super().embed_documents(texts)


def test_a_failing_chunk_records_failures_and_the_others_commit(small_store, tmp_path):
    shutil.copytree(small_store, tmp_path / "data")
    shutil.rmtree(tmp_path / "data" / "lancedb")
    from gitlab_knowledge_tests.helpers import rows

    config = store_config(tmp_path / "data")
    project, text = rows(config, "SELECT project_path, content_text FROM documents ORDER BY id LIMIT 1")[0]
    provider = _Broken(text[:60])
    workspace = Workspace(config, embedder_factory=lambda _c, _p=None, _m=None: provider)
    plan, (stats,) = _fanned(workspace, project, "broken", chunk_documents=25)
    assert 0 < stats.failed < stats.to_embed
    assert stats.embedded + stats.failed == stats.to_embed
    store = VectorStore(config.lancedb_dir, *MODEL)
    assert len(store.failures(project)) == stats.failed
    assert store.count(project)[0] == stats.embedded


# -- the graph-backed asset, through Dagster -----------------------------------------------------

def test_the_fanout_asset_materializes_through_dagster(small_store, tmp_path):
    from gitlab_knowledge.defs.partitions import PARTITIONS_NAME
    from gitlab_knowledge.scaleout.definitions import build_scaleout_defs, fanout_config
    from gitlab_knowledge.scaleout.embedding import ASSET_KEY

    shutil.copytree(small_store, tmp_path / "data")
    shutil.rmtree(tmp_path / "data" / "lancedb")
    workspace = Workspace(store_config(tmp_path / "data"))
    from gitlab_knowledge_tests.helpers import rows

    project = rows(workspace.config, "SELECT project_path FROM documents ORDER BY id LIMIT 1")[0][0]
    local = dg.define_asset_job("embed_here", selection=dg.AssetSelection.assets(ASSET_KEY),
                                executor_def=dg.in_process_executor)
    defs = dg.Definitions.merge(build_scaleout_defs(workspace), dg.Definitions(jobs=[local]))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(PARTITIONS_NAME, [project])
        result = defs.resolve_job_def("embed_here").execute_in_process(
            instance=instance, partition_key=project, run_config=fanout_config(40))
        assert result.success
        steps = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}
        assert len([s for s in steps if s.startswith(f"{ASSET_KEY}.embed_chunk[")]) >= 2
        materialization = result.asset_materializations_for_node(ASSET_KEY)[0]
        metadata = {k: v.value for k, v in materialization.metadata.items()}
    documents = rows(workspace.config, "SELECT count(*) FROM documents WHERE project_path = ?", [project])[0][0]
    assert metadata["embeddings_embedded"] == documents
    assert VectorStore(workspace.config.lancedb_dir, *MODEL).count(project)[0] == documents

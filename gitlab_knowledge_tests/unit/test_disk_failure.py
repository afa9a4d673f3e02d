"""A full disk, a read-only mount or a denied write, in each wrapping a layer meets it in, is one
StoreError naming the layer, the path and the cause; anything else passes through as raised."""

import errno

import dagster as dg
import pytest

from gitlab_knowledge.config import parse_config
from gitlab_knowledge.defs.failures import original, said_plainly
from gitlab_knowledge.errors import GitLabError, StoreError, disk_failure
from gitlab_knowledge.layers import EMBEDDINGS, GRAPH, LEXICAL
from gitlab_knowledge.workspace import Workspace


def workspace(tmp_path):
    return Workspace(parse_config({"gitlab": {"url": "http://127.0.0.1:9"}, "projects": ["a/b"],
                                   "storage": {"data_dir": str(tmp_path / "data")}}, tmp_path, {}, "test"))


@pytest.mark.parametrize(("exc", "expected"), [
    (OSError(errno.ENOSPC, "No space left on device", "/d/gk-embed-12-abc/documents.parquet"),
     ("no space left on device", "/d")),
    (OSError(errno.EROFS, "Read-only file system", "/d/lancedb/t.lance/_transactions/.tmp1"),
     ("read-only file system", "/d/lancedb/t.lance/_transactions/.tmp1")),
    (RuntimeError('IO Error: Async write failed: {"exception_message":"Could not write file '
                  '\\"/d/gk-lexical-9-x/documents.parquet\\": No space left on device","errno":"28"}'),
     ("no space left on device", "/d")),
    (RuntimeError('TransactionContext Error: Failed to commit: Could not write file "/d/s.duckdb.wal": '
                  "No space left on device"), ("no space left on device", "/d/s.duckdb.wal")),
    (RuntimeError("(sqlite3.OperationalError) database or disk is full"), ("no space left on device", None)),
    (RuntimeError('IO Error: {"errno":"2"} No such file'), None),
    (ValueError("a bad row"), None),
])
def test_disk_failure_reads_every_wrapping(exc, expected):
    assert disk_failure(exc) == expected


def test_a_wrapped_cause_is_found():
    try:
        try:
            raise OSError(errno.EDQUOT, "Disk quota exceeded", "/d/tantivy/x")
        except OSError as inner:
            raise RuntimeError("commit failed") from inner
    except RuntimeError as outer:
        assert disk_failure(outer) == ("disk quota exceeded", "/d/tantivy/x")


@pytest.mark.parametrize(("layer", "raised", "said"), [
    (GRAPH, StoreError('cannot write the store /s: Could not write file "/s.wal": No space left on device'),
     "the graph layer cannot write /s.wal: no space left on device"),
    (EMBEDDINGS, OSError(errno.EROFS, "Read-only file system", "{lancedb}/v.lance/_versions/.tmp"),
     "the embeddings layer cannot write {lancedb}: read-only file system"),
    (LEXICAL, RuntimeError("Failed to write: Permission denied"), "the lexical layer cannot write {tantivy}: "
                                                                  "permission denied"),
])
def test_each_layer_says_it_the_same_way(tmp_path, layer, raised, said):
    ws = workspace(tmp_path)
    paths = {"lancedb": ws.config.lancedb_dir, "tantivy": ws.config.tantivy_dir}
    if isinstance(raised, OSError):
        raised = OSError(raised.errno, raised.strerror, raised.filename.format(**paths))
    with pytest.raises(dg.Failure) as failure, said_plainly(layer=layer, workspace=ws):
        raise raised
    error = original(failure.value)
    assert isinstance(error, StoreError) and error.exit_code == 1
    assert str(error) == said.format(**paths)


def test_gitlabs_own_words_are_not_a_disk(tmp_path):
    with pytest.raises(dg.Failure) as failure, said_plainly(layer=GRAPH, workspace=workspace(tmp_path)):
        raise GitLabError("GitLab answered 403 Forbidden: Permission denied")
    assert type(original(failure.value)) is GitLabError


def test_another_failure_passes_through(tmp_path):
    with pytest.raises(ZeroDivisionError), said_plainly(layer=GRAPH, workspace=workspace(tmp_path)):
        raise ZeroDivisionError

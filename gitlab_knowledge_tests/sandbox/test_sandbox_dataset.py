"""Dataset directory format: write/load round trip, errors, and serving a loaded directory."""

import json
from pathlib import Path
from typing import Any

import pytest

from gitlab_knowledge_sandbox import (
    SAMPLE_DATASET,
    Dataset,
    DatasetError,
    SandboxGitLab,
    load_dataset,
    write_dataset,
)
from gitlab_knowledge_sandbox.dataset import FORMAT


def without_path(data: Dataset) -> dict[str, Any]:
    return {k: v for k, v in vars(data).items() if k != "path"}


def test_round_trip(tiny_dataset: Dataset, tmp_path: Path) -> None:
    root = write_dataset(tiny_dataset, tmp_path / "ds")
    assert json.loads((root / "dataset.json").read_text())["format"] == FORMAT
    assert (root / "projects" / "101" / "discussions.jsonl").read_text().count("\n") == 3
    loaded = load_dataset(root)
    assert loaded.path == root
    assert without_path(loaded) == without_path(tiny_dataset)
    assert loaded.counts() == {"projects": 2, "issues": 6, "merge_requests": 2, "discussions": 29, "notes": 30,
                               "documents": 36}


def test_missing_files_are_empty(tmp_path: Path) -> None:
    data = Dataset(user={"id": 1}, projects=[{"id": 5, "path_with_namespace": "a/b"}])
    root = write_dataset(data, tmp_path)
    for name in ("issues.jsonl", "merge_requests.jsonl", "discussions.jsonl", "merge_request_diffs.jsonl"):
        (root / "projects" / "5" / name).unlink()
    loaded = load_dataset(root)
    assert loaded.issues == {5: []} and loaded.discussions == {5: []} and loaded.diffs == {5: []}
    (root / "projects" / "5").rmdir()
    assert load_dataset(root).merge_requests == {5: []}


def test_sandbox_serves_a_directory(tiny_dataset: Dataset, tmp_path: Path, make_sandbox: Any,
                                   client_for: Any) -> None:
    root = write_dataset(tiny_dataset, tmp_path / "ds")
    client = client_for(make_sandbox(root))
    assert [p["id"] for p in client.get("/projects", params={"order_by": "id", "sort": "asc"}).json()] == [101, 102]
    assert client.get("/projects/101/issues/1").json()["user_notes_count"] == 3


def test_snapshot_round_trips_mutations(sandbox: SandboxGitLab, client: Any, tmp_path: Path, make_sandbox: Any,
                                        client_for: Any) -> None:
    client.post("/projects/101/issues", json={"title": "added"})
    client.post("/projects/101/issues/6/notes", json={"body": "hi"})
    client.delete("/projects/101/issues/2")
    root = write_dataset(sandbox.state.snapshot(), tmp_path / "snap")
    again = client_for(make_sandbox(load_dataset(root)))
    assert again.get("/projects/101/issues/6").json()["user_notes_count"] == 1
    assert again.get("/projects/101/issues/2").status_code == 404
    assert again.get("/projects/101/issues/6/discussions").json()[0]["notes"][0]["body"] == "hi"


def _write(root: Path, meta: Any = None, projects: Any = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "user": {"id": 1}} if meta is None else meta
    (root / "dataset.json").write_text(json.dumps(meta))
    (root / "projects.json").write_text(json.dumps([{"id": 1}] if projects is None else projects))
    return root


@pytest.mark.parametrize(("setup", "fragment"), [
    (lambda r: None, "not a directory"),
    (lambda r: r.mkdir(), "dataset.json: missing"),
    (lambda r: _write(r, meta={"format": "other/9", "user": {"id": 1}}), "format is 'other/9'"),
    (lambda r: _write(r, meta={"format": FORMAT}), '"user"'),
    (lambda r: _write(r, projects={"id": 1}), "projects.json"),
    (lambda r: (_write(r) / "dataset.json").write_text("{nope"), "dataset.json"),
])
def test_bad_datasets_raise_dataset_error(tmp_path: Path, setup: Any, fragment: str) -> None:
    root = tmp_path / "ds"
    setup(root)
    with pytest.raises(DatasetError) as info:
        load_dataset(root)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_jsonl_line_names_file_and_line(tmp_path: Path) -> None:
    root = _write(tmp_path / "ds")
    pdir = root / "projects" / "1"
    pdir.mkdir(parents=True)
    (pdir / "issues.jsonl").write_text('{"id": 1}\n\n{broken\n')
    with pytest.raises(DatasetError, match=r"issues\.jsonl:3"):
        load_dataset(root)
    (pdir / "issues.jsonl").write_text("")
    (pdir / "discussions.jsonl").write_text('{"noteable_type": "Epic", "noteable_iid": 1, "discussions": []}\n')
    with pytest.raises(DatasetError, match="noteable_type"):
        load_dataset(root)


def test_items_without_timestamps_are_rejected_when_served(tmp_path: Path) -> None:
    root = _write(tmp_path / "ds")
    pdir = root / "projects" / "1"
    pdir.mkdir(parents=True)
    (pdir / "issues.jsonl").write_text('{"id": 1, "iid": 1, "created_at": "yesterday", "updated_at": "x"}\n')
    with pytest.raises(DatasetError, match="created_at"):
        SandboxGitLab(root)


def test_sample_dataset_path_points_inside_the_package() -> None:
    assert SAMPLE_DATASET.name == "sample"
    assert SAMPLE_DATASET.parent.name == "gitlab_knowledge_sandbox"

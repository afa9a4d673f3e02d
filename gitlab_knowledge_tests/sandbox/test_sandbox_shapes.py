"""The sandbox serves any saved v4 body, or refuses the dataset at load naming the file and the item
(issue 16, point 10): notes without `updated_at`, label objects, lone surrogates, duplicates."""

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from gitlab_knowledge_sandbox import SandboxGitLab
from gitlab_knowledge_sandbox.dataset import DatasetError, load_dataset
from gitlab_knowledge_sandbox.state import SandboxState

SHAPES = Path(__file__).resolve().parents[1] / "fixtures" / "payload-shapes"


@pytest.fixture
def shapes(make_sandbox: Callable[..., SandboxGitLab], client_for: Callable[..., httpx.Client]) -> httpx.Client:
    return client_for(make_sandbox(load_dataset(SHAPES)))


def test_notes_ordered_by_updated_at_when_a_note_has_none(shapes: httpx.Client) -> None:
    # Note 95002 (an imported note) has no updated_at: GitLab's own order falls back to created_at.
    for sort in ("asc", "desc"):
        response = shapes.get("/projects/501/issues/1/notes", params={"order_by": "updated_at", "sort": sort})
        assert response.status_code == 200, response.text
        ids = [n["id"] for n in response.json()]
        assert sorted(ids) == [95001, 95002, 95003, 95004]
        assert ids[0 if sort == "asc" else -1] == 95001


def test_label_edits_on_label_objects(shapes: httpx.Client) -> None:
    added = shapes.put("/projects/501/issues/3", json={"add_labels": "frontend,backend"})
    assert added.status_code == 200, added.text
    labels = added.json()["labels"]
    assert [label["name"] for label in labels] == ["backend", "priority::high", "frontend"]
    assert labels[0]["color"] == "#428BCA"  # the stored objects are kept as they were
    removed = shapes.put("/projects/501/issues/3", json={"remove_labels": "backend"})
    assert removed.status_code == 200, removed.text
    assert [label["name"] for label in removed.json()["labels"]] == ["priority::high", "frontend"]


def test_a_lone_surrogate_is_served_escaped(make_sandbox: Callable[..., SandboxGitLab],
                                             client_for: Callable[..., httpx.Client]) -> None:
    sb = make_sandbox(load_dataset(SHAPES))
    sb.state.add_note(501, "issues", 4, "half a pair: \ud800 here")
    response = client_for(sb).get("/projects/501/issues/4/notes")
    assert response.status_code == 200
    assert b"\\ud800" in response.content
    assert json.loads(response.content)[0]["body"] == "half a pair: \ud800 here"


def test_a_renamed_project_answers_at_its_old_path(make_sandbox: Callable[..., SandboxGitLab],
                                                    client_for: Callable[..., httpx.Client]) -> None:
    sb = make_sandbox(load_dataset(SHAPES))
    sb.state.rename_project(501, "shapes/renamed")
    client = client_for(sb)
    for path in ("shapes%2Fversions", "shapes%2Frenamed", "SHAPES%2FRenamed", "501"):
        response = client.get(f"/projects/{path}")
        assert response.status_code == 200, path
        assert response.json()["path_with_namespace"] == "shapes/renamed"
        assert response.json()["web_url"] == "https://gitlab.example.com/shapes/renamed"


def _broken_copy(tmp_path: Path, edit: Callable[[list[dict]], list[dict]]) -> Path:
    root = tmp_path / "dataset"
    shutil.copytree(SHAPES, root)
    path = root / "projects" / "501" / "issues.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in edit(rows)))
    return root


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda rows: [*rows, {**rows[0], "id": 9999}],
     "item id 9999 (iid 1), #5 in the file, repeats iid 1 of item id 9001"),
    (lambda rows: [*rows, {**rows[0], "iid": 77}], "item id 9001 (iid 77), #5 in the file, repeats id 9001"),
    (lambda rows: [{k: v for k, v in rows[0].items() if k != "id"}, *rows[1:]],
     "item with iid 1 and no id, #1 in the file, needs an integer id"),
    (lambda rows: [rows[0], {**rows[1], "updated_at": "yesterday"}],
     "item id 9002 (iid 2), #2 in the file, needs an ISO 8601 updated_at (got 'yesterday')"),
])
def test_a_dataset_the_sandbox_cannot_serve_is_refused_naming_file_and_item(tmp_path: Path, edit, expected) -> None:
    root = _broken_copy(tmp_path, edit)
    with pytest.raises(DatasetError) as err:
        SandboxState(load_dataset(root))
    message = str(err.value)
    assert "\n" not in message
    assert str(root / "projects" / "501" / "issues.jsonl") in message
    assert expected in message
    assert "None" not in message.replace("no id", "")

"""Merge request diffs: `/diffs` (paginated), the deprecated `/changes`, the pre-15.7 switch, the
dataset file, and the diffs the bundled sample and the generator ship."""

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from gitlab_knowledge_sandbox import (
    SAMPLE_DATASET,
    Dataset,
    DatasetError,
    SandboxGitLab,
    SandboxState,
    generate_dataset,
    load_dataset,
    write_dataset,
)
from gitlab_knowledge_sandbox.__main__ import build_parser

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gitlab-api" / "merge_requests" / \
    "merge_request_diffs_list.json"
DIFF_KEYS = {"old_path", "new_path", "a_mode", "b_mode", "diff", "new_file", "renamed_file", "deleted_file"}
HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# GitLab's default closing pattern, reduced to `#123` references (the sample uses no other form).
CLOSING = re.compile(
    r"\b(?:[Cc]los(?:e[sd]?|ing)|[Ff]ix(?:e[sd]|ing)?|[Rr]esolv(?:e[sd]?|ing)|[Ii]mplement(?:s|ed|ing)?)"
    r":? +(?:issues? +)?#(\d+)")


def many_diffs(count: int) -> list[dict[str, Any]]:
    return [
        {"old_path": f"src/f{n:02d}.py", "new_path": f"src/f{n:02d}.py", "a_mode": "100644", "b_mode": "100644",
         "diff": f"@@ -1 +1 @@\n-a = {n}\n+a = {n + 1}\n", "new_file": False, "renamed_file": False,
         "deleted_file": False}
        for n in range(count)
    ]


# -- /diffs and /changes ----------------------------------------------------------------------


def test_diffs_paginate_like_the_other_lists(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    diffs = many_diffs(45)
    sandbox.state.set_diffs(101, 2, diffs)
    first = client.get("/projects/101/merge_requests/2/diffs")
    assert first.status_code == 200
    assert first.json() == diffs[:20]
    assert (first.headers["x-total"], first.headers["x-total-pages"], first.headers["x-per-page"]) == ("45", "3", "20")
    assert first.headers["x-next-page"] == "2" and first.headers["x-prev-page"] == ""
    assert 'rel="next"' in first.headers["link"] and "/projects/101/merge_requests/2/diffs?" in first.headers["link"]
    served: list[Any] = []
    page: str = "1"
    while page:
        response = client.get("/projects/101/merge_requests/2/diffs", params={"page": page, "per_page": 17})
        served += response.json()
        page = response.headers["x-next-page"]
    assert served == diffs
    assert response.headers["x-page"] == "3" and 'rel="next"' not in response.headers["link"]
    assert len(client.get("/projects/101/merge_requests/2/diffs", params={"per_page": 1000}).json()) == 45


def test_diffs_of_a_merge_request_without_changes(client: httpx.Client) -> None:
    response = client.get("/projects/group%2Fproject-one/merge_requests/2/diffs")
    assert response.status_code == 200 and response.json() == []
    assert response.headers["x-total"] == "0"


def test_unknown_merge_request_or_project_is_404(client: httpx.Client) -> None:
    for sub in ("diffs", "changes"):
        response = client.get(f"/projects/101/merge_requests/99/{sub}")
        assert (response.status_code, response.json()) == (404, {"message": "404 Not found"})
        response = client.get(f"/projects/999/merge_requests/1/{sub}")
        assert (response.status_code, response.json()) == (404, {"message": "404 Project Not Found"})
    # Issues have no diffs: no such route.
    assert client.get("/projects/101/issues/1/diffs").status_code == 404


def test_changes_is_the_merge_request_plus_all_diffs(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    diffs = many_diffs(45)
    sandbox.state.set_diffs(101, 2, diffs)
    body = client.get("/projects/101/merge_requests/2/changes", params={"per_page": 5}).json()
    mr = client.get("/projects/101/merge_requests/2").json()
    assert body == {**mr, "changes": diffs, "overflow": False}
    tiny = client.get("/projects/101/merge_requests/1/changes").json()
    assert [(c["old_path"], c["new_path"], c["renamed_file"]) for c in tiny["changes"]] == [
        ("x.py", "x.py", False), ("y.py", "z.py", True)]
    assert all(set(c) == DIFF_KEYS for c in tiny["changes"])


def test_legacy_switch_hides_diffs_but_keeps_changes(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    assert client.get("/projects/101/merge_requests/1/diffs").status_code == 200
    sandbox.state.legacy_diffs = True
    response = client.get("/projects/101/merge_requests/1/diffs")
    assert (response.status_code, response.json()) == (404, {"error": "404 Not Found"})
    assert client.get("/projects/101/merge_requests/99/diffs").status_code == 404
    changes = client.get("/projects/101/merge_requests/1/changes")
    assert changes.status_code == 200 and len(changes.json()["changes"]) == 2
    sandbox.state.legacy_diffs = False
    assert client.get("/projects/101/merge_requests/1/diffs").status_code == 200


def test_legacy_switch_control_route_and_constructor(make_sandbox: Any, client_for: Any) -> None:
    sb = make_sandbox(legacy_diffs=True)
    client = client_for(sb)
    assert httpx.get(sb.url + "/-/sandbox/legacy_diffs").json() == {"enabled": True}
    assert client.get("/projects/101/merge_requests/1/diffs").status_code == 404
    assert httpx.post(sb.url + "/-/sandbox/legacy_diffs", json={"enabled": False}).json() == {"enabled": False}
    assert client.get("/projects/101/merge_requests/1/diffs").status_code == 200
    assert httpx.post(sb.url + "/-/sandbox/legacy_diffs", json={"enabled": "yes"}).status_code == 400
    assert sb.state.legacy_diffs is False


def test_cli_flag() -> None:
    assert build_parser().parse_args(["serve", "--legacy-diffs"]).legacy_diffs is True
    assert build_parser().parse_args(["serve"]).legacy_diffs is False


def test_diff_calls_are_counted_per_route(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    client.get("/projects/101/merge_requests/1/diffs")
    client.get("/projects/101/merge_requests/1/diffs", params={"page": 2})
    client.get("/projects/101/merge_requests/1/changes")
    sandbox.state.legacy_diffs = True
    client.get("/projects/101/merge_requests/1/diffs")
    stats = sandbox.stats()
    assert stats["by_route"] == {"merge_request_diffs": 3, "merge_request_changes": 1}
    assert stats["status"] == {"200": 3, "404": 1}


def test_gitlab_docs_example_is_served_verbatim(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    example = json.loads(FIXTURE.read_bytes())
    sandbox.state.set_diffs(101, 2, example)
    response = client.get("/projects/101/merge_requests/2/diffs")
    assert response.json() == example
    assert json.loads(response.content) == json.loads(FIXTURE.read_bytes())


# -- state methods ------------------------------------------------------------------------------


def test_set_diffs_moves_updated_at_like_a_push(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    before = client.get("/projects/101/merge_requests/2").json()
    sandbox.clock.advance(5)  # well inside ThrottledTouch's minute: a push is not throttled
    updated = sandbox.state.set_diffs(101, 2, many_diffs(3))
    assert updated["updated_at"] == "2026-01-01T12:00:05.000Z" != before["updated_at"]
    assert client.get("/projects/101/merge_requests/2").json() == updated
    listed = client.get("/projects/101/merge_requests", params={"updated_after": "2026-01-01T12:00:00Z"}).json()
    assert [m["iid"] for m in listed] == [2]
    assert sandbox.state.diffs(101, 2) == many_diffs(3)
    assert sandbox.state.diffs("group/project-one", 1)[1]["renamed_file"] is True


def test_set_diffs_keeps_a_saved_changes_count_in_step(tiny_dataset: Dataset) -> None:
    data = tiny_dataset
    data.merge_requests[101][1]["changes_count"] = "0"
    state = SandboxState(data)
    assert state.set_diffs(101, 2, many_diffs(4))["changes_count"] == "4"
    assert "changes_count" not in state.set_diffs(101, 1, [])
    assert state.diffs(101, 1) == []


def test_set_diffs_on_unknown_merge_request(tiny_dataset: Dataset) -> None:
    state = SandboxState(tiny_dataset)
    with pytest.raises(Exception, match="404 Not found"):
        state.set_diffs(101, 99, [])
    with pytest.raises(Exception, match="404 Not found"):
        state.diffs(101, 99)


def test_deleting_a_merge_request_drops_its_diffs(sandbox: SandboxGitLab, client: httpx.Client) -> None:
    assert client.delete("/projects/101/merge_requests/1").status_code == 204
    assert sandbox.state.snapshot().diffs[101] == []


# -- dataset file -------------------------------------------------------------------------------


def test_round_trip_and_snapshot(tiny_dataset: Dataset, tmp_path: Path) -> None:
    root = write_dataset(tiny_dataset, tmp_path / "ds")
    lines = (root / "projects" / "101" / "merge_request_diffs.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == tiny_dataset.diffs[101]
    assert (root / "projects" / "102" / "merge_request_diffs.jsonl").read_text() == ""
    assert load_dataset(root).diffs == tiny_dataset.diffs
    state = SandboxState(load_dataset(root))
    state.set_diffs(101, 2, many_diffs(2))
    again = load_dataset(write_dataset(state.snapshot(), tmp_path / "again"))
    assert again.diffs[101] == [*tiny_dataset.diffs[101], {"noteable_iid": 2, "diffs": many_diffs(2)}]


@pytest.mark.parametrize(("line", "problem"), [
    ({"noteable_iid": 7, "diffs": []}, "noteable_iid 7 is not a merge request of this project"),
    ({"noteable_iid": 1, "diffs": []}, "repeats noteable_iid 1"),
    ({"noteable_iid": "2", "diffs": []}, "needs an integer noteable_iid and a diffs list"),
    ({"noteable_iid": 2}, "needs an integer noteable_iid and a diffs list"),
])
def test_bad_diff_lines_name_file_and_line(tiny_dataset: Dataset, tmp_path: Path, line: Any, problem: str) -> None:
    root = write_dataset(tiny_dataset, tmp_path / "ds")
    path = root / "projects" / "101" / "merge_request_diffs.jsonl"
    path.write_text(path.read_text() + "\n" + json.dumps(line) + "\n")  # the blank line still counts
    with pytest.raises(DatasetError) as caught:
        load_dataset(root)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:3: ") and problem in message


def test_in_memory_dataset_with_diffs_for_an_unknown_mr_is_refused(tiny_dataset: Dataset) -> None:
    data = tiny_dataset
    data.diffs[102] = [{"noteable_iid": 5, "diffs": []}]
    with pytest.raises(DatasetError, match="noteable_iid 5 is not a merge request"):
        SandboxState(data)


# -- consistency of the shipped data -----------------------------------------------------------


def hunk_lines(diff: str) -> tuple[set[int], set[int]]:
    """(old line numbers, new line numbers) the hunks of a unified diff show."""
    old: set[int] = set()
    new: set[int] = set()
    o = n = 0
    for text in diff.split("\n"):
        match = HUNK.match(text)
        if match:
            o, n = int(match.group(1)), int(match.group(3))
        elif text.startswith("-") and not text.startswith("---"):
            old.add(o)
            o += 1
        elif text.startswith("+") and not text.startswith("+++"):
            new.add(n)
            n += 1
        elif text.startswith(" "):
            old.add(o)
            new.add(n)
            o += 1
            n += 1
    return old, new


def diff_note_problems(data: Dataset, check_lines: bool) -> list[str]:
    """Every DiffNote's file (and line, when asked) must be in its MR's diffs."""
    problems = []
    for pid, entries in data.discussions.items():
        by_iid = {e["noteable_iid"]: e["diffs"] for e in data.diffs.get(pid, ())}
        for entry in entries:
            if entry["noteable_type"] != "MergeRequest":
                continue
            files = by_iid.get(entry["noteable_iid"], [])
            for thread in entry["discussions"]:
                for note in thread["notes"]:
                    pos = note.get("position")
                    if note.get("type") != "DiffNote" or not pos:
                        continue
                    where = f"{pid}!{entry['noteable_iid']} note {note['id']}"
                    match = [f for f in files if f["new_path"] == pos["new_path"] and f["old_path"] == pos["old_path"]]
                    if not match:
                        problems.append(f"{where}: {pos['old_path']} -> {pos['new_path']} not in the diffs")
                        continue
                    if check_lines:
                        old, new = hunk_lines(match[0]["diff"])
                        if pos.get("new_line") is not None and pos["new_line"] not in new:
                            problems.append(f"{where}: new line {pos['new_line']} not in the hunks")
                        elif pos.get("new_line") is None and pos.get("old_line") not in old:
                            problems.append(f"{where}: old line {pos['old_line']} not in the hunks")
    return problems


def well_formed(f: dict[str, Any]) -> bool:
    old, new = hunk_lines(f["diff"])
    flags_agree = (f["renamed_file"] == (f["old_path"] != f["new_path"])
                   and (f["a_mode"] == "0") == f["new_file"] and (f["b_mode"] == "0") == f["deleted_file"])
    content_agrees = (not f["new_file"] or not old) and (not f["deleted_file"] or not new)
    return set(f) >= DIFF_KEYS and flags_agree and content_agrees and (f["diff"] == "" or f["diff"].startswith("@@"))


@pytest.fixture(scope="module")
def sample() -> Dataset:
    return load_dataset(SAMPLE_DATASET)


def test_sample_diff_notes_sit_in_their_merge_requests_diffs(sample: Dataset) -> None:
    assert diff_note_problems(sample, check_lines=True) == []


def test_sample_diffs_are_well_formed_and_counted(sample: Dataset) -> None:
    for pid, mrs in sample.merge_requests.items():
        by_iid = {e["noteable_iid"]: e["diffs"] for e in sample.diffs[pid]}
        assert set(by_iid) == {m["iid"] for m in mrs}, pid  # every sample MR changed something
        for mr in mrs:
            files = by_iid[mr["iid"]]
            assert mr["changes_count"] == str(len(files)), (pid, mr["iid"])
            assert len({f["new_path"] for f in files}) == len(files), (pid, mr["iid"])
            assert all(well_formed(f) for f in files), (pid, mr["iid"])
    flags = [f for e in sample.diffs[101] + sample.diffs[102] for f in e["diffs"]]
    assert sum(f["new_file"] for f in flags) >= 3 and sum(f["deleted_file"] for f in flags) >= 3
    assert sum(f["renamed_file"] for f in flags) >= 2


def test_sample_jwt_module_has_a_rename_in_its_history(sample: Dataset) -> None:
    mrs = {m["iid"]: m for m in sample.merge_requests[101]}
    touching = {e["noteable_iid"]: f for e in sample.diffs[101] for f in e["diffs"]
                if "services/auth/jwt.py" in (f["new_path"], f["old_path"])}
    renames = [iid for iid, f in touching.items() if f["renamed_file"]]
    assert len(renames) == 1
    rename = touching[renames[0]]
    assert (rename["old_path"], rename["new_path"]) == ("services/auth/tokens.py", "services/auth/jwt.py")
    assert 847 in touching and not touching[847]["new_file"]
    assert mrs[renames[0]]["created_at"] < mrs[847]["created_at"]


def test_sample_847_closes_the_redesign_issue(sample: Dataset) -> None:
    mr = next(m for m in sample.merge_requests[101] if m["iid"] == 847)
    assert "234" in CLOSING.findall(mr["description"])
    assert mr["description"].startswith("Implements the token model decided in the authentication redesign (#234)")


def test_generated_diffs_cover_every_diff_note(tmp_path: Path) -> None:
    generate_dataset(tmp_path / "a", projects=2, issues=20, mrs=60, seed=3)
    data = load_dataset(tmp_path / "a")
    assert diff_note_problems(data, check_lines=True) == []
    files = [f for entries in data.diffs.values() for e in entries for f in e["diffs"]]
    assert all(well_formed(f) for f in files)
    assert all(sum(e["diffs"] != [] for e in data.diffs[pid]) > 0 for pid in data.diffs)
    assert min(sum(f[flag] for f in files) for flag in ("new_file", "renamed_file", "deleted_file")) > 0
    for pid, entries in data.diffs.items():
        counts = {e["noteable_iid"]: len(e["diffs"]) for e in entries}
        for mr in data.merge_requests[pid]:
            assert counts.get(mr["iid"], 0) == int(mr.get("changes_count") or 0)
    generate_dataset(tmp_path / "b", projects=2, issues=20, mrs=60, seed=3)
    for pid in data.diffs:
        name = f"projects/{pid}/merge_request_diffs.jsonl"
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()

"""MR file lists over real sockets: `/diffs` pages, the `/changes` fallback of GitLabs before
15.7, GitLab's documented payload, the sync's call bound with the file-list calls counted, and
the graph layer's `mr_files` rows."""

import json
import math
from pathlib import Path

from gitlab_knowledge_sandbox import SAMPLE_DATASET, SandboxGitLab
from gitlab_knowledge_tests.helpers import rows, scalar, sync, sync_all

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gitlab-api" / "merge_requests"


def file_lists(config) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    for iid, old, new, added, renamed, deleted in rows(config, """
        SELECT m.iid, f.old_path, f.new_path, f.new_file, f.renamed_file, f.deleted_file
        FROM mr_files f JOIN merge_requests m ON m.id = f.merge_request_id ORDER BY m.iid, f.position"""):
        out.setdefault(iid, []).append((old, new, added, renamed, deleted))
    return out


def expected_lists(sb: SandboxGitLab) -> dict[int, list[tuple]]:
    out = {}
    for project in sb.state.list_projects():
        for mr in sb.state.list_items(project["id"], "merge_requests"):
            diffs = sb.state.diffs(project["id"], mr["iid"])
            if diffs:
                out[mr["iid"]] = [(d["old_path"], d["new_path"], d["new_file"], d["renamed_file"], d["deleted_file"])
                                  for d in diffs]
    return out


def test_the_sync_stays_within_its_call_bound_with_file_lists(make_config):
    """calls ≤ 1 (project) + 1 (/user, once an hour) + list pages (releases included) + changed parents (each one's
    threads, commented or not: GitLab writes links as system notes) + changed MRs × their diff
    pages + one look-up per distinct project path links name that no synced project has + 1 (the
    wiki listing) per project; here
    every call is needed, so the bound is met exactly. The items nobody commented on are the
    extra calls of fetching every parent's threads; the look-ups are cached (none the next time)."""
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        config = make_config(sb, per_page=20)
        results = sync_all(config)
        by_route = sb.stats()["by_route"]
        parents = sum(len(sb.state.list_items(p["id"], kind))
                      for p in sb.state.list_projects() for kind in ("issues", "merge_requests"))
        uncommented = sum(
            1 for p in sb.state.list_projects() for kind in ("issues", "merge_requests")
            for it in sb.state.list_items(p["id"], kind)
            if not any(not n.get("system") for t in sb.state.discussions(p["id"], kind, it["iid"]) for n in t["notes"]))
        diff_pages = sum(max(1, math.ceil(len(sb.state.diffs(p["id"], mr["iid"])) / 20))
                         for p in sb.state.list_projects() for mr in sb.state.list_items(p["id"], "merge_requests"))
        expected = expected_lists(sb)
        again = sync_all(config)
    calls = sum(s.api_calls for s in results.values())
    # The listings: issues, MRs, and releases (listed whole each sync: one page a project here).
    list_pages = by_route["issues"] + by_route["merge_requests"] + by_route["releases"]
    projects = len(config.projects)
    lookups = sum(s.path_lookups for s in results.values())
    assert lookups == 2  # acme/webapp (renamed acme/web-app) and acme/marketing-site (a 404)
    # The wiki listing: one call per project, turned-off wiki or not (docs/gitlab-api-wikis.md).
    assert by_route.get("wikis") == projects
    bound = projects + 1 + list_pages + parents + diff_pages + lookups + projects
    assert calls <= bound, (calls, bound, by_route)
    # What links of uncommented items cost on the sample: one call for each such item.
    assert sum(s.threads_fetched for s in results.values()) == parents
    assert uncommented == 8
    assert sum(s.path_lookups for s in again.values()) == 0
    assert by_route["merge_request_diffs"] == diff_pages == sum(s.file_calls for s in results.values())
    assert by_route.get("user") == 1  # recorded once, not once per project
    assert any(len(v) > 20 for v in expected.values()), "an MR must need several pages for this to mean anything"
    assert file_lists(config) == expected
    # The diff text is not stored: paths and flags only.
    assert scalar(config, "SELECT count(*) FROM raw_payloads WHERE resource_type = 'merge_request_diffs' "
                          "AND json LIKE '%\"diff\":%'") == 0
    assert sum(s.files_fetched + s.file_calls for s in again.values()) == 0


def test_a_gitlab_before_15_7_is_read_through_changes(make_config):
    with SandboxGitLab(dataset=SAMPLE_DATASET, legacy_diffs=True) as sb:
        config = make_config(sb)
        sync_all(config)
        by_route = sb.stats()["by_route"]
        expected = expected_lists(sb)
        mrs = sum(len(sb.state.list_items(p["id"], "merge_requests")) for p in sb.state.list_projects())
    assert file_lists(config) == expected
    # One /diffs 404 per project sync switches it to /changes for the rest of the run.
    assert by_route["merge_request_diffs"] == len(config.projects)
    assert by_route["merge_request_changes"] == mrs


def test_gitlabs_documented_diffs_payload_is_stored_as_served(make_config):
    documented = json.loads((FIXTURE / "merge_request_diffs_list.json").read_text())
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        project = sb.state.list_projects()[0]
        mr = sb.state.list_items(project["id"], "merge_requests")[0]
        sb.state.set_diffs(project["id"], mr["iid"], documented)
        config = make_config(sb)
        sync(config, project["path_with_namespace"])
    stored = rows(config, "SELECT json FROM raw_payloads WHERE resource_type = 'merge_request_diffs' "
                          "AND gitlab_key = ?", [str(mr["id"])])
    assert json.loads(stored[0][0]) == [{k: v for k, v in d.items() if k != "diff"} for d in documented]
    assert file_lists(config)[mr["iid"]] == [("README", "README", False, False, False),
                                            ("VERSION", "VERSION", False, False, False)]


def test_a_new_diff_version_replaces_the_file_list_and_a_deleted_mr_takes_it_along(make_config):
    with SandboxGitLab(dataset=SAMPLE_DATASET) as sb:
        project = sb.state.list_projects()[0]
        path = project["path_with_namespace"]
        first, second = sb.state.list_items(project["id"], "merge_requests")[:2]
        config = make_config(sb)
        sync(config, path)
        sb.clock.advance(120)
        sb.state.set_diffs(project["id"], first["iid"], [
            {"old_path": "a.py", "new_path": "b.py", "a_mode": "100644", "b_mode": "100644", "diff": "",
             "new_file": False, "renamed_file": True, "deleted_file": False}])
        sb.state.delete(project["id"], "merge_requests", second["iid"])
        sync(config, path, full=True)
    lists = file_lists(config)
    assert lists[first["iid"]] == [("a.py", "b.py", False, True, False)]
    assert second["iid"] not in lists
    assert scalar(config, "SELECT count(*) FROM raw_payloads WHERE resource_type = 'merge_request_diffs' "
                          "AND parent_id = ? AND deleted_at IS NULL", [second["id"]]) == 0

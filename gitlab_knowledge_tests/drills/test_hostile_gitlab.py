"""A hostile GitLab: a real proxy on 127.0.0.1 in front of the sandbox answers 404/410/403 on single
endpoints, sends `Link` headers that loop or lead to a 404, strips the pagination headers of a
listing, empties a page it announced, and sends bodies too large to hold and gzip bombs. Each
hostile `sync --full` either fails with one line naming what went wrong or succeeds, and never
removes anything: the store stays equal to a clean sync. Then an honest GitLab again, and the
next sync completes with the same store. Only the item's own 404 is evidence enough to remove it:
that item goes, and the next full sync of an honest GitLab brings it back."""

from pathlib import Path

import pytest

from gitlab_knowledge.errors import GitLabError
from gitlab_knowledge.gitlab import client as client_module
from gitlab_knowledge.sync import engine
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.helpers import scalar, snapshot, sync
from gitlab_knowledge_tests.support.hostile_proxy import HostileProxy, Rule

PER_PAGE = 3  # small pages: listings and threads paginate


@pytest.fixture(scope="module")
def hostile_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hostile")
    generate_dataset(out, projects=1, issues=10, mrs=5, seed=21, threads_per_parent_mean=3.0)
    return out


def targets(sb: SandboxGitLab) -> tuple[str, int, int]:
    """(project path, an issue with more threads than a page holds, an MR with threads)."""
    project = sb.state.list_projects()[0]
    pid = project["id"]
    issues = [i["iid"] for i in sb.state.list_items(pid, "issues")
              if len(sb.state.discussions(pid, "issues", i["iid"])) > PER_PAGE]
    mrs = [m["iid"] for m in sb.state.list_items(pid, "merge_requests")
           if sb.state.discussions(pid, "merge_requests", m["iid"])]
    assert issues and mrs
    return project["path_with_namespace"], issues[0], mrs[0]


def scenarios(issue: int, mr: int) -> dict[str, tuple[list[Rule], str]]:
    """name -> (rules, words the failure must contain)."""
    threads, mr_threads = rf"/issues/{issue}/discussions$", rf"/merge_requests/{mr}/discussions$"
    return {
        "404 on one issue's threads": ([Rule(threads, "status", status=404)], "still serves"),
        "410 on one MR's threads": ([Rule(mr_threads, "status", status=410)], "410"),
        "403 on one issue's threads": ([Rule(threads, "status", status=403)], "403"),
        "next link to a 404": ([Rule(threads, "link_404")], "still serves"),
        "next link back to itself": ([Rule(threads, "link_loop")], "pagination loop"),
        "listing without paging headers": ([Rule(r"/projects/\d+/issues$", "strip_paging")], "last page"),
        "threads without paging headers": ([Rule(threads, "strip_paging")], "last page"),
        "announced page sent empty": ([Rule(r"/projects/\d+/merge_requests$", "empty")], "last page"),
        "endless body": ([Rule(threads, "huge", size=8 * 2**20)], "larger than"),
        "gzip bomb": ([Rule(mr_threads, "gzip_bomb", size=8 * 2**20)], "larger than"),
    }


def test_a_hostile_gitlab_never_makes_a_sync_remove_anything(hostile_dataset, make_config, tmp_path, monkeypatch):
    monkeypatch.setattr(client_module, "MAX_BODY_BYTES", 2**20)  # the drill's bodies stay small
    with SandboxGitLab(dataset=hostile_dataset) as sb, HostileProxy(sb.url) as proxy:
        project, issue, mr = targets(sb)
        reference = make_config(sb, data_dir=tmp_path / "reference", per_page=PER_PAGE)
        sync(reference, project, full=True)
        clean = snapshot(reference)
        victim = make_config(sb, data_dir=tmp_path / "victim", per_page=PER_PAGE, url=proxy.url, max_retries=1)
        sync(victim, project)
        assert snapshot(victim) == clean
        outcomes = {}
        for name, (rules, words) in scenarios(issue, mr).items():
            proxy.add(*rules)
            try:
                # The raw layer alone (where removals happen): the Dagster job around it costs a
                # second a run, and the honest syncs below run the whole job.
                engine.refresh(Workspace(victim), project, full=True)
                outcomes[name] = "ok"
            except GitLabError as exc:
                message = str(exc)
                assert "\n" not in message and words in message, (name, message)
                outcomes[name] = "failed"
            fired = [r.fired for r in proxy.clear()]
            assert all(fired), (name, fired)  # the hostile answer was given
            assert snapshot(victim)["raw"] == clean["raw"], f"{name}: the store changed"
        assert set(outcomes.values()) == {"failed"}, outcomes
        assert sync(victim, project, full=True).items_deleted == 0  # honest again: it completes
        assert snapshot(victim) == clean

        # Evidence enough: the threads 404 and so does the item's own GET. It goes, and the next
        # full sync of an honest GitLab brings it back.
        proxy.add(Rule(rf"/issues/{issue}/discussions$", "status", status=404),
                  Rule(rf"/issues/{issue}$", "status", status=404))
        assert engine.refresh(Workspace(victim), project, full=True).totals()["deleted"] == 1
        assert scalar(victim, "SELECT count(*) FROM raw_payloads WHERE resource_type = 'issue' "
                              "AND deleted_at IS NOT NULL") == 1
        proxy.clear()
        sync(victim, project, full=True)
        assert sync(victim, project).api_calls > 0
    assert snapshot(victim) == clean
    assert scalar(victim, "SELECT count(*) FROM raw_payloads WHERE deleted_at IS NOT NULL") == 0

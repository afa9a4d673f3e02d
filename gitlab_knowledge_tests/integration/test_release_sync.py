"""Releases through the raw layer against the sandbox GitLab over real sockets: added, edited and
deleted releases reflected by an incremental sync at the stated call cost (docs/gitlab-api-releases.md:
one listing call per 100 releases, a GET only for a release missing from a multi-page listing),
removal on positive evidence only, and a project whose releases are not readable skipped with a line."""

from typing import Any

import pytest

from gitlab_knowledge import kinds
from gitlab_knowledge.progress import NullProgress
from gitlab_knowledge.sync.engine import ProjectSync
from gitlab_knowledge_tests.helpers import rows, sync, workspace


class Lines(NullProgress):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)

    def warning(self, text: str) -> None:
        self.lines.append(text)


def _live(config: Any) -> dict[str, tuple[str, int]]:
    """tag → (description, change_seq) of the stored, live release payloads."""
    return {key.partition(":")[2]: (desc, seq) for key, desc, seq in rows(config, """
        SELECT gitlab_key, json_extract_string(json, '$.description'), change_seq FROM raw_payloads
        WHERE resource_type = ? AND deleted_at IS NULL""", [kinds.RELEASE.name])}


def _release_calls(sb: Any) -> tuple[int, int]:
    by_route = sb.stats()["by_route"]
    return by_route.get("releases", 0), by_route.get("release", 0)


def test_added_edited_and_deleted_releases_cost_one_listing_call_each_sync(tiny_sandbox, make_config):
    sb, config = tiny_sandbox, make_config(tiny_sandbox)
    project = config.projects[0]
    sb.state.create_release(project, "v1.0", description="First release: login page", released_at="2024-01-10T00:00:00Z")
    sb.state.create_release(project, "v1.1", description="Adds #1", released_at="2024-02-10T00:00:00Z")
    sync(config, project)
    first = _live(config)
    assert set(first) == {"v1.0", "v1.1"}

    sb.reset_stats()
    stats = sync(config, project)
    assert _release_calls(sb) == (1, 0)  # the no-op sync: one listing call, nothing written
    assert _live(config) == first and (stats.items_new, stats.items_updated, stats.items_deleted) == (0, 0, 0)

    sb.state.update_release(project, "v1.1", description="Adds #1 and fixes #2")
    sb.state.create_release(project, "v2.0", description="Second release", released_at="2024-03-10T00:00:00Z")
    sb.reset_stats()
    stats = sync(config, project)
    after = _live(config)
    assert _release_calls(sb) == (1, 0)
    assert after["v1.1"][0] == "Adds #1 and fixes #2" and after["v1.1"][1] > first["v1.1"][1]
    assert after["v1.0"] == first["v1.0"]  # unchanged payload, unchanged row
    assert "v2.0" in after and (stats.items_new, stats.items_updated) == (1, 1)

    sb.state.delete_release(project, "v1.0")
    sb.reset_stats()
    stats = sync(config, project)
    assert _release_calls(sb) == (1, 0)  # one complete page lacking it is the evidence
    assert set(_live(config)) == {"v1.1", "v2.0"} and stats.items_deleted == 1


def test_a_release_missing_from_a_multi_page_listing_is_removed_only_on_its_own_404(tiny_sandbox, make_config):
    sb = tiny_sandbox
    config = make_config(sb, per_page=2)
    project = config.projects[0]
    for n in range(5):
        sb.state.create_release(project, f"v{n}", description=f"release {n}", released_at=f"2024-0{n + 1}-01T00:00:00Z")
    sync(config, project)
    sb.reset_stats()
    sync(config, project)
    assert _release_calls(sb) == (3, 0)  # ceil(5 / 2) listing calls, no GET
    sb.state.delete_release(project, "v3")
    sb.reset_stats()
    sync(config, project)
    assert _release_calls(sb) == (2, 1)  # the missing one confirmed by its own GET (404)
    assert set(_live(config)) == {"v0", "v1", "v2", "v4"}


def test_rejected_release_rows_remove_nothing_and_are_named(tiny_sandbox, make_config):
    sb, config = tiny_sandbox, make_config(tiny_sandbox)
    project = config.projects[0]
    sb.state.create_release(project, "v1.0", description="kept")
    ProjectSync(workspace(config), project).run()
    # What a guest's token gets: no tag_name. The stored release stays; the row is named.
    pid = sb.state.project(project).data["id"]
    sb.state._releases[pid] = {"hidden": {**sb.state.release(project, "v1.0"), "tag_name": None}}
    lines = Lines()
    result = ProjectSync(workspace(config), project, progress=lines).run()
    assert set(_live(config)) == {"v1.0"}
    assert result.resources["releases"].rejected == 1
    assert any("skipped release #1 of its page: tag_name is missing" in line for line in lines.lines)
    assert any("releases listing incomplete (1 rejected)" in line for line in lines.lines)


def test_a_project_whose_releases_answer_403_is_skipped_with_one_line(tiny_sandbox, make_config):
    sb, config = tiny_sandbox, make_config(tiny_sandbox)
    project = config.projects[0]
    sb.state.create_release(project, "v1.0", description="stored before access was lost")
    ProjectSync(workspace(config), project).run()
    sb.state.releases_forbidden.add(sb.state.project(project).data["id"])
    lines = Lines()
    result = ProjectSync(workspace(config), project, progress=lines).run()
    said = [line for line in lines.lines if "releases" in line]
    assert said == [f"{project}: releases not readable with this token (403): skipped"]
    assert set(_live(config)) == {"v1.0"}  # a closed door is no evidence of deletion
    assert result.resources["issues"].list_calls >= 1  # the rest of the project synced


def test_the_normalized_layer_holds_each_live_release_once(tiny_sandbox, make_config):
    sb, config = tiny_sandbox, make_config(tiny_sandbox)
    project = config.projects[0]
    sb.state.create_release(project, "v1.0", name="One", description="Fixes #1", released_at="2024-01-10T00:00:00Z",
                            milestones=["M1"])
    sb.state.create_release(project, "v2.0", description="Later", released_at="2030-01-01T00:00:00Z")
    sync(config, project)
    stored = rows(config, "SELECT tag_name, title, description, released_at::VARCHAR, upcoming_release, milestones, "
                          "author_username, web_url, id = raw_payload_id FROM releases ORDER BY tag_name")
    user = sb.state.user["username"]
    assert stored == [
        ("v1.0", "One", "Fixes #1", "2024-01-10 00:00:00", False, ["M1"], user,
         f"https://gitlab.example.com/{project}/-/releases/v1.0", True),
        ("v2.0", "v2.0", "Later", "2030-01-01 00:00:00", True, [], user,
         f"https://gitlab.example.com/{project}/-/releases/v2.0", True),
    ]
    sb.state.delete_release(project, "v2.0")
    sb.state.update_release(project, "v1.0", name="One, renamed")
    sync(config, project)
    assert rows(config, "SELECT tag_name, title FROM releases") == [("v1.0", "One, renamed")]


@pytest.fixture(scope="module")
def provider() -> Any:
    from gitlab_knowledge.embeddings.embedded import EmbeddedProvider

    return EmbeddedProvider()


def test_a_release_added_edited_and_deleted_reaches_every_index(sandbox, synced, provider):
    """Through documents, vectors and the lexical index: one document per release, re-embedded
    when its notes change, gone from all three when GitLab no longer lists it."""
    from gitlab_knowledge.embeddings.vectors import VectorStore
    from gitlab_knowledge.lexical.index import LexicalIndex
    from gitlab_knowledge_tests.helpers import index_all

    config = synced
    project = config.projects[0]

    def entries() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        stored = {r[0]: r[1] for r in rows(config, "SELECT id, content_hash FROM documents WHERE source_type = 'release'")}
        vectors = VectorStore(config.lancedb_dir, "embedded", provider.MODEL).document_state()
        lexical = LexicalIndex(config.tantivy_dir).state()
        return (stored, {k: v[0] for k, v in vectors.items() if k.startswith("release:")},
                {k: v[0] for k, v in lexical.items() if k.startswith("release:")})

    sandbox.state.create_release(project, "v7.0.0", name="Quokka", description="Ships the zebrafish exporter (#1)",
                                 released_at="2024-05-01T00:00:00Z")
    sync(config, project)
    result = index_all(config, provider)[project]
    stored, vectors, lexical = entries()
    assert len(stored) == 1 and stored == vectors == lexical and result["embeddings"].embedded == 1
    [text] = [r[0] for r in rows(config, "SELECT content_text FROM documents WHERE source_type = 'release'")]
    assert text.startswith(f"Release v7.0.0: Quokka\nShipped 2024-05-01 as {project} v7.0.0")

    sandbox.state.update_release(project, "v7.0.0", description="Ships the zebrafish exporter and importer (#1)")
    sync(config, project)
    result = index_all(config, provider)[project]
    after = entries()
    assert result["documents"].content_changed == 1 and result["embeddings"].embedded == 1
    assert after[0] == after[1] == after[2] != stored

    sandbox.state.delete_release(project, "v7.0.0")
    sync(config, project)
    result = index_all(config, provider)[project]
    assert entries() == ({}, {}, {})
    assert result["documents"].deleted == result["embeddings"].deleted == result["lexical"].deleted == 1

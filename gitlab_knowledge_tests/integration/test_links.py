"""Every link GitLab records, found once: the system notes of items nobody commented on reach the
store and the graph, links carry their type (duplicate, blocking, moved), and a link written with
a renamed project's old path resolves to the synced project. The bundled sample, synced once for
the session (conftest `sample`), holds each shape on an uncommented item."""

import re
from pathlib import Path
from typing import Any

import jsonschema

from gitlab_knowledge.graph.queries import related
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_sandbox import SAMPLE_DATASET
from gitlab_knowledge_sandbox.dataset import load_dataset
from gitlab_knowledge_tests.helpers import rows, scalar

README = Path(__file__).resolve().parents[2] / "README.md"
SCHEMA = Path(__file__).resolve().parents[2] / "gitlab_knowledge" / "cli" / "schemas" / "related.json"


def dataset_threads() -> tuple[int, int]:
    """(threads, system notes) in the sample as GitLab serves them."""
    data = load_dataset(SAMPLE_DATASET)
    threads = system = 0
    for entries in data.discussions.values():
        for entry in entries:
            for thread in entry["discussions"]:
                threads += 1
                system += sum(1 for n in thread["notes"] if n.get("system"))
    return threads, system


def links(sample: Any, ref: str) -> dict[str, list[str]]:
    answer = related(Workspace(sample.config), ref).as_dict()
    jsonschema.validate(answer, __import__("json").loads(SCHEMA.read_text()))
    return {group: [link["reference"] for link in found] for group, found in answer["links"].items() if found}


def test_every_thread_and_system_note_gitlab_serves_is_stored(sample: Any) -> None:
    """Items without user notes had their threads skipped: their system notes ("closed via merge
    request !818", "approved this merge request") never reached the store."""
    threads, system = dataset_threads()
    assert scalar(sample.config, "SELECT count(*) FROM system_notes") == system
    stored = scalar(sample.config, "SELECT count(*) FROM raw_payloads WHERE resource_type = 'discussion' "
                                   "AND deleted_at IS NULL")
    assert stored == threads
    # The README's figure for the sample is what the store holds.
    said = re.search(r"serving the bundled sample \(two projects, \d+ issues and MRs, (\d+) threads\)",
                     README.read_text())
    assert said is not None and int(said.group(1)) == threads
    uncommented = rows(sample.config, """
        SELECT s.body FROM system_notes s JOIN issues i ON s.noteable_type = 'Issue' AND i.id = s.noteable_id
        WHERE i.iid = 207 AND i.project_id = 101 ORDER BY s.created_at, s.id""")
    assert ("closed via merge request !818",) in uncommented


def test_an_uncommented_issue_keeps_links_only_its_system_notes_hold(sample: Any) -> None:
    """#258 and #259 of acme/platform have no user notes: their blocking link is written only in
    their system notes. #258 was related to #259, then the relation was removed, then made blocking."""
    assert links(sample, "acme/platform#258") == {"blocks": ["acme/platform#259"]}
    assert links(sample, "acme/platform#259") == {"blocked_by": ["acme/platform#258"]}


def test_duplicates_and_moves_are_typed(sample: Any) -> None:
    assert links(sample, "acme/web-app#89") == {"duplicate_of": ["acme/web-app#49"]}
    assert links(sample, "acme/web-app#49").get("duplicated_by") == ["acme/web-app#89"]
    moved = related(Workspace(sample.config), "acme/web-app#59").as_dict()["links"]["moved_to"]
    assert [(m["reference"], m["external"], m["in_store"]) for m in moved] == [
        ("acme/marketing-site#12", True, False)]


def test_a_link_written_with_an_old_project_path_targets_the_synced_project(sample: Any) -> None:
    """!818's system note says "mentioned in merge request webapp!128", written before acme/webapp
    was renamed acme/web-app: GitLab redirects the old path, so the link is to acme/web-app!128."""
    # (and in the notes of the release that shipped it)
    assert links(sample, "acme/platform!818").get("mentioned_in") == ["acme/platform release:v2024.2.0",
                                                                       "acme/web-app!128"]
    assert "acme/platform!818" in links(sample, "acme/web-app!128")["mentions"]
    assert scalar(sample.config, "SELECT count(*) FROM item_references WHERE external AND "
                                 "lower(target_path) = 'acme/webapp'") == 0
    # One look-up per distinct unknown path, its answer kept (a 404 too).
    assert rows(sample.config, "SELECT path, project_id, path_with_namespace FROM project_aliases ORDER BY path") == [
        ("acme/marketing-site", None, None), ("acme/webapp", 102, "acme/web-app")]

"""The Viewer record's two questions, as GitLab answers them (gitlab_knowledge/viewer.py)."""

from gitlab_knowledge.viewer import DEVELOPER, GUEST, NO_ACCESS, PLANNER, REPORTER, Viewer


def test_a_project_is_read_when_it_is_in_the_access_map_or_by_an_admin() -> None:
    guest = Viewer(1, "g", access={1: GUEST, 2: NO_ACCESS})
    assert guest.reads(1) and guest.reads(2) and not guest.reads(3)
    assert Viewer(2, "root", is_admin=True).reads(3)
    assert not Viewer(3, "nobody").reads(1)


def test_confidential_things_need_planner_access_or_admin() -> None:
    viewer = Viewer(1, "u", access={1: GUEST, 2: PLANNER, 3: REPORTER, 4: DEVELOPER, 5: NO_ACCESS})
    assert [viewer.sees_confidential(p) for p in (1, 2, 3, 4, 5, 6)] == [False, True, True, True, False, False]
    assert Viewer(2, "root", is_admin=True).sees_confidential(6)


def test_a_private_projects_merge_requests_need_planner_access() -> None:
    """GitLab's permissions table: Guests view merge requests of public and internal projects only
    (external users: of public ones); the Planner role reads a private project's; a non-member reads
    them wherever they read the project. An unknown visibility is taken as private (fail closed)."""
    viewer = Viewer(1, "u", access={1: GUEST, 2: PLANNER, 3: REPORTER, 4: GUEST, 5: GUEST, 6: NO_ACCESS, 7: GUEST},
                    visibility={1: "private", 2: "private", 3: "private", 4: "internal", 5: "public", 6: "public"})
    assert [viewer.sees_merge_requests(p) for p in range(1, 9)] == [False, True, True, True, True, True, False, False]
    external = Viewer(2, "x", external=True, access={4: GUEST, 5: GUEST}, visibility={4: "internal", 5: "public"})
    assert not external.sees_merge_requests(4) and external.sees_merge_requests(5)
    assert Viewer(3, "root", is_admin=True).sees_merge_requests(1)

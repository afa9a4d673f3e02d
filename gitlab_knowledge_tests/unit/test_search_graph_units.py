"""Graph filters (`--path`, `--participant`) as typed, and as the retrievers receive them."""

import pytest

from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.search.semantic import where_clause


@pytest.mark.parametrize("typed,path", [
    ("services/auth", "services/auth"), ("services/auth/", "services/auth"), ("./services/auth/jwt.py",
                                                                               "services/auth/jwt.py"),
    ("/services/auth", "services/auth"), ("  services/auth  ", "services/auth"), ("././a.py", "a.py"),
])
def test_paths_are_read_as_gitlab_writes_them(typed, path):
    assert Filters.build(path=typed).path == path


@pytest.mark.parametrize("typed", ["", " ", "/", "./", ".", "//"])
def test_a_path_with_nothing_in_it_is_refused(typed):
    with pytest.raises(UsageError, match="^--path expects"):
        Filters.build(path=typed)


def test_a_participant_is_a_username_with_or_without_its_at():
    assert Filters.build(participant="@janedoe").participant == "janedoe"
    assert Filters.build(participant=" janedoe ").participant == "janedoe"
    with pytest.raises(UsageError, match="^--participant expects a value"):
        Filters.build(participant="@")


def test_graph_filters_are_described_and_pushed_down_as_ids():
    built = Filters.build(path="services/auth", participant="janedoe", types=["mr"])
    assert built.describe()["path"] == "services/auth" and built.describe()["participant"] == "janedoe"
    assert built.graph() and not built.is_empty()
    with pytest.raises(AssertionError, match="unresolved"):
        where_clause(built)
    ids = built.resolved(frozenset({"merge_request:2", "merge_request:1"}))
    assert where_clause(ids) == "source_type IN ('merge_request') AND doc_id IN ('merge_request:1', 'merge_request:2')"
    assert where_clause(built.resolved(frozenset())) == "source_type IN ('merge_request') AND false"
    assert where_clause(built.resolved(frozenset({"issue:1"}), complement=True)) == \
        "source_type IN ('merge_request') AND NOT doc_id IN ('issue:1')"
    # The resolution is no part of what was asked: describe() and equality of what was typed hold.
    assert ids.describe() == built.describe()

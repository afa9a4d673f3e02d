"""Property: whatever a user types — any query text, any filter values — search answers with
results that satisfy the filters, or with a clean UsageError. Never a crash, never a traceback."""

import json
from datetime import date

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitlab_knowledge.errors import UsageError
from gitlab_knowledge.search.engine import Searcher
from gitlab_knowledge.search.filters import Filters
from gitlab_knowledge.search.output import render_human, response_json
from gitlab_knowledge.workspace import Workspace
from gitlab_knowledge_tests.conftest import REPO

SCHEMA = json.loads((REPO / "gitlab_knowledge" / "search" / "schema.json").read_text())
WORDS = ["redis", "auth", "#234", "!847", "src/auth/login.ts", "AUTH_TOKEN_TTL", "AND(", "OR", "\"", "'", "*", ":",
         "field:value", "🔥", "\\", "\x00", "-", "~2", "^3", "()", "[]", "{}", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "日本語", "ß", "NOT"]
queries = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).map(lambda s: s * 50),
)
date_text = st.one_of(st.dates(min_value=date(1970, 1, 1), max_value=date(2100, 1, 1)).map(str), st.text(max_size=12))
filters = st.fixed_dictionaries({}, optional={
    "types": st.lists(st.sampled_from(["issue", "mr", "discussion", "Issue", "MRS", "epic", ""]), max_size=3),
    "author": st.one_of(st.sampled_from(["johndoe", "@janedoe", "nobody", "o'brien"]), st.text(max_size=20)),
    "labels": st.lists(st.one_of(st.sampled_from(["auth", "security", "bug"]), st.text(max_size=15)), max_size=3),
    "after": date_text,
    "before": date_text,
    "project": st.one_of(st.sampled_from(["acme/platform", "acme/web-app", "no/such"]), st.text(max_size=20)),
    "state": st.one_of(st.sampled_from(["opened", "closed", "merged"]), st.text(max_size=10)),
    "exclude_confidential": st.booleans(),
    "exclude_internal": st.booleans(),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=queries, filter_values=filters, mode=st.sampled_from(["hybrid", "lexical", "semantic"]))
def test_any_query_and_filters_answer_or_fail_cleanly(sample, query, filter_values, mode):
    searcher = _searcher(sample)
    try:
        built = Filters.build(**filter_values)
        response = searcher.search(query, built, mode, 10)
    except UsageError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    jsonschema.validate(response_json(response), SCHEMA)
    render_human(response, color=False)
    for result in response.results:
        fields = result.fields
        if built.types:
            assert fields["source_type"] in built.types
        if built.project:
            assert fields["project"] == built.project
        if built.author:
            assert fields["author"] == built.author
        assert set(built.labels) <= set(fields["labels"])
        if built.exclude_confidential:
            assert not fields["confidential"]


_cache: dict[int, Searcher] = {}


def _searcher(sample) -> Searcher:
    # One warm searcher for every example (hypothesis calls the test body many times).
    return _cache.setdefault(id(sample), Workspace(sample.config).searcher(warm=True))

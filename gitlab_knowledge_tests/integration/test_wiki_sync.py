"""Wiki pages through the raw and normalized layers against the sandbox GitLab: the bundled
sample's wiki, a page added, edited, renamed and deleted between incremental syncs within the
stated call cost (docs/gitlab-api-wikis.md: one listing call per project and sync), and a wiki that
is turned off skipped with one line."""

import pytest

from gitlab_knowledge.config import parse_config
from gitlab_knowledge_sandbox import SandboxGitLab
from gitlab_knowledge_sandbox.dataset import load_dataset
from gitlab_knowledge_sandbox.server import SAMPLE_DATASET
from gitlab_knowledge_tests.helpers import rows, scalar, sync

PLATFORM = "acme/platform"


@pytest.fixture
def sample_gitlab():
    with SandboxGitLab(dataset=load_dataset(SAMPLE_DATASET)) as sb:
        yield sb


@pytest.fixture
def config(sample_gitlab, tmp_path, token_env):
    doc = {"gitlab": {"url": sample_gitlab.url, "rate_limit": 0}, "projects": [PLATFORM, "acme/web-app"],
           "storage": {"data_dir": str(tmp_path / "data")}}
    return parse_config(doc, tmp_path, {}, "test")


def _pages(config) -> dict[str, tuple[str, str]]:
    return {slug: (title, content) for slug, title, content in rows(
        config, "SELECT slug, title, content FROM wiki_pages p JOIN projects j ON j.id = p.project_id "
                "WHERE j.path_with_namespace = ?", [PLATFORM])}


def _wiki_calls(sb) -> int:
    by_route = sb.stats()["by_route"]
    return by_route.get("wikis", 0) + by_route.get("wiki_page", 0)


def test_the_sample_wiki_is_synced_with_formats_and_nested_slugs(sample_gitlab, config):
    sync(config, PLATFORM)
    pages = _pages(config)
    served = {p["slug"]: p for p in sample_gitlab.state.wiki_pages(PLATFORM, with_content=True)}
    assert set(pages) == set(served) and "runbooks/postgresql-failover" in pages
    assert {f for (f,) in rows(config, "SELECT DISTINCT format FROM wiki_pages")} >= {"markdown", "asciidoc", "org"}
    url = scalar(config, "SELECT web_url FROM wiki_pages WHERE slug = 'runbooks/postgresql-failover'")
    assert url == "https://gitlab.example.com/acme/platform/-/wikis/runbooks/postgresql-failover"
    assert scalar(config, "SELECT count(*) FROM raw_payloads WHERE resource_type = 'wiki_page'") == len(served)


def test_a_disabled_wiki_is_skipped_with_one_line(sample_gitlab, config, caplog):
    messages: list[str] = []
    from gitlab_knowledge.progress import NullProgress

    class Said(NullProgress):
        def message(self, text: str) -> None:
            messages.append(text)

    stats = sync(config, "acme/web-app", workspace_kwargs={"progress": Said()})
    assert stats.items_rejected == 0
    said = [m for m in messages if "wiki" in m]
    assert len(said) == 1 and said[0].startswith("acme/web-app: no wiki (GitLab answered 404"), messages
    assert scalar(config, "SELECT count(*) FROM wiki_pages") == 0


def test_added_edited_renamed_and_deleted_pages_within_one_call_each_sync(sample_gitlab, config):
    state = sample_gitlab.state
    sync(config, PLATFORM)
    before = _pages(config)

    # A no-op sync: one wiki call, nothing written.
    sample_gitlab.reset_stats()
    assert sync(config, PLATFORM).items_new == 0
    assert _wiki_calls(sample_gitlab) == 1 and _pages(config) == before

    state.add_wiki_page(PLATFORM, "runbooks/redis-eviction", "# Redis eviction\nWe use allkeys-lru.")
    sample_gitlab.reset_stats()
    sync(config, PLATFORM)
    assert _pages(config)["runbooks/redis-eviction"][1].startswith("# Redis eviction")
    assert _wiki_calls(sample_gitlab) == 1

    state.edit_wiki_page(PLATFORM, "runbooks/redis-eviction", content="# Redis eviction\nWe use volatile-lru now.")
    sample_gitlab.reset_stats()
    stats = sync(config, PLATFORM)
    assert "volatile-lru" in _pages(config)["runbooks/redis-eviction"][1]
    assert _wiki_calls(sample_gitlab) == 1 and stats.items_updated == 1
    page_id = scalar(config, "SELECT id FROM wiki_pages WHERE slug = 'runbooks/redis-eviction'")

    state.edit_wiki_page(PLATFORM, "runbooks/redis-eviction", title="runbooks/redis-memory")
    sample_gitlab.reset_stats()
    sync(config, PLATFORM)
    pages = _pages(config)
    assert "runbooks/redis-eviction" not in pages and "volatile-lru" in pages["runbooks/redis-memory"][1]
    assert _wiki_calls(sample_gitlab) == 1
    assert scalar(config, "SELECT count(*) FROM wiki_pages WHERE id = ?", [page_id]) == 0

    state.delete_wiki_page(PLATFORM, "runbooks/redis-memory")
    sample_gitlab.reset_stats()
    stats = sync(config, PLATFORM)
    assert _pages(config) == before and stats.items_deleted == 1
    assert _wiki_calls(sample_gitlab) == 1


def test_a_wiki_turned_off_keeps_its_pages(sample_gitlab, config):
    """A 404 is no evidence that a page is gone: only a complete listing that lacks it is."""
    sync(config, PLATFORM)
    before = _pages(config)
    sample_gitlab.state.set_wiki_enabled(PLATFORM, False)
    sync(config, PLATFORM)
    assert _pages(config) == before

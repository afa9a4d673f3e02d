"""GitLab REST v4 client: auth, pagination, rate limiting, retries."""

from gitlab_knowledge.gitlab.client import ClientStats, GitLabClient
from gitlab_knowledge.gitlab.paging import Page

__all__ = ["ClientStats", "GitLabClient", "Page"]

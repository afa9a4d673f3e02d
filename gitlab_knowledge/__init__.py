"""gitlab_knowledge: sync a GitLab into a local store and search it by meaning and by keyword."""

__version__ = "0.1.0"

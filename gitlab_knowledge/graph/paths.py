"""Repository paths as users type them and as GitLab stores them."""


def repo_path(text: str) -> str | None:
    """A repository path as GitLab writes it: no leading `./` or `/`, no trailing `/` (a directory
    is matched as a prefix either way). None when nothing is left."""
    path = text.strip()
    while path.startswith("./"):
        path = path[2:]
    path = path.strip("/")
    return path if path and path != "." else None

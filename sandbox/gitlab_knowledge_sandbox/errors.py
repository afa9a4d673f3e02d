"""Errors the in-memory GitLab raises; the server turns them into GitLab's status and body."""

from typing import Any


class SandboxError(Exception):
    status = 500

    def __init__(self, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.body: dict[str, Any] = body if body is not None else {"message": message}


class NotFound(SandboxError):
    status = 404


class BadRequest(SandboxError):
    status = 400


class Forbidden(SandboxError):
    status = 403


def missing(attribute: str) -> BadRequest:
    """GitLab's wording for a required attribute left out (rest/errors.json)."""
    return BadRequest(f'400 (Bad request) "{attribute}" not given')

"""Coercion of request parameters, which arrive as JSON values or form/query strings."""

from typing import Any

_TRUE = {"true", "1", "yes", "on", "t"}


def as_bool(value: Any) -> bool:
    """GitLab treats null like false; form bodies send booleans as strings."""
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    if isinstance(value, (int, float)):
        return value != 0
    return str(value).strip().lower() in _TRUE


def as_labels(value: Any) -> list[str]:
    """Labels as a comma-separated string or a list (of strings that may themselves hold commas)."""
    if value is None:
        return []
    parts = value if isinstance(value, list) else [value]
    out: list[str] = []
    for part in parts:
        for label in str(part).split(","):
            label = label.strip()
            if label and label not in out:
                out.append(label)
    return out


def nest_form(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Rack-style nesting of form keys: `labels[]=a` -> list, `position[new_line]=3` -> dict."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        head, _, tail = key.partition("[")
        if not tail:
            out[key] = value
            continue
        parts = [head, *tail.rstrip("]").split("][")]
        node: Any = out
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            following = None if last else parts[index + 1]
            if part == "":
                # `[]` appends; only valid as the last component here.
                if isinstance(node, list):
                    node.append(value)
                break
            if last:
                node[part] = value
                break
            child = node.get(part) if isinstance(node, dict) else None
            if child is None:
                child = [] if following == "" else {}
                node[part] = child
            node = child
    return out

"""Output schemas as the server publishes them: every local `$ref` replaced by what it names.

An MCP client validates each structured answer against the tool's output schema (the SDK's
client does, with `jsonschema`, on every call). Resolving a `$ref` costs that validator a lookup
and a new scope each time it meets one, once per entry of a list: a `me` answer of 184 KB took
38 ms to validate against me.json, 26 ms against the same schema with its `$defs` written in
place, which accepts and rejects the same documents. The files (cli/schemas/*.json,
mcp/*.schema.json) keep their `$defs`, which people read and the tests validate against; only
the copy the server lists is inlined. A schema that refers to itself (directly or through
another definition) cannot be written out and is published as it is.
"""

from typing import Any

# Keywords that say something of a value but constrain nothing: where a `$ref` has siblings
# the definition also has, these may take the sibling's word (as `{"$ref": ..., "description":
# ...}` means). Any other shared keyword would be two constraints, kept as two through `allOf`.
_ANNOTATIONS = frozenset({"description", "title", "$comment", "examples", "default"})


class _Recursive(Exception):
    """A definition refers back to itself."""


def inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with each `#/...` reference replaced by the part of `schema` it points to and its
    `$defs` dropped; `schema` itself when it is recursive or refers outside itself."""
    try:
        out = _inline(schema, schema, ())
    except _Recursive:
        return schema
    return out if isinstance(out, dict) and not _refers(out) else schema


def _refers(node: Any) -> bool:
    """A `$ref` is left (one not local, or one that does not resolve)."""
    if isinstance(node, dict):
        return isinstance(node.get("$ref"), str) or any(_refers(v) for v in node.values())
    return isinstance(node, list) and any(_refers(v) for v in node)


def _target(root: dict[str, Any], ref: str) -> Any:
    node: Any = root
    for part in ref.removeprefix("#/").split("/"):
        key = part.replace("~1", "/").replace("~0", "~")
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


def _inline(node: Any, root: dict[str, Any], stack: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline(v, root, stack) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    rest = {k: _inline(v, root, stack) for k, v in node.items() if k != "$ref" and not (k == "$defs" and node is root)}
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return rest if ref is None else {**rest, "$ref": ref}  # not local: the whole is published as it is
    if ref in stack:
        raise _Recursive(ref)
    try:
        target = _inline(_target(root, ref), root, (*stack, ref))
    except (KeyError, IndexError, ValueError, TypeError):
        return {**rest, "$ref": ref}  # does not resolve: published as it is, for the validator to say so
    if not isinstance(target, dict):
        return {"allOf": [target], **rest} if rest else target  # a boolean schema
    if set(rest) & set(target) - _ANNOTATIONS:
        return {"allOf": [target], **rest}
    return {**target, **rest}

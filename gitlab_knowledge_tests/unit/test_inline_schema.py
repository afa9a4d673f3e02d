"""mcp/inline_schema.py: the output schemas the server lists, with their `$defs` written in place,
accept and reject what the schema files do (the real answers and their mutants are checked in
test_mcp_graph.py); what cannot be written out is listed as it is."""

import jsonschema

from gitlab_knowledge.mcp.inline_schema import inlined


def _judge(schema: dict, value: object) -> bool:
    return not list(jsonschema.Draft202012Validator(schema).iter_errors(value))


def test_a_reference_becomes_its_definition_and_a_siblings_word_stands() -> None:
    schema = {"type": "object", "properties": {
        "at": {"$ref": "#/$defs/when", "description": "the start"},
        "items": {"type": "array", "items": {"$ref": "#/$defs/entry"}}},
        "$defs": {"when": {"type": "string", "pattern": "^\\d{4}$", "description": "a year"},
                  "entry": {"type": "object", "properties": {"at": {"$ref": "#/$defs/when"}},
                            "additionalProperties": False}}}
    flat = inlined(schema)
    assert "$defs" not in flat and "$ref" not in str(flat)
    assert flat["properties"]["at"] == {"type": "string", "pattern": "^\\d{4}$", "description": "the start"}
    for value in ({"at": "2024", "items": [{"at": "1999"}]}, {"at": "24"}, {"items": [{"at": 5}]},
                  {"items": [{"other": 1}]}):
        assert _judge(flat, value) == _judge(schema, value), value


def test_a_sibling_constraint_the_definition_also_has_keeps_both() -> None:
    schema = {"properties": {"n": {"$ref": "#/$defs/small", "minimum": 3}},
              "$defs": {"small": {"type": "integer", "minimum": 0, "maximum": 5}}}
    flat = inlined(schema)
    assert flat["properties"]["n"] == {"allOf": [{"type": "integer", "minimum": 0, "maximum": 5}], "minimum": 3}
    for n in (-1, 2, 4, 6, "x"):
        assert _judge(flat, {"n": n}) == _judge(schema, {"n": n}), n


def test_a_pointer_with_escapes_and_a_boolean_definition() -> None:
    schema = {"properties": {"a": {"$ref": "#/$defs/a~1b"}, "b": {"$ref": "#/$defs/never"}},
              "$defs": {"a/b": {"type": "string"}, "never": False}}
    flat = inlined(schema)
    assert flat["properties"]["a"] == {"type": "string"} and flat["properties"]["b"] is False
    assert _judge(flat, {"a": "x"}) and not _judge(flat, {"a": 1}) and not _judge(flat, {"b": 1})


def test_what_cannot_be_written_out_is_listed_as_it_is() -> None:
    recursive = {"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}}
    external = {"properties": {"x": {"$ref": "https://example.com/x.json"}}}
    dangling = {"properties": {"x": {"$ref": "#/$defs/missing"}}, "$defs": {}}
    for schema in (recursive, external, dangling):
        assert inlined(schema) is schema

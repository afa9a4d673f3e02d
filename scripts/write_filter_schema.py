"""Rewrite the `filters` object of gitlab_knowledge/search/schema.json from the filter registry.

    .venv/bin/python scripts/write_filter_schema.py

Run it after adding or changing a described FilterSpec (search/filters.py); test_search_registry
fails until the committed schema matches. Only the `filters` block is rewritten, in the file's
own layout (one property a line), so the rest of the file and its history stay as they are.
"""

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gitlab_knowledge.search.filter_schemas import reported  # noqa: E402

SCHEMA = REPO / "gitlab_knowledge" / "search" / "schema.json"
# The block from its key to the closing brace at the key's indentation.
BLOCK = re.compile(r'^(?P<indent> *)"filters": \{\n.*?^(?P=indent)\}', re.MULTILINE | re.DOTALL)


def render(indent: str) -> str:
    filters = reported()
    inner, innermost = indent + "  ", indent + "    "
    properties = ",\n".join(f"{innermost}{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}"
                            for key, value in filters["properties"].items())
    return (f'{indent}"filters": {{\n'
            f'{inner}"type": {json.dumps(filters["type"])},\n'
            f'{inner}"additionalProperties": {json.dumps(filters["additionalProperties"])},\n'
            f'{inner}"required": {json.dumps(filters["required"])},\n'
            f'{inner}"properties": {{\n{properties}\n{inner}}}\n'
            f'{indent}}}')


def main() -> int:
    text = SCHEMA.read_text("utf-8")
    found = BLOCK.search(text)
    if found is None:
        print(f"no `filters` object found in {SCHEMA}", file=sys.stderr)
        return 1
    new = text[:found.start()] + render(found["indent"]) + text[found.end():]
    if json.loads(new)["properties"]["filters"] != reported():
        print("the rewritten schema does not hold the registry's filters", file=sys.stderr)
        return 1
    SCHEMA.write_text(new, "utf-8")
    print(f"{SCHEMA.relative_to(REPO)}: filters {'unchanged' if new == text else 'rewritten'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

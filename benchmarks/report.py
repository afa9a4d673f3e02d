"""The benchmarks' tables: two columns of Markdown, padded so they also read as plain text."""


def markdown_table(rows: list[tuple[str, str]]) -> str:
    """`rows[0]` is the header."""
    width = max(len(a) for a, _ in rows)
    lines = [f"| {a.ljust(width)} | {b} |" for a, b in rows]
    lines.insert(1, f"| {'-' * width} | --- |")
    return "\n".join(lines)

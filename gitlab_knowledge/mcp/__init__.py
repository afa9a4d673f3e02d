"""The MCP server for agents: `python -m gitlab_knowledge.mcp [--http]`.

- `server.py`: the SDK server, its transports (stdio; Streamable HTTP on 127.0.0.1) and tool errors;
- `tools.py`: each tool's input and output schema and its handler, which calls what the CLI calls;
- `resident.py`: the one warm searcher of the process, and the local socket the search command asks
  (its client side is search/resident_client.py);
- `items.py`, `comments.py`, `digest.py`: get_issue / get_merge_request, gitlab_get_mr_comments
  and its Markdown digest; `bounds.py`: what an agent's context is spared.

This package's `__init__` stays empty of imports.
"""

"""JSON Schemas (draft 2020-12) of the CLI commands' `--json` output, one file per command."""

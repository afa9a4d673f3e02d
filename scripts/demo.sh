#!/usr/bin/env bash
# First contact: install into .venv, then sync the bundled sample from a sandbox GitLab through
# every layer (Dagster job: raw → normalized → documents → embeddings + lexical index) and search it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# The product, and the sandbox GitLab the demo and the tests serve from (its own package).
.venv/bin/python -m pip install --quiet -e '.[test]' -e ./sandbox
exec .venv/bin/python -m gitlab_knowledge demo "$@"

#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: lint, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e ".[test]"
python3 -m ruff check metrale tests tools
python3 -m pytest -q -n 2 "$@"

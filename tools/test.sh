#!/usr/bin/env bash
# Run the whole test suite in a fresh virtual environment: lint, then pytest.
#
#   bash tools/test.sh [--lowest] [pytest args ...]
#
# Each run creates a new venv in a temporary folder (removed afterwards), installs the project
# with its test extras there and prints the versions it resolved, so packages installed earlier
# on the machine can hide nothing. Default: the newest versions the registry serves (torch: the
# CPU build 2.13.0, which this machine keeps on disk; a plain `torch` would pull a multi-GB CUDA
# build). --lowest: every runtime dependency pinned to the floor pyproject.toml declares
# (tools/lowest_versions.py; the test tools stay at their newest).
set -euo pipefail
cd "$(dirname "$0")/.."
lowest=0
if [ "${1:-}" = "--lowest" ]; then lowest=1; shift; fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/metrale-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
venv=$tmp/venv
python3 -m venv "$venv"
py=$venv/bin/python
start=$(date +%s)
if [ "$lowest" = 1 ]; then
    python3 tools/lowest_versions.py >"$venv/lowest.txt"
    "$py" -m pip install -q -e ".[test]" -c "$venv/lowest.txt"
    label="lowest declared versions"
else
    "$py" -m pip install -q torch==2.13.0
    "$py" -m pip install -q --upgrade -e ".[test]"
    label="newest versions"
fi
echo "== $label, installed in $(( $(date +%s) - start )) s:"
"$py" -m pip list --format=freeze 2>/dev/null |
    grep -iE '^(numpy|ml.dtypes|safetensors|typer|rich|gguf|torch|transformers|compressed.tensors|hypothesis|pytest)==' |
    tr '\n' ' '
echo
if [ "$lowest" = 1 ]; then
    # nvcc builds of the kernel files do not depend on Python package versions: the newest run has them
    "$py" -m pytest -q -n 2 --ignore=tests/test_cuda_compile.py "$@"
else
    "$py" -m ruff check metrale tests tools
    "$py" -m pytest -q -n 2 "$@"
fi

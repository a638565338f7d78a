#!/usr/bin/env bash
# Set up a virtual environment with every extra and run all checks: lint, format,
# types, and the whole offline test suite. Used as-is by CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch first, pinned: it resolves to the CPU build on this machine kind; an unpinned
# torch would pull several GB of CUDA packages.
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev,local,server]" --config-settings editable_mode=strict

ruff check .
ruff format --check .
mypy graph nodes services analysis cli testing bench reference
python -m pytest "$@"

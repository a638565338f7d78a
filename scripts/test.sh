#!/usr/bin/env bash
# Set up a virtual environment with every extra and run all checks: lint, format,
# types, layers, and the whole offline test suite in two tiers: the fast, in-process one
# (what a bare `pytest` runs) and the end-to-end one (`pytest -m e2e`: the command in
# subprocesses, the demo, `langgraph dev`, a browser, notebooks, kill storms). Used as-is
# by CI (.ci/run); arguments go to both pytest runs.
# The [verifiers] extra gets a second environment (.venv-vf): verifiers pins openai
# below 3, the base install resolves to openai 3, and each must be tested as installed.
# The [verifiers-seed] extra (verifiers 0.1, the seed's vf-eval command line) gets a third
# (.venv-vf-seed): the two verifiers lines cannot share an environment.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch first, pinned: it resolves to the CPU build on this machine kind; an unpinned
# torch would pull several GB of CUDA packages.
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev,local,server,hf,export,plots,postgres]"
python -m pip check

# The HTML report's tests drive a real browser, Debian's chromium (CI runs this as root).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -q && apt-get install -y -q chromium; } >/dev/null \
        || echo "chromium could not be installed: the browser tests will be skipped" >&2
fi

ruff check .
ruff format --check .
mypy core record graph nodes services analysis cli runner testing bench reference
lint-imports --no-cache
python -m pytest "$@"
python -m pytest -m e2e -n 0 "$@"

# The verifiers environment (vf-eval aidanbench) and the HTTP paths on the openai 2.x the
# [verifiers] extra resolves to; both tiers of these files (-m "e2e or not e2e").
deactivate
python3 -m venv .venv-vf
.venv-vf/bin/python -m pip install -q --upgrade pip
.venv-vf/bin/python -m pip install -q -e ".[dev,verifiers]"
.venv-vf/bin/python -m pip check
.venv-vf/bin/mypy package verifiers_env
.venv-vf/bin/python -m pytest -n 0 -m "e2e or not e2e" tests/test_verifiers_env.py \
    tests/test_http.py tests/test_faults.py tests/test_published_replay.py \
    tests/test_question_graph.py tests/test_packaging.py

# The seed's command line (vf-install, vf-eval -n -r -T -a -b -k) on verifiers 0.1. vf-install
# runs uv, which the test runs offline, building with this environment's setuptools.
python3 -m venv .venv-vf-seed
.venv-vf-seed/bin/python -m pip install -q --upgrade pip
.venv-vf-seed/bin/python -m pip install -q -e ".[dev,verifiers-seed]" "setuptools>=69" uv
.venv-vf-seed/bin/python -m pip check
.venv-vf-seed/bin/mypy package verifiers_seed
.venv-vf-seed/bin/python -m pytest -n 0 -m "e2e or not e2e" tests/test_verifiers_seed.py \
    tests/test_packaging.py

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
# Every stage runs, whatever failed before it (a stage whose environment could not be
# built is reported as not run); each prints its wall time, and the script ends with every
# stage's outcome and time, and exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

outcomes=()
failed=0

stage() {  # NAME COMMAND...: run it, time it, record how it ended
    local name=$1 started=$SECONDS outcome=passed
    shift
    echo "=== $name" >&2
    "$@" || { outcome=FAILED; failed=1; }
    outcomes+=("$(printf '%-34s %-8s %5d s' "$name" "$outcome" $((SECONDS - started)))")
    echo "=== $name: $outcome in $((SECONDS - started)) s" >&2
    [ "$outcome" = passed ]
}

skipped() {  # NAME...: stages not run because their environment failed to build
    for name in "$@"; do outcomes+=("$(printf '%-34s %s' "$name" "not run")"); done
}

main_env() {
    python3 -m venv .venv &&
        .venv/bin/python -m pip install -q --upgrade pip &&
        # torch first, pinned: it resolves to the CPU build on this machine kind; an
        # unpinned torch would pull several GB of CUDA packages.
        .venv/bin/python -m pip install -q "torch==2.13.0" &&
        .venv/bin/python -m pip install -q -e ".[dev,local,server,hf,export,plots,postgres]" \
            --config-settings editable_mode=strict &&
        .venv/bin/python -m pip check
}

browser() {  # the HTML report's tests drive a real browser, Debian's (CI runs as root)
    if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        { apt-get update -q && apt-get install -y -q chromium; } >/dev/null \
            || echo "chromium could not be installed: the browser tests will be skipped" >&2
    fi
}

# The verifiers environment (vf-eval aidanbench) and the HTTP paths on the openai 2.x the
# [verifiers] extra resolves to; both tiers of these files (-m "e2e or not e2e").
vf_env() {
    python3 -m venv .venv-vf &&
        .venv-vf/bin/python -m pip install -q --upgrade pip &&
        .venv-vf/bin/python -m pip install -q -e ".[dev,verifiers]" --config-settings editable_mode=strict &&
        .venv-vf/bin/python -m pip check
}

# The seed's command line (vf-install, vf-eval -n -r -T -a -b -k) on verifiers 0.1.
# vf-install runs uv, which the test runs offline, building with this environment's setuptools.
seed_env() {
    python3 -m venv .venv-vf-seed &&
        .venv-vf-seed/bin/python -m pip install -q --upgrade pip &&
        .venv-vf-seed/bin/python -m pip install -q -e ".[dev,verifiers-seed]" "setuptools>=69" uv \
            --config-settings editable_mode=strict &&
        .venv-vf-seed/bin/python -m pip check
}

if stage "setup .venv" main_env; then
    . .venv/bin/activate
    stage "chromium" browser
    stage "ruff check" ruff check .
    stage "ruff format" ruff format --check .
    stage "mypy" mypy core record graph nodes services analysis cli runner testing bench reference
    stage "lint-imports" lint-imports --no-cache
    stage "pytest (fast tier)" python -m pytest "$@"
    stage "pytest -m e2e" python -m pytest -m e2e -n 0 "$@"
    deactivate
else
    skipped "chromium" "ruff check" "ruff format" "mypy" "lint-imports" "pytest (fast tier)" "pytest -m e2e"
fi

if stage "setup .venv-vf" vf_env; then
    stage "mypy (verifiers)" .venv-vf/bin/mypy package verifiers_env
    stage "pytest (verifiers)" .venv-vf/bin/python -m pytest -n 0 -m "e2e or not e2e" \
        tests/test_verifiers_env.py tests/test_http.py tests/test_faults.py \
        tests/test_published_replay.py tests/test_question_graph.py tests/test_packaging.py
else
    skipped "mypy (verifiers)" "pytest (verifiers)"
fi

if stage "setup .venv-vf-seed" seed_env; then
    stage "mypy (verifiers-seed)" .venv-vf-seed/bin/mypy package verifiers_seed
    stage "pytest (verifiers-seed)" .venv-vf-seed/bin/python -m pytest -n 0 -m "e2e or not e2e" \
        tests/test_verifiers_seed.py tests/test_packaging.py
else
    skipped "mypy (verifiers-seed)" "pytest (verifiers-seed)"
fi

echo >&2
echo "stage                              outcome   time" >&2
printf '%s\n' "${outcomes[@]}" >&2
echo "total: $SECONDS s" >&2
exit "$failed"

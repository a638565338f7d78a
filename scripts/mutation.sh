#!/usr/bin/env bash
# Mutation testing of the pure core with mutmut (pip install -e '.[mutation]').
#
#   bash scripts/mutation.sh [MAX_CHILDREN]      # default 2 worker processes
#
# Mutated: nodes/ parsing, novelty, metrics, routing, decide and the pass rule in
# core/thresholds.py. Each mutant runs only the fast unit tests (listed below) that
# reach the mutated function. The package maps aidanbench.<pkg> to ./<pkg>, which mutmut
# cannot follow, so the sources are staged as aidanbench/<pkg> under .mutation/ (ignored
# by git) and mutmut runs there. Prints mutmut's per-mutant results and the score.
set -euo pipefail
cd "$(dirname "$0")/.."
children="${1:-2}"
python="${PYTHON:-$PWD/.venv/bin/python}"

stage=.mutation
rm -rf "$stage"
mkdir -p "$stage/aidanbench" "$stage/tests"
# Every package of the project, and the package root's __init__.py: a staged aidanbench
# without it is a namespace package, which the installed (regular) one would shadow.
cp package/__init__.py "$stage/aidanbench/"
for pkg in core record reference graph nodes services analysis cli runner testing; do
    cp -r "$pkg" "$stage/aidanbench/$pkg"
done
find "$stage" -name __pycache__ -prune -exec rm -rf {} +
tests=(
    tests/__init__.py tests/conftest.py tests/builders.py tests/graphs.py tests/states.py
    tests/test_parsing.py tests/test_novelty.py tests/test_thresholds.py tests/test_metrics.py
    tests/test_routing.py tests/test_decide.py tests/test_graph_edges.py tests/test_turn_cpu.py
)
for t in "${tests[@]}"; do cp "$t" "$stage/tests/"; done
cp README.md "$stage/"  # tests/test_graph_edges.py reads the edge list
# pytest settings only; mutmut's own come from setup.cfg
sed -n '/^\[tool.pytest.ini_options\]/,/^\]/p' pyproject.toml > "$stage/pyproject.toml"
# one process: mutmut learns which tests reach which function from the test process itself
sed -i 's/ -n 2 --dist worksteal//' "$stage/pyproject.toml"
cat > "$stage/setup.cfg" <<'CFG'
[mutmut]
source_paths = aidanbench
only_mutate =
    aidanbench/nodes/parsing.py
    aidanbench/nodes/novelty.py
    aidanbench/nodes/metrics.py
    aidanbench/nodes/routing.py
    aidanbench/nodes/decide.py
    aidanbench/core/thresholds.py
pytest_add_cli_args_test_selection =
    tests/test_parsing.py
    tests/test_novelty.py
    tests/test_thresholds.py
    tests/test_metrics.py
    tests/test_routing.py
    tests/test_decide.py
    tests/test_graph_edges.py
    tests/test_turn_cpu.py
pytest_add_cli_args = -p no:cacheprovider -q -n 0
also_copy = README.md
CFG

cd "$stage"
"$python" -m mutmut run --max-children "$children"
"$python" -m mutmut results --all true > results.txt || true
"$python" - <<'PY'
import collections, re
counts = collections.Counter()
for line in open("results.txt"):
    m = re.match(r"\s*(\S+): (.+)$", line)
    if m:
        counts[m.group(2).strip()] += 1
killed = counts["killed"] + counts["timeout"]
total = sum(counts.values()) - counts["skipped"]
print(dict(counts))
print(f"mutation score: {killed}/{total} = {100 * killed / max(total, 1):.1f}% killed")
PY

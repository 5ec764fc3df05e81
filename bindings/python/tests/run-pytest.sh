#!/usr/bin/env bash
# Runs the Python bindings' tests against a given libember (CTest's test-python):
#   bindings/python/tests/run-pytest.sh path/to/libember.so [pytest args...]
# Uses $EMBER_PYTHON, else the first of python3 and /usr/bin/python3 that has pytest (a
# python3 earlier on PATH, e.g. pyenv's, may lack Debian's python3-pytest). Exits 77 (CTest:
# skipped) when there is none, 1 when EMBER_REQUIRE_PYTHON_TESTS is set.
set -euo pipefail
lib=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
py=""
for cand in ${EMBER_PYTHON:-} python3 /usr/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import pytest" 2>/dev/null; then
        py=$cand
        break
    fi
done
if [ -z "$py" ]; then
    echo "run-pytest.sh: no python3 with pytest (apt-get install python3-pytest python3-numpy)"
    [ -n "${EMBER_REQUIRE_PYTHON_TESTS:-}" ] && exit 1  # scripts/test.sh: a skip is a failure
    exit 77
fi
echo "run-pytest.sh: $("$py" -c 'import sys; print(sys.executable, sys.version.split()[0])'), EMBER_LIBRARY=$lib"
# no bytecode or pytest cache in the source tree
export EMBER_LIBRARY=$lib PYTHONDONTWRITEBYTECODE=1
exec "$py" -m pytest -q -p no:cacheprovider "$here" "$@"

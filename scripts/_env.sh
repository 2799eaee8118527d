# Sourced by demo.sh and test.sh: creates .venv once, then (re)installs gearjax
# with its test extras into it, so both commands work on a fresh machine. The
# extension is built with its test-only submodule (GEARJAX_TESTING=ON), so one
# build serves both commands.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
GEARJAX_TESTING="${GEARJAX_TESTING:-ON}" python -m pip install --quiet ".[test]"

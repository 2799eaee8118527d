#!/usr/bin/env bash
# The tests of the JAX internals gearjax patches and of its in-jit contract,
# run on the oldest JAX that pyproject.toml claims (0.10.0), beside the
# installed one: scripts/test.sh runs it after the whole suite. jax and jaxlib
# 0.10.0 go to build/jax-0.10.0 (pip --target, no dependencies: the venv's
# numpy, ml_dtypes and scipy serve both) and shadow the venv's JAX through
# PYTHONPATH; gearjax is the one installed in the active environment.
# Extra arguments go to pytest. Run from anywhere:
#
#   source .venv/bin/activate && bash scripts/test_oldest_jax.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OLDEST="0.10.0"  # pyproject.toml: jax>=0.10,<0.12
TARGET="build/jax-$OLDEST"
if ! PYTHONPATH="$TARGET" python -c "import jax, jaxlib, sys; sys.exit(
        jax.__version__ != '$OLDEST' or jaxlib.__version__ != '$OLDEST')" 2>/dev/null; then
  echo "scripts/test_oldest_jax.sh: installing jax and jaxlib $OLDEST into $TARGET" >&2
  rm -rf "$TARGET"
  python -m pip install --quiet --no-deps --target "$TARGET" "jax==$OLDEST" "jaxlib==$OLDEST"
fi
PYTHONPATH="$PWD/$TARGET" python -c "import jax, jaxlib;
assert jax.__version__ == jaxlib.__version__ == '$OLDEST', (jax.__version__, jaxlib.__version__)
print('scripts/test_oldest_jax.sh: jax', jax.__version__, 'from', jax.__file__)"
# The installed gearjax, as scripts/test.sh tests it (pytest's own script puts
# the venv's bin folder, not this tree, first on sys.path).
PYTHONPATH="$PWD/$TARGET" pytest -q -p no:cacheprovider tests/test_jax_fixes.py \
  tests/test_effects.py tests/test_state.py tests/test_contract.py tests/test_insert_batch.py \
  "$@"

#!/usr/bin/env bash
# The tests of the JAX internals gearjax patches or reads, and of its in-jit contract,
# run on the other supported JAX minors beside the one the whole suite ran on
# (scripts/test.sh runs this after the suite; pyproject.toml: jax>=0.10,<0.13):
#
#  * jax 0.11.2 on the active environment's Python (JAX 0.11 needs 3.12): jax
#    and jaxlib go to build/jax-0.11.2 (pip --target, no dependencies) and
#    shadow the environment's through PYTHONPATH; gearjax is the installed one.
#  * jax 0.10.0 on Python 3.11 (where pip stops at JAX 0.10): its own
#    environment, build/venv-py3.11, with gearjax built for that Python (CPU
#    handlers only: these tests run on the CPU) and only pytest beside it.
#
# `prepare-py311` only makes the Python 3.11 environment (scripts/test.sh runs
# it in the background while the suite's own environment installs); `run` (the
# default) prepares what is missing, then runs the tests. Extra arguments after
# `run` go to pytest.
#
#   source .venv/bin/activate && bash scripts/test_jax_minors.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TESTS=(tests/test_jax_fixes.py tests/test_effects.py tests/test_state.py tests/test_contract.py
       tests/test_insert_batch.py tests/test_window_steps.py
       "tests/test_sample_numpy.py::test_a_key_s_words_read_on_the_host_are_the_public_words")
JAX_011="0.11.2"
JAX_010="0.10.0"
VENV_311="build/venv-py3.11"
say() { echo "scripts/test_jax_minors.sh: $*" >&2; }

python_minor() { "$1" -c 'import sys; print(sys.version_info[1])'; }

# jax and jaxlib $1 into build/jax-$1, for the active environment's Python.
prepare_target() {
  local version="$1" target="build/jax-$1"
  if ! PYTHONPATH="$target" python -c "import jax, jaxlib, sys; sys.exit(
          jax.__version__ != '$version' or jaxlib.__version__ != '$version')" 2>/dev/null; then
    say "installing jax and jaxlib $version into $target"
    rm -rf "$target"
    python -m pip install --quiet --no-deps --target "$target" "jax==$version" "jaxlib==$version"
  fi
}

# build/venv-py3.11: gearjax for Python 3.11 (rebuilt incrementally in
# build/cp311-cp311-linux_x86_64 when its sources changed), jax 0.10.0, pytest.
prepare_py311() {
  local python
  python=$(bash scripts/find_python.sh 3.11) || return 1
  if [ ! -x "$VENV_311/bin/python" ]; then
    say "creating $VENV_311 (Python 3.11, for jax $JAX_010)"
    "$python" -m venv "$VENV_311"
    "$VENV_311/bin/python" -m pip install --quiet --upgrade pip
  fi
  local sources
  sources=$({ bash scripts/sources_hash.sh; "$python" --version 2>&1; } | sha256sum | cut -c1-16)
  if [ "$(cat "$VENV_311/gearjax-sources" 2>/dev/null)" = "$sources" ]; then
    return 0  # built and installed from these sources already
  fi
  rm -rf build/wheel-py3.11
  say "building gearjax for Python 3.11 (CPU handlers only)"
  GEARJAX_CUDA=OFF GEARJAX_TESTING=ON "$VENV_311/bin/python" -m pip wheel --quiet --no-deps \
    --wheel-dir build/wheel-py3.11 .
  "$VENV_311/bin/python" -m pip install --quiet --force-reinstall --no-deps \
    build/wheel-py3.11/gearjax-*.whl
  "$VENV_311/bin/python" -m pip install --quiet "jax==$JAX_010" "jaxlib==$JAX_010" \
    "numpy>=1.26" "pytest>=8"
  echo "$sources" >"$VENV_311/gearjax-sources"
}

prepare() {
  local minor
  minor=$(python_minor python)
  if [ "$minor" -ge 12 ]; then prepare_target "$JAX_011"; fi
  if [ "$minor" -eq 11 ]; then
    prepare_target "$JAX_010"
  elif ! prepare_py311; then
    say "no Python 3.11 found: jax $JAX_010 cannot be tested here"
  fi
}

# Runs the tests with $2 (a python) on jax $1, PYTHONPATH $3 (may be empty).
run_tests() {
  local version="$1" python="$2" path="$3"
  PYTHONPATH="$path" "$python" -c "import jax, jaxlib;
assert jax.__version__ == jaxlib.__version__ == '$version', (jax.__version__, jaxlib.__version__)
import sys; print('scripts/test_jax_minors.sh: jax', jax.__version__, 'on Python',
                  sys.version.split()[0], 'from', jax.__file__)"
  # The installed gearjax, as scripts/test.sh tests it: pytest's own script
  # puts its environment's bin folder, not this tree, first on sys.path.
  PYTHONPATH="$path" "$(dirname "$python")/pytest" -q -p no:cacheprovider "${TESTS[@]}" \
    "${@:4}"
}

main() {
  local action="${1:-run}"
  shift || true
  case "$action" in
    prepare-py311)
      prepare_py311 || say "no Python 3.11 found: jax $JAX_010 cannot be tested here"
      return ;;
    run) ;;
    *) say "usage: bash scripts/test_jax_minors.sh [prepare-py311 | run [pytest arguments]]"
       return 2 ;;
  esac
  prepare
  local minor python
  minor=$(python_minor python)
  python=$(command -v python)
  if [ "$minor" -ge 12 ]; then
    run_tests "$JAX_011" "$python" "$PWD/build/jax-$JAX_011" "$@"
  else
    say "Python 3.$minor: jax $JAX_011 needs Python 3.12 or newer; not tested here"
  fi
  if [ "$minor" -eq 11 ]; then
    run_tests "$JAX_010" "$python" "$PWD/build/jax-$JAX_010" "$@"
  elif [ -x "$VENV_311/bin/python" ]; then
    run_tests "$JAX_010" "$VENV_311/bin/python" "" "$@"
  fi
}

main "$@"

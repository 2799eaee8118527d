#!/usr/bin/env bash
# Proves the GPU path on a lent GPU machine in one command (issue 13):
#
#   bash scripts/gpu_check.sh [--wheels DIR] [--stage STAGE]... [RESULTS_DIR]
#
# Stages, in order, each callable alone (--stage build, test, sanitize, bench;
# default: all four) and each meant to fit in 10 minutes of wall time:
#   build     builds and installs gearjax for this card's architecture only
#             (nvidia-smi's compute capability), with the test-only module;
#             the CMake build folder (build/) is kept, so later stages and
#             later calls on the same machine rebuild only what changed;
#   test      the whole test suite, GPU tests included (pytest -m gpu first,
#             then everything);
#   sanitize  the GPU tests under compute-sanitizer (memcheck, racecheck,
#             synccheck), zero errors required; where the machine refuses
#             compute-sanitizer, that is recorded and the other stages go on;
#   bench     scripts/bench_gpu.py at full size (10^7 selection included) and
#             scripts/bench_dt_step.py.
# Everything lands in RESULTS_DIR (default benchmarks/results/): one log per
# stage, the benchmark JSON files, and gpu_check_facts.txt (nvidia-smi, driver,
# CUDA, jax and Python versions).
#
# The machine is expected to reach no registry and to have Python 3.12 with
# jax (CUDA), flax, optax, orbax, h5py, cupy, nanobind, scikit-build-core,
# cmake and ninja. What it lacks (flashbax, gymnasium, mujoco, nbclient,
# ipykernel) comes as wheels in --wheels DIR (fetched elsewhere by
# `python scripts/fetch_gpu_wheels.py DIR`), installed
# with --no-index into a private folder; without them the tests and benchmark
# sections that need them skip, saying so.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

WHEELS=""
STAGES=()
RESULTS="benchmarks/results"
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) WHEELS="$2"; shift 2 ;;
    --stage) STAGES+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,30p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "gpu_check.sh: unknown option $1" >&2; exit 2 ;;
    *) RESULTS="$1"; shift ;;
  esac
done
[ ${#STAGES[@]} -eq 0 ] && STAGES=(build test sanitize bench)
for stage in "${STAGES[@]}"; do
  case "$stage" in build|test|sanitize|bench) ;;
    *) echo "gpu_check.sh: unknown stage '$stage' (build, test, sanitize, bench)" >&2; exit 2 ;;
  esac
done
mkdir -p "$RESULTS"
RESULTS="$(cd "$RESULTS" && pwd)"
PYTHON="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
STATUS=0

say() { echo "== gpu_check: $*" | tee -a "$RESULTS/gpu_check_summary.txt"; }

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi >/dev/null 2>&1; then
  echo "gpu_check.sh: no NVIDIA GPU here (nvidia-smi is missing or fails): nothing to check" >&2
  exit 3
fi

# Wheels the machine lacks: into a private folder on PYTHONPATH, never over
# the machine's own packages.
if [ -n "$WHEELS" ]; then
  SITE="${TMPDIR:-/tmp}/gearjax-gpu-check-site"
  if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$WHEELS"/*.whl || { echo "gpu_check.sh: installing $WHEELS failed" >&2; exit 4; }
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "gpu_check.sh: no wheels in $WHEELS; what needs them will skip" >&2
  fi
fi

# The card's architecture only: "9.0" -> 90.
ARCH="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')"
{
  date -u
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
  command -v nvcc >/dev/null && nvcc --version
  "$PYTHON" -c 'import sys, jax, jaxlib; print("python", sys.version); print("jax", jax.__version__, "jaxlib", jaxlib.__version__); print(jax.devices())'
  echo "CUDA architecture built: $ARCH"
} > "$RESULTS/gpu_check_facts.txt" 2>&1

run_stage() {  # name, command...: runs it with its log in RESULTS, records the outcome
  local name="$1"; shift
  local start=$SECONDS
  "$@" > "$RESULTS/gpu_check_$name.log" 2>&1
  local rc=$?
  say "$name: exit $rc in $((SECONDS - start)) s (log: gpu_check_$name.log)"
  return $rc
}

stage_build() {
  GEARJAX_CUDA=ON GEARJAX_CUDA_ARCHITECTURES="$ARCH" GEARJAX_TESTING=ON \
    "$PYTHON" -m pip install --no-build-isolation --no-deps -v . &&
    "$PYTHON" -c 'import gearjax, jax; from gearjax import _gearjax;
print("cuda targets:", _gearjax.cuda_ffi_targets()); print("gpu free bytes:", _gearjax.gpu_free_bytes())'
}

stage_test() {
  # -P: the source tree (no compiled extension) stays off sys.path, so the
  # installed package is the one imported. The docs build skips, saying so,
  # where mkdocs is not installed.
  GEARJAX_REQUIRE_TESTING_MODULE=1 "$PYTHON" -P -m pytest -m gpu -q -rs tests &&
    GEARJAX_REQUIRE_TESTING_MODULE=1 "$PYTHON" -P -m pytest -q -rs tests
}

stage_sanitize() {
  if ! command -v compute-sanitizer >/dev/null; then
    echo "compute-sanitizer is not installed on this machine: sanitize stage not run"
    return 0
  fi
  local tool rc=0
  for tool in memcheck racecheck synccheck; do
    echo "--- compute-sanitizer --tool $tool"
    # XLA's own allocator pools memory: memcheck sees gearjax's kernels
    # writing into XLA buffers, which is what must be checked.
    compute-sanitizer --tool "$tool" --error-exitcode 99 --target-processes all \
      "$PYTHON" -P -m pytest -m gpu -q -x tests/test_gpu.py
    local code=$?
    echo "--- $tool: exit $code"
    if [ $code -ne 0 ]; then rc=$code; fi
  done
  return $rc
}

stage_bench() {
  "$PYTHON" scripts/bench_gpu.py --with-1e7 --out "$RESULTS/bench_gpu_$(nvidia-smi \
      --query-gpu=name --format=csv,noheader | head -n1 | tr -c 'A-Za-z0-9\n' '_' | tr -d '\n').json" &&
    "$PYTHON" scripts/bench_dt_step.py --out "$RESULTS/bench_dt_step_gpu.json"
}

say "stages: ${STAGES[*]}; results in $RESULTS; architecture $ARCH"
for stage in "${STAGES[@]}"; do
  case "$stage" in
    build) run_stage build stage_build || STATUS=1 ;;
    test) run_stage test stage_test || STATUS=1 ;;
    sanitize)
      # A machine that refuses the sanitizer (no permission to profile, say)
      # is recorded, not a failure of the other stages.
      if run_stage sanitize stage_sanitize; then :; else
        if grep -qiE "ERR_NVGPUCTRPERM|permission denied|is not supported on this" \
            "$RESULTS/gpu_check_sanitize.log"; then
          say "sanitize: refused on this machine (see its log); not counted as a failure"
        else
          STATUS=1
        fi
      fi ;;
    bench) run_stage bench stage_bench || STATUS=1 ;;
  esac
done
say "done: exit $STATUS"
exit $STATUS

#!/usr/bin/env bash
# Proves the GPU path on a GPU machine, in two commands of under 10 minutes
# each on a 16-core H100 machine:
#
#   bash scripts/gpu_check.sh --wheels DIR --stage check [RESULTS_DIR]
#   bash scripts/gpu_check.sh --wheels DIR --stage bench [RESULTS_DIR]
#   bash scripts/gpu_check.sh --wheels DIR --plugin DIST --stage check [RESULTS_DIR]
#
# --plugin DIST: the build stage installs the core and CUDA plugin wheels from
# DIST (scripts/build_wheels.sh's dist/, for this machine's Python) instead of
# building; the plugin then serves every CUDA call (gearjax/_plugin.py). It
# has no test-only module, so the tests that need one skip, saying so.
#
# check = build, test, sanitize; bench = build, bench (each command builds:
# a GPU machine may be a fresh one by the second call; the build takes ~20 s).
# Each command ends with one screen of results (scripts/gpu_summary.py: each
# stage's outcome and the GPU goal figures). Stages, each callable alone with
# --stage NAME:
#   build     gearjax for this card's architecture only (nvidia-smi's compute
#             capability) with the test-only module, as a wheel installed into
#             a private folder on PYTHONPATH (never over the machine's
#             packages); the CMake build folder (build/) is kept;
#   test      the whole suite on the GPU jax: in parallel (pytest-xdist, each
#             file in one worker, XLA_PYTHON_CLIENT_PREALLOCATE=false so the
#             workers share the card) but for the notebooks and the
#             benchmark scripts, which then run two at a time; JUnit reports
#             for the summary; then scripts/gpu_diagnose.py;
#   sanitize  compute-sanitizer memcheck on tests/test_gpu.py, racecheck and
#             synccheck on its sample, shard and error-path tests, zero errors
#             required; a machine that refuses the sanitizer is recorded;
#   bench     scripts/bench_gpu.py at full size (10^7 selection, a host table
#             larger than the card where host memory allows) and
#             scripts/bench_dt_step.py;
#   summary   the table alone.
# Everything lands in RESULTS_DIR (default benchmarks/results/): one log per
# stage, gpu_check_stages.jsonl, the JUnit and benchmark JSON files, and
# gpu_check_facts.txt (nvidia-smi, driver, CUDA, jax and Python versions).
#
# The machine is expected to reach no registry and to have Python 3.12 with
# jax (CUDA), flax, optax, orbax, h5py, cupy, nanobind, scikit-build-core,
# cmake, ninja, pytest-xdist and pytest-timeout. What it lacks (flashbax,
# gymnasium, mujoco, nbclient, ipykernel) comes as wheels in --wheels DIR
# (made on a machine with PyPI by `python scripts/fetch_gpu_wheels.py DIR`);
# without them what needs them skips, saying so.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

WHEELS=""
PLUGIN_DIST=""
STAGES=()
RESULTS="benchmarks/results"
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) WHEELS="$2"; shift 2 ;;
    --stage) STAGES+=("$2"); shift 2 ;;
    --plugin) PLUGIN_DIST="$2"; shift 2 ;;
    -h|--help) sed -n '2,40p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "gpu_check.sh: unknown option $1" >&2; exit 2 ;;
    *) RESULTS="$1"; shift ;;
  esac
done
[ ${#STAGES[@]} -eq 0 ] && STAGES=(check)
EXPANDED=()
for stage in "${STAGES[@]}"; do
  case "$stage" in
    check) EXPANDED+=(build test sanitize) ;;
    bench-all|bench) EXPANDED+=(build bench) ;;
    build|test|sanitize|summary) EXPANDED+=("$stage") ;;
    *) echo "gpu_check.sh: unknown stage '$stage' (check, bench; build, test, sanitize," \
            "summary)" >&2; exit 2 ;;
  esac
done
mkdir -p "$RESULTS"
RESULTS="$(cd "$RESULTS" && pwd)"
PYTHON="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
STATUS=0

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi >/dev/null 2>&1; then
  echo "gpu_check.sh: no NVIDIA GPU here (nvidia-smi is missing or fails): nothing to check" >&2
  exit 3
fi

# Private folder for gearjax and the wheels the machine lacks, on PYTHONPATH
# for this script and every process it starts (tests keep it for theirs).
SITE="${TMPDIR:-/tmp}/gearjax-gpu-check-site"
mkdir -p "$SITE"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "$WHEELS" ]; then
  if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$WHEELS"/*.whl || { echo "gpu_check.sh: installing $WHEELS failed" >&2; exit 4; }
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
  nproc
  free -g
} > "$RESULTS/gpu_check_facts.txt" 2>&1

run_stage() {  # name, command...: runs it with its log in RESULTS, records the outcome
  local name="$1"; shift
  local start=$SECONDS
  "$@" > "$RESULTS/gpu_check_$name.log" 2>&1
  local rc=$?
  printf '{"stage": "%s", "exit": %d, "seconds": %d}\n' "$name" "$rc" "$((SECONDS - start))" \
    >> "$RESULTS/gpu_check_stages.jsonl"
  echo "== gpu_check: $name: exit $rc in $((SECONDS - start)) s (log: gpu_check_$name.log)"
  return $rc
}

stage_build() {
  if [ -n "$PLUGIN_DIST" ]; then
    stage_install_plugin
    return $?
  fi
  rm -rf build/wheel
  GEARJAX_CUDA=ON GEARJAX_CUDA_ARCHITECTURES="$ARCH" GEARJAX_TESTING=ON \
    "$PYTHON" -m pip wheel --no-build-isolation --no-deps -w build/wheel -v . &&
    "$PYTHON" -m pip install -q --no-index --no-deps --upgrade --target "$SITE" build/wheel/*.whl &&
    "$PYTHON" -P -c 'import gearjax, jax; from gearjax import _gearjax
print("gearjax from", gearjax.__file__)
print("cuda targets:", sorted(_gearjax.cuda_ffi_targets(True)))
print("architectures:", _gearjax.cuda_architectures, "| kernel problem:",
      repr(_gearjax.cuda_kernel_problem(0)))
print("gpu free bytes:", _gearjax.gpu_free_bytes())' &&
    stage_smoke
}

# The core and CUDA plugin wheels from $PLUGIN_DIST, for this Python, into
# the private folder: what a jax[cuda13] user without nvcc installs.
stage_install_plugin() {
  local tag
  tag=$("$PYTHON" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
  "$PYTHON" -m pip install -q --no-index --no-deps --upgrade --target "$SITE" \
    "$PLUGIN_DIST"/gearjax-*-"$tag"-"$tag"-*.whl \
    "$PLUGIN_DIST"/gearjax_cuda13_plugin-*-"$tag"-"$tag"-*.whl &&
    "$PYTHON" -P -c 'import gearjax, gearjax_cuda13_plugin as plugin; from gearjax import _gearjax
print("gearjax from", gearjax.__file__, "| extension:", _gearjax.__name__)
print("plugin", plugin.__version__, "| cudart:", plugin.cudart, "| GPUs:", plugin.gpus_visible())
assert _gearjax.__name__ == "gearjax_cuda13_plugin._gearjax" and _gearjax.cuda_built
print("cuda targets:", sorted(_gearjax.cuda_ffi_targets(True)))
print("architectures:", _gearjax.cuda_architectures, "| kernel problem:",
      repr(_gearjax.cuda_kernel_problem(0)))' &&
    stage_smoke
}

# One jitted GPU sample. The targets are registered with XLA FFI execution
# stages (gearjax/_ffi.py STAGED), never yet run on a GPU: if that sample
# fails and the per-call registration passes, the rest of this command runs
# per call (GEARJAX_FFI_STAGES=0, exported) so that its tests and benchmarks
# still run, and the log says PROBLEM.
SMOKE='import jax, numpy as np, gearjax as gx
from gearjax import _ffi
t = gx.Table({"x": gx.Column((2,), "float32")}, capacity=8, max_length=4)
t.insert({"x": np.ones((4, 2), np.float32)})
with jax.default_device(jax.devices("gpu")[0]):
    x = jax.jit(lambda k: t.sample(k, 4, 2)["x"])(jax.random.key(0))
assert float(x.sum()) == 16.0, x
print("GPU sample ok; staged targets:", _ffi.STAGED)'

stage_smoke() {
  if "$PYTHON" -P -c "$SMOKE"; then return 0; fi
  if GEARJAX_FFI_STAGES=0 "$PYTHON" -P -c "$SMOKE"; then
    echo "PROBLEM: the staged FFI targets fail on this GPU and the per-call ones work;" \
         "running the rest with GEARJAX_FFI_STAGES=0"
    export GEARJAX_FFI_STAGES=0
    return 0
  fi
  echo "PROBLEM: a GPU sample fails with either registration"
  return 1
}

SERIAL_FILES=(tests/test_notebooks.py tests/test_scripts.py)

stage_test() {
  # -P: the source tree (no compiled extension) stays off sys.path, so the
  # installed package is the one imported. Parallel workers share the card.
  local ignore=() rc=0
  for f in "${SERIAL_FILES[@]}"; do ignore+=(--ignore "$f"); done
  XLA_PYTHON_CLIENT_PREALLOCATE=false GEARJAX_REQUIRE_TESTING_MODULE=1 \
    "$PYTHON" -P -m pytest -q -rs -n 12 --dist loadfile --timeout 600 \
      --junitxml "$RESULTS/gpu_check_test.xml" "${ignore[@]}" tests || rc=1
  XLA_PYTHON_CLIENT_PREALLOCATE=false GEARJAX_REQUIRE_TESTING_MODULE=1 \
    "$PYTHON" -P -m pytest -q -rs -n 2 --timeout 600 \
      --junitxml "$RESULTS/gpu_check_serial.xml" "${SERIAL_FILES[@]}" || rc=1
  "$PYTHON" -P scripts/gpu_diagnose.py || rc=1
  return $rc
}

stage_sanitize() {
  if ! command -v compute-sanitizer >/dev/null; then
    echo "compute-sanitizer is not installed on this machine: sanitize stage not run"
    return 0
  fi
  local tool rc=0 select
  for tool in memcheck racecheck synccheck; do
    echo "--- compute-sanitizer --tool $tool"
    # memcheck: every GPU test; racecheck and synccheck (slower): the tests of
    # the kernels, the shard handlers and the error paths.
    select=()
    [ "$tool" != memcheck ] && select=(-k "sample or shard or error or refused or insert_batch")
    # XLA's own allocator pools memory: memcheck sees gearjax's kernels
    # writing into XLA buffers, which is what must be checked.
    XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 170 compute-sanitizer --tool "$tool" \
      --error-exitcode 99 --target-processes all \
      "$PYTHON" -P -m pytest -m gpu -q -p no:cacheprovider "${select[@]}" tests/test_gpu.py
    local code=$?
    echo "--- $tool: exit $code"
    if [ $code -ne 0 ]; then rc=$code; fi
  done
  return $rc
}

stage_bench() {
  local gpu
  gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | tr -c 'A-Za-z0-9\n' '_' |
         tr -d '\n')"
  "$PYTHON" -P scripts/bench_gpu.py --with-1e7 --out "$RESULTS/bench_gpu_$gpu.json" &&
    "$PYTHON" -P scripts/bench_dt_step.py --out "$RESULTS/bench_dt_step_gpu.json"
}

echo "== gpu_check: stages ${EXPANDED[*]}; results in $RESULTS; architecture $ARCH"
for stage in "${EXPANDED[@]}"; do
  case "$stage" in
    build) run_stage build stage_build || { STATUS=1; break; } ;;
    test) run_stage test stage_test || STATUS=1 ;;
    sanitize)
      # A machine that refuses the sanitizer (no permission to profile, say)
      # is recorded, not a failure of the other stages.
      if run_stage sanitize stage_sanitize; then :; else
        if grep -qiE "ERR_NVGPUCTRPERM|permission denied|is not supported on this" \
            "$RESULTS/gpu_check_sanitize.log"; then
          echo "== gpu_check: sanitize: refused on this machine (see its log); not a failure"
        else
          STATUS=1
        fi
      fi ;;
    bench) run_stage bench stage_bench || STATUS=1 ;;
    summary) ;;
  esac
done
"$PYTHON" -P scripts/gpu_summary.py "$RESULTS" | tee "$RESULTS/gpu_check_summary.txt"
exit $STATUS

#!/usr/bin/env bash
# The GPU check: one command for a lent GPU machine. A loan is about 15 minutes,
# start-up included, and one command runs at most 10; this command stays within
# 7 (420 s), so that a second try fits the same loan:
#
#   bash scripts/gpu_check.sh --wheels DIR [RESULTS_DIR]
#   bash scripts/gpu_check.sh --wheels DIR --dry-run   # the plan: stages, commands, budgets
#   bash scripts/gpu_check.sh --wheels DIR --stage full [RESULTS_DIR]   # another loan
#
# Stages, what matters most first, each under `timeout` with its budget in
# seconds (TERM 5 s before it, KILL at it). The budgets are estimates from the
# first GPU run's logs (an H100, 2026-11-26: the build 20 s, tests/test_gpu.py
# 60 s for its 88 tests then, racecheck on 12 tests 36 s, memcheck on 38 tests
# 22 s) until a GPU run times each stage (gpu_check_stages.jsonl):
#   build       60  the machine's facts, the --wheels, then gearjax for this card's
#                   architecture only (nvidia-smi's compute capability) with the
#                   test-only module, as a wheel installed into a private folder on
#                   PYTHONPATH (never over the machine's packages; build/ is kept,
#                   so a second try rebuilds little); then one jitted GPU sample
#   gpu_tests  140  first, scripts/gpu_diagnose.py --only timeouts: where a
#                   rate-limiter timeout in a CUDA handler crashes (each case in a
#                   process of its own, a native stack printed on a crash); then,
#                   each file in a pytest-xdist worker of its own (a crash costs that
#                   worker only), the two rate-limiter tests whose timeout crashed
#                   both GPU runs (SIGSEGV) and tests/test_gpu.py's error-path
#                   subprocess; then the rest of tests/test_gpu.py
#   sanitize    90  compute-sanitizer memcheck on test_gpu.py's sample-kernel,
#                   update, insert_batch and shard-handler tests, racecheck on the
#                   sample and update kernels' device-table tests; zero errors
#                   required; a machine that refuses the sanitizer is recorded
#   goal_bench  85  scripts/bench_gpu.py --quick: the rows gpu_summary.py sets
#                   against the GPU goals with their pure-JAX and Flashbax
#                   references, in one process (in-scan sample, one call, select
#                   and update at 10^7, PER against Flashbax, device and host gather
#                   against the copy ceilings)
#   dt_step     35  scripts/bench_dt_step.py at the reference size
#   summary     10  scripts/gpu_summary.py: one screen; always runs, also after a
#                   failure, a timeout or an interrupt
#   total      420  of 420
# --stage full, for another loan (one command of at most 600 s):
#   build       60
#   suite      295  the whole suite on the GPU jax: in parallel (12 workers, each
#                   file in one) but for the notebooks and the benchmark scripts,
#                   then two at a time; then scripts/gpu_diagnose.py
#   full_bench 225  scripts/bench_gpu.py at full size (every section, 10^7
#                   selection, a host table larger than the card where host memory
#                   allows); a section the budget cuts is missing from its results,
#                   which keep the rest (bench_dt_step runs in the default plan)
#   summary     10
#   total      590  of 600
# --stage build --stage torchrl, for a third command (in no plan: both are full):
#   torchrl    300  TorchRL's extension rebuilt from the sources its wheel carries
#                   with its CUDA segment trees, against this machine's torch
#                   (scripts/torch_extension.py; torchrl and tensordict come in
#                   --wheels), then scripts/bench_torchrl.py --gpu-only: TorchRL's
#                   PrioritizedSampler with its trees on the GPU against a gearjax
#                   host table sampled by a jitted program on the GPU
# --stage NAME (repeatable) runs stages alone: build, gpu_tests, sanitize,
# goal_bench, dt_step, suite, full_bench, torchrl, summary; quick (the default plan),
# full. A stage after build runs on the gearjax an earlier build installed on
# this machine. Nothing runs after a failed build (recorded as skipped).
# GPU_CHECK_BUDGET_<STAGE>=SECONDS changes a stage's budget (e.g.
# GPU_CHECK_BUDGET_FULL_BENCH=540 with --stage full_bench alone). The old
# stages check, test, bench and bench-all are refused, naming these.
#
# --plugin DIST: the build stage installs the core and CUDA plugin wheels from
# DIST (scripts/build_wheels.sh's dist/, for this machine's Python) instead of
# building; the plugin then serves every CUDA call (gearjax/_plugin.py). It has
# no test-only module, so the tests that need one skip, saying so.
#
# Everything lands in RESULTS_DIR (relative to the repository root; default
# benchmarks/results), each file as it is made, so a run cut short keeps what
# it finished: gpu_check_<stage>.log (written as the stage runs);
# gpu_check_stages.jsonl, a line when a stage starts (outcome "started") and
# one when it ends (stage, outcome: ok, fail, timeout, refused, skipped or
# interrupted; exit, seconds, budget, plan, date); the JUnit reports
# gpu_check_<stage>*.xml; bench_gpu_quick_<GPU>.json (rewritten after each
# section), bench_dt_step_gpu.json, bench_gpu_<GPU>.json (--stage full);
# gpu_check_facts.txt (nvidia-smi, driver, CUDA, jax, Python); and
# gpu_check_summary.txt. Exit status: 0 when every stage passed, 1 when one
# failed or timed out, 2 for bad arguments, 3 where there is no GPU.
#
# The machine is expected to reach no registry and to have Python 3.12 with
# jax (CUDA), flax, optax, orbax, h5py, cupy, nanobind, scikit-build-core,
# cmake, ninja, pytest-xdist, pytest-timeout and compute-sanitizer. What it
# lacks (flashbax, gymnasium, mujoco, nbclient, ipykernel) comes as wheels in
# --wheels DIR (made on a machine with PyPI by `python
# scripts/fetch_gpu_wheels.py DIR`); without them what needs them skips,
# saying so.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
SELF="$PWD/scripts/gpu_check.sh"

QUICK_LIMIT=420    # the default plan, whole: a second try fits a 15-minute loan
COMMAND_LIMIT=600  # one command on a lent machine
QUICK_PLAN=(build gpu_tests sanitize goal_bench dt_step summary)
FULL_PLAN=(build suite full_bench summary)
STAGES_KNOWN=(build gpu_tests sanitize goal_bench dt_step suite full_bench torchrl summary)
declare -A DEFAULT_BUDGET=([build]=60 [gpu_tests]=140 [sanitize]=90 [goal_bench]=85
                           [dt_step]=35 [summary]=10 [suite]=295 [full_bench]=225
                           [torchrl]=300)
declare -A ABOUT=(
  [build]="facts, --wheels, gearjax for this card's architecture only (or --plugin's), a GPU sample"
  [gpu_tests]="where timeouts crash (gpu_diagnose.py), the 2 tests that crashed, the error paths; then test_gpu.py"
  [sanitize]="compute-sanitizer memcheck and racecheck on a core subset of tests/test_gpu.py"
  [goal_bench]="bench_gpu.py --quick: the goal rows with their pure-JAX and Flashbax references"
  [dt_step]="bench_dt_step.py at the reference size"
  [summary]="gpu_summary.py: one screen (also after a failure, a timeout or an interrupt)"
  [suite]="the whole suite on the GPU jax (xdist), then gpu_diagnose.py"
  [full_bench]="bench_gpu.py at full size: every section, 10^7 selection, the big table"
  [torchrl]="TorchRL's extension with its CUDA trees, then bench_torchrl.py's GPU section")

# gpu_tests runs these first, each file in a worker of its own: the two tests
# whose rate-limiter timeout crashed the first GPU run with SIGSEGV
# (serial_files_2.log, gpu_subset_segfault.log there), and every CUDA error
# path, in a subprocess of its own.
ERROR_PATHS_TEST=tests/test_gpu.py::test_every_cuda_error_path_raises_its_error_and_the_process_lives
FIRST_TESTS=(tests/test_rate_limiter.py::test_min_size_times_out_with_a_clear_error
             tests/test_effects.py::test_samples_whose_results_are_unused_still_feed_the_rate_limiter
             "$ERROR_PATHS_TEST")
# The sanitizer's core subset: memcheck on the sample kernels, the update
# kernels, insert_batch and the shard handlers (20 tests; the first run's
# memcheck found the shard handlers' errors); racecheck, slower per test, on
# the sample and update kernels once each, on device tables (6 tests).
MEMCHECK_TESTS="both_gpu_sample_kernels or updates_leave_the_table or insert_batch_inside_jit \
or cuda_shard_handlers"
RACECHECK_TESTS="(both_gpu_sample_kernels or updates_leave_the_table) and device"
SERIAL_FILES=(tests/test_notebooks.py tests/test_scripts.py)
# What the build's log says when the staged FFI targets fail and the per-call
# ones work: the stages after it then run per call.
PER_CALL_MARK="the stages after this one run with GEARJAX_FFI_STAGES=0"
# What a sanitize log says where this machine cannot run the sanitizer.
SANITIZER_REFUSED="ERR_NVGPUCTRPERM|permission denied|is not supported on this"
SANITIZER_REFUSED+="|compute-sanitizer is not installed"

# ------------------------------------------------------------------ helpers
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$SELF"; }

refuse() { echo "gpu_check.sh: $*" >&2; exit 2; }

budget_of() {  # stage -> its budget in seconds (GPU_CHECK_BUDGET_<STAGE> overrides)
  local var="GPU_CHECK_BUDGET_${1^^}"
  echo "${!var:-${DEFAULT_BUDGET[$1]}}"
}

quoted() {  # one argument as a shell line would show it; a script by its first line
  local arg="$1"
  [[ "$arg" == *$'\n'* ]] && arg="${arg%%$'\n'*} ..."
  if [[ "$arg" =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then
    printf '%s' "$arg"
  else
    printf "'%s'" "${arg//\'/\'\\\'\'}"
  fi
}

cmd() {  # runs its arguments; in a dry run prints them instead
  if [ "$DRY_RUN" = 1 ]; then
    local line="      \$" arg
    for arg in "$@"; do line+=" $(quoted "$arg")"; done
    echo "$line"
    return 0
  fi
  "$@"
}

say() { [ "$DRY_RUN" = 1 ] || echo "$@"; }                # a real run's log line
note() { [ "$DRY_RUN" = 1 ] && echo "      ($*)"; return 0; }  # a plan's word on a branch

# ------------------------------------------------------------------ arguments
parse_args() {
  WHEELS="" PLUGIN_DIST="" DRY_RUN=0 RESULTS="benchmarks/results"
  local stages=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --wheels|--plugin|--stage)
        [ $# -ge 2 ] || refuse "$1 needs a value"
        case "$1" in
          --wheels) WHEELS="$2" ;;
          --plugin) PLUGIN_DIST="$2" ;;
          --stage) stages+=("$2") ;;
        esac
        shift 2 ;;
      --dry-run) DRY_RUN=1; shift ;;
      -h|--help) usage; exit 0 ;;
      -*) refuse "unknown option $1 (--wheels DIR, --plugin DIST, --stage NAME, --dry-run," \
                 "--help)" ;;
      *) RESULTS="$1"; shift ;;
    esac
  done
  plan_stages "${stages[@]}"
  local stage budget
  for stage in "${PLAN[@]}"; do
    budget=$(budget_of "$stage")
    [[ "$budget" =~ ^[0-9]+$ ]] && [ "$budget" -ge 10 ] ||
      refuse "GPU_CHECK_BUDGET_${stage^^}=$budget: a budget is whole seconds, at least 10"
  done
}

plan_stages() {  # the --stage names -> PLAN (each stage once, summary last), PLAN_NAME
  PLAN_NAME=stages
  [ $# -eq 0 ] && set -- quick
  if [ $# -eq 1 ] && { [ "$1" = quick ] || [ "$1" = full ]; }; then PLAN_NAME=$1; fi
  local wanted=() stage seen=" "
  for stage in "$@"; do
    case "$stage" in
      quick) wanted+=("${QUICK_PLAN[@]}") ;;
      full) wanted+=("${FULL_PLAN[@]}") ;;
      check) refuse "stage 'check' is gone: the default plan (no --stage) is" \
                    "${QUICK_PLAN[*]}; --stage full runs the whole suite" ;;
      test) refuse "stage 'test' (the whole suite) is now 'suite', in --stage full;" \
                   "the default plan's tests are 'gpu_tests'" ;;
      bench|bench-all) refuse "stage '$stage' (full size) is now 'full_bench', in --stage full;" \
                              "the default plan's benchmarks are 'goal_bench' and 'dt_step'" ;;
      *) [[ " ${STAGES_KNOWN[*]} " == *" $stage "* ]] ||
           refuse "unknown stage '$stage' (quick, full; ${STAGES_KNOWN[*]})"
         wanted+=("$stage") ;;
    esac
  done
  PLAN=()
  for stage in "${wanted[@]}"; do
    [ "$stage" = summary ] || [[ "$seen" == *" $stage "* ]] && continue
    PLAN+=("$stage")
    seen+="$stage "
  done
  PLAN+=(summary)
}

plan_limit() {  # the whole plan's limit in seconds
  if [ "$PLAN_NAME" = quick ]; then echo "$QUICK_LIMIT"; else echo "$COMMAND_LIMIT"; fi
}

plan_total() {
  local stage total=0
  for stage in "${PLAN[@]}"; do total=$((total + $(budget_of "$stage"))); done
  echo "$total"
}

# ------------------------------------------------------------------ the machine
card_facts() {  # ARCH ("9.0" -> 90) and GPU_NAME; placeholders where there is no GPU
  if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then
    ARCH="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')"
    GPU_NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 |
                tr -c 'A-Za-z0-9\n' '_' | tr -d '\n')"
    return 0
  fi
  ARCH="<arch>" GPU_NAME="<GPU>"
  return 1
}

write_facts() {
  local out="$RESULTS/gpu_check_facts.txt"
  if [ "$DRY_RUN" = 1 ]; then
    echo "      \$ { date; nvidia-smi; nvcc --version; python: jax, jaxlib, devices; nproc;" \
         "free -g; compute-sanitizer path; } > $out"
    return 0
  fi
  {
    date -u
    nvidia-smi
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
    command -v nvcc >/dev/null && nvcc --version
    "$PYTHON" -c 'import sys, jax, jaxlib; print("python", sys.version); print("jax", jax.__version__, "jaxlib", jaxlib.__version__); print(jax.devices())'
    echo "CUDA architecture built: $ARCH"
    nproc
    free -g
    echo "compute-sanitizer: $(sanitizer)"
  } > "$out" 2>&1
}

sanitizer() { command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer; }

install_wheels() {  # the wheels the machine lacks, into the private folder
  if [ -z "$WHEELS" ]; then
    note "no --wheels: what needs flashbax, gymnasium, mujoco or nbclient skips, saying so"
    return 0
  fi
  local wheels=("$WHEELS"/*.whl)
  if [ "$DRY_RUN" = 1 ]; then
    wheels=("$WHEELS/*.whl")
  elif [ ! -e "${wheels[0]}" ]; then
    echo "PROBLEM: no wheels in $WHEELS; what needs them will skip"
    return 0
  fi
  # Not fatal: what needs them skips, saying so; the rest still runs.
  cmd "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "${wheels[@]}" ||
    echo "PROBLEM: installing the wheels from $WHEELS failed; what needs them will skip"
}

# ------------------------------------------------------------------ stages
CHECK_BUILD='# the installed gearjax: where from, its CUDA targets and architectures
import gearjax, jax; from gearjax import _gearjax
print("gearjax from", gearjax.__file__)
print("cuda targets:", sorted(_gearjax.cuda_ffi_targets(True)))
print("architectures:", _gearjax.cuda_architectures, "| kernel problem:",
      repr(_gearjax.cuda_kernel_problem(0)))
print("gpu free bytes:", _gearjax.gpu_free_bytes())'

CHECK_PLUGIN='# the installed core and CUDA plugin: the plugin serves the CUDA calls
import gearjax, gearjax_cuda13_plugin as plugin; from gearjax import _gearjax
print("gearjax from", gearjax.__file__, "| extension:", _gearjax.__name__)
print("plugin", plugin.__version__, "| cudart:", plugin.cudart, "| GPUs:", plugin.gpus_visible())
assert _gearjax.__name__ == "gearjax_cuda13_plugin._gearjax" and _gearjax.cuda_built
print("cuda targets:", sorted(_gearjax.cuda_ffi_targets(True)))
print("architectures:", _gearjax.cuda_architectures, "| kernel problem:",
      repr(_gearjax.cuda_kernel_problem(0)))'

# One jitted GPU sample. The targets are registered with XLA FFI execution
# stages (gearjax/_ffi.py STAGED), never yet run on a GPU: if that sample fails
# and the per-call registration passes, the stages after the build run per
# call (GEARJAX_FFI_STAGES=0) so that their tests and benchmarks still run, and
# the log says PROBLEM.
SMOKE='# one jitted GPU sample from a small table
import jax, numpy as np, gearjax as gx
from gearjax import _ffi
t = gx.Table({"x": gx.Column((2,), "float32")}, capacity=8, max_length=4)
t.insert({"x": np.ones((4, 2), np.float32)})
with jax.default_device(jax.devices("gpu")[0]):
    x = jax.jit(lambda s, k: t.sample(s, k, 4, 2)[1]["x"])(t.state(), jax.random.key(0))
assert float(x.sum()) == 16.0, x
print("GPU sample ok; staged targets:", _ffi.STAGED)'

stage_build() {
  write_facts
  install_wheels
  if [ -n "$PLUGIN_DIST" ]; then
    install_plugin && smoke
    return
  fi
  cmd rm -rf "$SITE.wheel" &&
    cmd env GEARJAX_CUDA=ON GEARJAX_CUDA_ARCHITECTURES="$ARCH" GEARJAX_TESTING=ON \
      "$PYTHON" -m pip wheel --no-build-isolation --no-deps -w "$SITE.wheel" -v . &&
    cmd "$PYTHON" -m pip install -q --no-index --no-deps --upgrade --target "$SITE" \
      "$SITE.wheel"/*.whl &&
    cmd "$PYTHON" -P -c "$CHECK_BUILD" &&
    smoke
}

# The core and CUDA plugin wheels from $PLUGIN_DIST, for this Python, into the
# private folder: what a jax[cuda13] user without nvcc installs.
install_plugin() {
  local tag=cpXY
  [ "$DRY_RUN" = 1 ] || tag=$("$PYTHON" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
  cmd "$PYTHON" -m pip install -q --no-index --no-deps --upgrade --target "$SITE" \
      "$PLUGIN_DIST"/gearjax-*-"$tag"-"$tag"-*.whl \
      "$PLUGIN_DIST"/gearjax_cuda13_plugin-*-"$tag"-"$tag"-*.whl &&
    cmd "$PYTHON" -P -c "$CHECK_PLUGIN"
}

smoke() {
  if cmd "$PYTHON" -P -c "$SMOKE"; then
    note "if it fails: again with GEARJAX_FFI_STAGES=0, kept for the stages after it"
    return 0
  fi
  if GEARJAX_FFI_STAGES=0 "$PYTHON" -P -c "$SMOKE"; then
    echo "PROBLEM: the staged FFI targets fail on this GPU and the per-call ones work;" \
         "$PER_CALL_MARK"
    return 0
  fi
  echo "PROBLEM: a GPU sample fails with either registration"
  return 1
}

# The tests' environment: workers share the card; a crash prints its native
# frames where the build has the test-only module (tests/conftest.py), whose
# tests then fail rather than skip.
test_env() {
  TEST_ENV=(env XLA_PYTHON_CLIENT_PREALLOCATE=false GEARJAX_CRASH_REPORT=1)
  [ -n "$PLUGIN_DIST" ] || TEST_ENV+=(GEARJAX_REQUIRE_TESTING_MODULE=1)
}

# -P: the source tree (no compiled extension) stays off sys.path, so the
# installed package is the one imported. pytest-timeout fails a hung test and
# lets pytest write its JUnit report, which a stage timeout would lose.
stage_gpu_tests() {
  local rc=0
  test_env
  cmd timeout -k 5 30 "${TEST_ENV[@]}" "$PYTHON" -P scripts/gpu_diagnose.py --only timeouts || rc=1
  cmd timeout -k 5 55 "${TEST_ENV[@]}" "$PYTHON" -P -m pytest -p no:cacheprovider -v -rfEs \
      -n 3 --dist loadfile --timeout 45 --junitxml "$RESULTS/gpu_check_gpu_tests_first.xml" \
      "${FIRST_TESTS[@]}" || rc=1
  cmd "${TEST_ENV[@]}" "$PYTHON" -P -m pytest -p no:cacheprovider -v -rfEs -n 4 --dist load \
      --timeout 45 --durations 15 --junitxml "$RESULTS/gpu_check_gpu_tests.xml" \
      --deselect "$ERROR_PATHS_TEST" tests/test_gpu.py || rc=1
  return "$rc"
}

stage_sanitize() {
  SANITIZER=$(sanitizer)
  if [ "$DRY_RUN" = 0 ] && [ ! -x "$SANITIZER" ]; then
    echo "compute-sanitizer is not installed on this machine: sanitize stage not run"
    return 1
  fi
  local rc=0
  sanitize_with memcheck 40 "$MEMCHECK_TESTS" || rc=1
  sanitize_with racecheck 35 "$RACECHECK_TESTS" || rc=1
  return "$rc"
}

sanitize_with() {  # tool, seconds, the tests (-k)
  say "--- compute-sanitizer --tool $1"  # gpu_summary.py reads each tool's section
  # XLA's own allocator pools memory: memcheck sees gearjax's kernels writing
  # into XLA buffers, which is what must be checked.
  cmd timeout -k 5 "$2" env XLA_PYTHON_CLIENT_PREALLOCATE=false "$SANITIZER" --tool "$1" \
      --error-exitcode 99 --target-processes all \
      "$PYTHON" -P -m pytest -m gpu -q -p no:cacheprovider -k "$3" tests/test_gpu.py
  local code=$?
  say "--- $1: exit $code"
  return "$code"
}

stage_goal_bench() {
  cmd "$PYTHON" -P scripts/bench_gpu.py --quick --out "$RESULTS/bench_gpu_quick_$GPU_NAME.json"
}

stage_dt_step() {
  cmd "$PYTHON" -P scripts/bench_dt_step.py --sizes reference \
      --out "$RESULTS/bench_dt_step_gpu.json"
}

# The whole suite in parallel but for the notebooks and the benchmark scripts
# (two at a time), then gpu_diagnose.py; each part with its share of the
# stage's budget, so the later ones run even if an earlier one hangs.
stage_suite() {
  local rc=0 ignore=() f parallel=$(($(budget_of suite) - 105))
  for f in "${SERIAL_FILES[@]}"; do ignore+=(--ignore "$f"); done
  test_env
  cmd timeout -k 5 "$parallel" "${TEST_ENV[@]}" "$PYTHON" -P -m pytest -p no:cacheprovider -q \
      -rfEs -n 12 --dist loadfile --timeout 90 --junitxml "$RESULTS/gpu_check_suite.xml" \
      "${ignore[@]}" tests || rc=1
  cmd timeout -k 5 70 "${TEST_ENV[@]}" "$PYTHON" -P -m pytest -p no:cacheprovider -q -rfEs \
      -n 2 --timeout 60 --junitxml "$RESULTS/gpu_check_suite_serial.xml" \
      "${SERIAL_FILES[@]}" || rc=1
  cmd timeout -k 5 15 "$PYTHON" -P scripts/gpu_diagnose.py || rc=1
  return "$rc"
}

# Its results file is rewritten after each section: the sections the stage's
# budget cuts are missing, the others kept.
stage_full_bench() {
  cmd "$PYTHON" -P scripts/bench_gpu.py --with-1e7 --out "$RESULTS/bench_gpu_$GPU_NAME.json"
}

# TorchRL's wheels carry their CUDA trees' sources but not the trees; the
# rebuilt extension replaces the wheel's in the private folder.
stage_torchrl() {
  cmd "$PYTHON" -P scripts/torch_extension.py torchrl torchrl._torchrl csrc/pybind.cpp \
      csrc/utils.cpp csrc/cuda_segment_tree.cu --cuda --check CudaSumSegmentTreeFp32 &&
    cmd "$PYTHON" -P scripts/bench_torchrl.py --gpu-only --budget 30 \
      --out "$RESULTS/bench_torchrl_gpu_$GPU_NAME.json"
}

stage_summary() {
  cmd timeout -k 2 $(($(budget_of summary) - 2)) "$PYTHON" -P scripts/gpu_summary.py "$RESULTS"
}

# ------------------------------------------------------------------ running
record() {  # stage, outcome, exit, seconds: one line of gpu_check_stages.jsonl
  printf '{"stage": "%s", "outcome": "%s", "exit": %d, "seconds": %d, "budget": %d,' \
    "$1" "$2" "$3" "$4" "$(budget_of "$1")" >> "$RESULTS/gpu_check_stages.jsonl"
  printf ' "plan": "%s", "date": "%s"}\n' "$PLAN_NAME" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    >> "$RESULTS/gpu_check_stages.jsonl"
}

outcome_of() {  # stage, exit, seconds, budget, log -> ok, timeout, refused or fail
  if [ "$2" -eq 0 ]; then
    echo ok
  elif { [ "$2" -eq 124 ] || [ "$2" -eq 137 ]; } && [ "$3" -ge $(($4 - 6)) ]; then
    echo timeout
  elif [ "$1" = sanitize ] && grep -qiE "$SANITIZER_REFUSED" "$5"; then
    echo refused  # this machine cannot run the sanitizer: recorded, not a failure
  else
    echo fail
  fi
}

run_stage() {  # stage: runs it under its budget, its log written as it goes
  local name="$1" budget start=$SECONDS rc outcome
  budget=$(budget_of "$name")
  local log="$RESULTS/gpu_check_$name.log"
  echo "== gpu_check: $name (budget $budget s; log: gpu_check_$name.log)"
  record "$name" started 0 0
  CURRENT_STAGE=$name CURRENT_START=$SECONDS
  # In the background, so that an INT or TERM reaches the trap at once; timeout
  # signals the stage's whole process group (pytest workers, sanitizer targets).
  timeout -k 5 $((budget - 5)) bash "$SELF" --in-stage "$name" > "$log" 2>&1 &
  STAGE_PID=$!
  wait "$STAGE_PID"
  rc=$?
  STAGE_PID=""
  outcome=$(outcome_of "$name" "$rc" $((SECONDS - start)) "$budget" "$log")
  record "$name" "$outcome" "$rc" $((SECONDS - start))
  echo "== gpu_check: $name: $outcome (exit $rc) in $((SECONDS - start)) s of $budget"
  [ "$outcome" = ok ] || [ "$outcome" = refused ]
}

summary() {
  stage_summary | tee "$RESULTS/gpu_check_summary.txt"
}

interrupted() {  # signal, exit status: the running stage stopped and recorded, the summary
  trap - INT TERM
  if [ -n "${STAGE_PID:-}" ]; then
    kill -TERM "$STAGE_PID" 2>/dev/null
    wait "$STAGE_PID" 2>/dev/null
    record "$CURRENT_STAGE" interrupted "$2" $((SECONDS - CURRENT_START))
  fi
  echo "== gpu_check: stopped by SIG$1"
  summary
  exit "$2"
}

show_plan() {
  local stage i=0 total limit
  total=$(plan_total) limit=$(plan_limit)
  echo "gpu_check.sh --dry-run: plan '$PLAN_NAME', results in $RESULTS"
  echo "Each stage runs under timeout (TERM 5 s before its budget, KILL at it); its log,"
  echo "gpu_check_<stage>.log, is written as it runs; gpu_check_stages.jsonl gets a line"
  echo "when it starts and one when it ends."
  for stage in "${PLAN[@]}"; do
    i=$((i + 1))
    printf '%2d. %-10s %4d s  %s\n' "$i" "$stage" "$(budget_of "$stage")" "${ABOUT[$stage]}"
    "stage_$stage"
  done
  if [ "$PLAN_NAME" = quick ]; then
    echo "total budget: $total s of $limit s (7 minutes: a second try fits a 15-minute loan)"
  else
    echo "total budget: $total s of $limit s (one command on a lent machine)"
  fi
  [ "$total" -le "$limit" ] || echo "OVER: the budgets add up to more than $limit s"
  echo "The budgets are estimates from the first GPU run's logs (H100, 2026-11-26) until a"
  echo "GPU run times each stage (gpu_check_stages.jsonl: seconds against budget)."
}

main() {
  parse_args "$@"
  PYTHON="${PYTHON:-python3}"
  # gearjax and the --wheels, private; the wheel built beside it.
  SITE="${TMPDIR:-/tmp}/gearjax-gpu-check-site"
  case "$RESULTS" in /*) ;; *) RESULTS="$PWD/$RESULTS" ;; esac
  if [ "$DRY_RUN" = 1 ]; then
    card_facts
    show_plan
    exit 0
  fi
  if ! card_facts; then
    echo "gpu_check.sh: no NVIDIA GPU here (nvidia-smi is missing or fails): nothing to" \
         "check (--dry-run prints the plan anywhere)" >&2
    exit 3
  fi
  mkdir -p "$RESULTS" "$SITE"
  RESULTS="$(cd "$RESULTS" && pwd)"
  export PYTHON SITE RESULTS ARCH GPU_NAME WHEELS PLUGIN_DIST DRY_RUN PYTHONUNBUFFERED=1
  # The private folder on PYTHONPATH for every process this starts (tests keep
  # it for theirs).
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  local total limit
  total=$(plan_total) limit=$(plan_limit)
  echo "== gpu_check: plan '$PLAN_NAME': ${PLAN[*]}; budget $total s of $limit;" \
       "results in $RESULTS; architecture $ARCH"
  [ "$total" -le "$limit" ] || echo "== gpu_check: OVER: the budgets add up to more than $limit s"
  trap 'interrupted INT 130' INT
  trap 'interrupted TERM 143' TERM
  local stage status=0 built=1
  for stage in "${PLAN[@]}"; do
    [ "$stage" = summary ] && continue
    if [ "$built" = 0 ]; then
      record "$stage" skipped 0 0
      continue
    fi
    run_stage "$stage" || status=1
    if [ "$stage" = build ]; then
      [ "$status" = 0 ] || built=0
      if grep -q "$PER_CALL_MARK" "$RESULTS/gpu_check_build.log"; then
        export GEARJAX_FFI_STAGES=0
      fi
    fi
  done
  summary
  exit $status
}

# A stage alone, in the process run_stage starts under timeout.
if [ "${1:-}" = --in-stage ]; then
  [[ " ${STAGES_KNOWN[*]} " == *" ${2:-} "* ]] || refuse "--in-stage: unknown stage '${2:-}'"
  "stage_$2"
  exit $?
fi
main "$@"

#!/usr/bin/env bash
# Set-up command 2: install gearjax into .venv (with the newest Python >= 3.12
# found, and so the newest JAX; PYTHON=... picks another), build and run the
# native core's C++ unit tests (GoogleTest, under AddressSanitizer and UBSan,
# through ctest) and check its lock requirements with clang's thread safety
# analysis (scripts/check_thread_safety.sh), then run the Python test suite against the installed package,
# and the tests of the JAX internals it patches on the other supported JAX
# minors (scripts/test_jax_minors.sh: 0.11 on this Python, 0.10 on Python 3.11).
# Extra arguments go to pytest (and then only the suite runs, with them). The
# C++ tests and the Python 3.11 build happen in the background while _env.sh
# installs the package (they overlap: most of an install is not compiling),
# and the JAX minors' tests beside the suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The pytest-xdist workers that run the suite (below): GEARJAX_TEST_WORKERS,
# by default the cores, at most 4; 0 runs it in one process. Checked before
# anything is done.
cores=$(nproc)
workers="${GEARJAX_TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}"
if [[ ! "$workers" =~ ^[0-9]{1,3}$ ]]; then
  echo "scripts/test.sh: GEARJAX_TEST_WORKERS must be a number of pytest-xdist workers from 0" \
       "(the suite in one process) to 999, got '$workers'" >&2
  exit 2
fi

# GoogleTest (for the C++ tests) and clang++ (for the check of the core's lock
# requirements) come from the system's packages (Debian/Ubuntu: libgtest-dev,
# clang-14). Where one is missing and we may install packages, install it;
# where we may not, say so below and skip what needs it rather than fail the
# Python tests.
apt_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 0
  apt-get install -y -q "$1" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$1" >/dev/null 2>&1; } ||
    true
}
have_gtest() { [ -f /usr/include/gtest/gtest.h ] || [ -f /usr/local/include/gtest/gtest.h ]; }
have_clang() { bash scripts/check_thread_safety.sh --which >/dev/null 2>&1; }
have_gtest || apt_install libgtest-dev
have_clang || apt_install clang-14
# The Python 3.11 environment of the JAX 0.10 tests, built beside the rest
# (only for a whole run).
minors=""
if [ $# -eq 0 ]; then
  mkdir -p build
  bash scripts/test_jax_minors.sh prepare-py311 >build/jax-minors.log 2>&1 &
  minors=$!
fi

log=build/core-tests.log
core_build=""
if have_gtest; then
  mkdir -p build
  { cmake -S xla_ffi -B build/core-tests -DGEARJAX_BUILD_EXTENSION=OFF -DGEARJAX_BUILD_TESTS=ON \
      -DGEARJAX_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug &&
    cmake --build build/core-tests -j "$(nproc)"; } >"$log" 2>&1 &
  core_build=$!
else
  echo "scripts/test.sh: GoogleTest not found (install libgtest-dev): skipping the C++ unit" \
       "tests of the native core" >&2
fi

# If anything below fails, do not leave the builds running.
locks=""
trap 'kill $core_build $minors $locks 2>/dev/null || true' EXIT

# The lock check, beside the C++ build. Without clang it is skipped, saying
# so, unless GEARJAX_REQUIRE_LOCK_CHECK=1 (.ci/run sets it: CI never passes
# without the check).
locks_log=build/thread-safety.log
if have_clang; then
  mkdir -p build
  bash scripts/check_thread_safety.sh >"$locks_log" 2>&1 &
  locks=$!
elif [ "${GEARJAX_REQUIRE_LOCK_CHECK:-0}" = 1 ]; then
  echo "scripts/test.sh: clang++ not found and GEARJAX_REQUIRE_LOCK_CHECK=1: cannot check the" \
       "native core's lock requirements (install clang-14)" >&2
  exit 1
else
  echo "scripts/test.sh: clang++ not found (install clang-14): skipping the check of the" \
       "native core's lock requirements" >&2
fi

GEARJAX_EXTRA=test
source scripts/_env.sh

# NIXL for the nixl exchange's tests, by the one command the docs give
# users (its wheel declares torch but never imports it, and an extra cannot
# say --no-deps; see gearjax/sharded/install_nixl.py). Offline, its tests skip.
# -P: not the source tree in this directory (it has no compiled extension),
# the installed package.
python -P -m gearjax.sharded.install_nixl ||
  echo "scripts/test.sh: could not install NIXL; the nixl exchange's tests will skip" >&2

# The C++ tests of the native NIXL agent load NIXL's C API from that wheel.
if capi=$(python -P -c "from gearjax.sharded.nixl import capi_library; print(capi_library())" \
          2>/dev/null); then
  export GEARJAX_NIXL_CAPI="$capi"
fi

if [ -n "$core_build" ]; then
  { wait "$core_build" &&
    ctest --test-dir build/core-tests --output-on-failure -j "$(nproc)" >>"$log" 2>&1; } ||
    { cat "$log"; echo "scripts/test.sh: the native core's C++ unit tests failed" >&2; exit 1; }
  tail -n 3 "$log"
fi

# pyverbs (the verbs exchange) is not installed here: it must match the
# system's rdma-core, and installing rdma-core's libibverbs on a machine with no
# RDMA device makes NIXL 1.5.1's UCX crash every process at exit (SIGSEGV after
# main returns; measured on these machines), which would fail the nixl tests.
# Without pyverbs the verbs tests skip, saying so.

if [ -n "$locks" ]; then
  wait "$locks" ||
    { cat "$locks_log"; echo "scripts/test.sh: the native core breaks a lock requirement" >&2
      exit 1; }
  tail -n 1 "$locks_log"
fi

# The test-only submodule is built in (see _env.sh): tests that need it must
# not skip here.
export GEARJAX_REQUIRE_TESTING_MODULE=1
if [ $# -gt 0 ]; then
  exec pytest "$@"
fi
# The whole suite runs on this environment's JAX (the newest), in pytest-xdist
# workers (one pytest process keeps about one of two cores busy). The tests of
# the JAX internals gearjax patches run on the other supported minors beside
# it, in their own temporary folder, their output printed after the suite's.
wait "$minors" || { cat build/jax-minors.log; echo "scripts/test.sh: could not prepare the" \
                    "Python 3.11 environment of the JAX 0.10 tests" >&2; exit 1; }
minors_log=build/jax-minors-run.log
bash scripts/test_jax_minors.sh run --basetemp="$PWD/build/jax-minors-tmp" >"$minors_log" 2>&1 &
minors=$!
# worksteal: a worker done with its share takes tests from another's, so a
# few slow tests do not leave one worker running alone at the end. The
# slowest tests, named at the end: what to look at when CI nears its time.
suite=0
pytest -n "$workers" --dist worksteal --durations=25 || suite=$?
minors_status=0
wait "$minors" || minors_status=$?
trap - EXIT
cat "$minors_log"
if [ "$minors_status" -ne 0 ]; then
  echo "scripts/test.sh: the tests on the other JAX minors failed (above)" >&2
fi
if [ "$suite" -ne 0 ]; then exit "$suite"; fi
exit "$minors_status"

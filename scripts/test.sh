#!/usr/bin/env bash
# Set-up command 2: install gearjax into .venv, build and run the native core's
# C++ unit tests (GoogleTest, under AddressSanitizer and UBSan, through ctest),
# then run the Python test suite against the installed package. Extra
# arguments go to pytest.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"

# GoogleTest comes from the system's packages (Debian/Ubuntu: libgtest-dev).
# Where it is missing and we may install packages, install it; where we may
# not, say so and skip the C++ tests rather than fail the Python ones.
have_gtest() { [ -f /usr/include/gtest/gtest.h ] || [ -f /usr/local/include/gtest/gtest.h ]; }
if ! have_gtest; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q libgtest-dev >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libgtest-dev >/dev/null 2>&1; } ||
      true
  fi
fi
if have_gtest; then
  log=build/core-tests.log
  mkdir -p build
  { cmake -S xla_ffi -B build/core-tests -DGEARJAX_BUILD_EXTENSION=OFF -DGEARJAX_BUILD_TESTS=ON \
      -DGEARJAX_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug &&
    cmake --build build/core-tests -j "$(nproc)" &&
    ctest --test-dir build/core-tests --output-on-failure -j "$(nproc)"; } >"$log" 2>&1 ||
    { cat "$log"; echo "scripts/test.sh: the native core's C++ unit tests failed" >&2; exit 1; }
  tail -n 3 "$log"
else
  echo "scripts/test.sh: GoogleTest not found (install libgtest-dev): skipping the C++ unit" \
       "tests of the native core" >&2
fi

# NIXL for the nixl exchange's tests: its wheel declares torch but never
# imports it, and an extra cannot say --no-deps, so it is installed here
# without dependencies (it needs only numpy). Offline, its tests skip.
python -m pip install --quiet --no-deps "nixl-cu12==1.5.1" "nixl==1.5.1" ||
  echo "scripts/test.sh: could not install NIXL; the nixl exchange's tests will skip" >&2

# pyverbs for the verbs exchange must match the system's rdma-core, so it comes
# from the system's packages (Debian/Ubuntu: python3-pyverbs), made visible to
# this environment alone by a .pth file. Without an RDMA device (no machine we
# run on has one) the verbs tests skip, saying that listing devices failed;
# without pyverbs they skip saying that.
if ! python -c "import pyverbs" 2>/dev/null; then
  system=/usr/lib/python3/dist-packages/pyverbs
  if [ ! -d "$system" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q python3-pyverbs >/dev/null 2>&1 || true
  fi
  if [ -d "$system" ]; then
    mkdir -p .venv/system-pyverbs && ln -sfn "$system" .venv/system-pyverbs/pyverbs
    pth="$(python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/gearjax-system-pyverbs.pth"
    echo "$PWD/.venv/system-pyverbs" >"$pth"
    python -c "import pyverbs" 2>/dev/null || { rm -f "$pth";
      echo "scripts/test.sh: the system's pyverbs does not import in .venv; the verbs tests will skip" >&2; }
  fi
fi

# The test-only submodule is built in (see _env.sh): tests that need it must
# not skip here.
export GEARJAX_REQUIRE_TESTING_MODULE=1
exec pytest "$@"

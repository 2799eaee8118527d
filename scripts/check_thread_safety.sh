#!/usr/bin/env bash
# Checks the native core's lock requirements with clang's thread safety
# analysis (xla_ffi/core/thread_annotations.h): every source of the core is
# compiled for syntax only with -Wthread-safety as an error, so a field read
# without the mutex that guards it, or a "...Locked" function called without
# it, fails, wherever a mutex is annotated (the table's and the NIXL agent's;
# thread_annotations.h says which are not). Needs clang++ (Debian: apt-get install clang-14); CLANGXX picks
# one. Usage: bash scripts/check_thread_safety.sh [-j N | --which]
# (--which: print the clang++ it would use, exit 2 where none is found).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=2
if [ "${1:-}" = "-j" ]; then jobs="$2"; fi
clangxx="${CLANGXX:-}"
if [ -z "$clangxx" ]; then
  for candidate in clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    if command -v "$candidate" >/dev/null; then clangxx="$candidate"; break; fi
  done
fi
if [ -z "$clangxx" ]; then
  echo "scripts/check_thread_safety.sh: no clang++ found (apt-get install clang-14)" >&2
  exit 2
fi
if [ "${1:-}" = "--which" ]; then echo "$clangxx"; exit 0; fi
flags=(-std=c++20 -fsyntax-only -Ixla_ffi -Wthread-safety -Werror=thread-safety
       -Wno-unknown-warning-option)
# First, that the analysis is on: a field read without its mutex must fail
# (else the annotations would have expanded to nothing and every check pass).
probe='#include "core/thread_annotations.h"
struct Probe { gearjax::Mutex mu; int value GEARJAX_GUARDED_BY(mu) = 0; };
int Read(Probe& p) { return p.value; }'
refusal=$(printf '%s\n' "$probe" | "$clangxx" "${flags[@]}" -x c++ - 2>&1 || true)
if [[ "$refusal" != *"requires holding mutex"* ]]; then
  echo "scripts/check_thread_safety.sh: $clangxx did not refuse a read without its mutex:" \
       "the analysis is off" >&2
  exit 1
fi
find xla_ffi/core -name '*.cc' ! -name '*_test.cc' -print0 | sort -z |
  xargs -0 -n 4 -P "$jobs" "$clangxx" "${flags[@]}"
echo "scripts/check_thread_safety.sh: $("$clangxx" --version | head -n 1): no lock requirement broken"

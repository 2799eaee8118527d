#!/usr/bin/env bash
# Prints the path of the Python that scripts/_env.sh builds its environment
# with: the newest Python >= 3.12 found (on PATH, then under pyenv), or, given a
# minor version (`bash scripts/find_python.sh 3.11`), the newest of that minor.
# Fails, saying what it looked for, when there is none. A pyenv shim counts
# only where it runs (a shim for a version that is not selected fails).
set -euo pipefail
wanted="${1:-}"
if [ -n "$wanted" ] && ! [[ "$wanted" =~ ^3\.[0-9]+$ ]]; then
  echo "scripts/find_python.sh: give a version as 3.N (e.g. 3.12), not '$wanted'" >&2
  exit 2
fi

# The version of a working interpreter as "3 N path", or nothing.
probe() {
  "$1" -c 'import sys, venv; print(*sys.version_info[:2], sys.executable)' 2>/dev/null || true
}

candidates=()
for minor in 20 19 18 17 16 15 14 13 12 11; do
  if [ -n "$wanted" ] && [ "3.$minor" != "$wanted" ]; then continue; fi
  if command -v "python3.$minor" >/dev/null 2>&1; then
    candidates+=("$(command -v "python3.$minor")")
  fi
  if command -v pyenv >/dev/null 2>&1; then
    root=$(pyenv root)
    # Newest patch release first.
    while IFS= read -r dir; do
      candidates+=("$dir/bin/python3.$minor")
    done < <(find "$root/versions" -maxdepth 1 -name "3.$minor.*" 2>/dev/null | sort -rV)
  fi
done

for candidate in "${candidates[@]}"; do
  [ -x "$candidate" ] || continue
  read -r major minor path <<<"$(probe "$candidate")" || continue
  [ -n "${path:-}" ] || continue
  if [ -n "$wanted" ] || [ "$minor" -ge 12 ]; then
    echo "$path"
    exit 0
  fi
done
echo "scripts/find_python.sh: no Python ${wanted:->= 3.12} found on PATH or under pyenv" >&2
exit 1

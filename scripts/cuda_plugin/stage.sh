#!/usr/bin/env bash
# Stages the CUDA plugin wheel's project in the folder $1 (made anew): its
# pyproject.toml (pyproject.toml.in with gearjax's version filled in), the
# gearjax_cuda13_plugin package, a copy of xla_ffi/ (the native sources), the
# script that fetches a CUDA 13 compiler from PyPI (toolkit_from_pypi.sh) and
# tests/wheel_smoke.py (what cibuildwheel runs on each plugin wheel).
# scripts/build_wheels.sh builds from it; so does .github/workflows/wheels.yml
# (through cibuildwheel, whose settings are in pyproject.toml.in).
#
#   bash scripts/cuda_plugin/stage.sh build/plugin-src
set -euo pipefail
out="${1:?usage: stage.sh OUTPUT_FOLDER}"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
here="scripts/cuda_plugin"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)
if [ -z "$version" ]; then
  echo "scripts/cuda_plugin/stage.sh: no version in pyproject.toml" >&2
  exit 1
fi
case "$out" in /*) ;; *) out="$PWD/$out";; esac
rm -rf "$out"
mkdir -p "$out"
cp -r xla_ffi "$here/gearjax_cuda13_plugin" "$out/"
cp "$here/toolkit_from_pypi.sh" tests/wheel_smoke.py "$out/"
sed "s/@VERSION@/$version/g" "$here/pyproject.toml.in" >"$out/pyproject.toml"

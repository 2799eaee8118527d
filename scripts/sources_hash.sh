#!/usr/bin/env bash
# Prints one line per file a gearjax build reads (the package's and native
# sources, pyproject.toml) with its SHA-256: what scripts/_env.sh and
# scripts/test_jax_minors.sh fingerprint a build by, with their settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
find gearjax xla_ffi pyproject.toml -type f ! -path '*/__pycache__/*' ! -name '*.so' \
  ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum

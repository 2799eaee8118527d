#!/usr/bin/env bash
# Set-up command 1: install gearjax into .venv with what the main job needs
# (the "rl" extra; scripts/_env.sh builds the native extension only when its
# sources changed) and run the main job: train a decision transformer on the
# built-in default dataset and evaluate it (72-101 s a run on a 2-core CPU,
# benchmarks/results/dt_vs_bc_mountaincar_cpu.json). Extra arguments go to
# `gearjax-train` (see `gearjax-train --help`).
GEARJAX_EXTRA=rl
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
if [ -n "${GEARJAX_ENV_DRY_RUN:-}" ]; then exit 0; fi
exec gearjax-train "$@"

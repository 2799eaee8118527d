#!/usr/bin/env bash
# Set-up command 1: install gearjax into .venv and run the main job: train a
# decision transformer on the built-in default dataset and evaluate it (72-101 s
# a run on a 2-core CPU, benchmarks/results/dt_vs_bc_mountaincar_cpu.json).
# Extra arguments go to `gearjax-train`
# (see `gearjax-train --help`).
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
exec gearjax-train "$@"

#!/usr/bin/env bash
# Set-up command 1: install gearjax into .venv and run the main job: train a
# decision transformer on the built-in default dataset and evaluate it (about
# two minutes on a 2-core CPU). Extra arguments go to `gearjax-train`
# (see `gearjax-train --help`).
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
exec gearjax-train "$@"

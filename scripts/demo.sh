#!/usr/bin/env bash
# Set-up command 1: install gearjax into .venv and run the built-in demo
# (fills a table, trains a small policy with jitted sampling). Extra arguments
# go to the demo (see `gearjax-demo --help`).
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
exec gearjax-demo "$@"

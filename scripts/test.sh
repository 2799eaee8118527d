#!/usr/bin/env bash
# Set-up command 2: install gearjax into .venv and run the test suite against
# the installed package. Extra arguments go to pytest.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
exec pytest "$@"

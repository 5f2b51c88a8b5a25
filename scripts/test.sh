#!/usr/bin/env bash
# The test suite: set up the three environments, then run every test from the
# aggregator's environment (the runners start from their own).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_envs.sh
# -rs: a skipped test says why in the summary (the container tests skip only without a Docker engine).
exec "${FWBENCH_VENVS:-.venvs}/aggregator/bin/python" -m pytest -rs tests "$@"

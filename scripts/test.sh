#!/usr/bin/env bash
# The test suite: set up the three environments, then run every test from the
# aggregator's environment (the runners start from their own).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_envs.sh
exec "${FWBENCH_VENVS:-.venvs}/aggregator/bin/python" -m pytest tests "$@"

#!/usr/bin/env bash
# The test suite: set up every environment, then run every tier of tests from the aggregator's environment (the
# runners start from their own). pytest.ini's default is the fast tier; -m "" selects every tier (real frameworks,
# containers, Slurm, the browser). Extra arguments go to pytest, e.g. `bash scripts/test.sh -m frameworks -k parity`.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each environment's set-up and image build, and each tier's time, go to one table at the end (tests/support/timings.py).
export FWBENCH_TIMINGS=${FWBENCH_TIMINGS:-$(mktemp -t fwbench-timings.XXXXXX)}
started=$SECONDS
bash scripts/setup_envs.sh
printf 'setup\tall environments (in parallel)\t%s\n' $((SECONDS - started)) >> "$FWBENCH_TIMINGS"
# -rs: a skipped test says why in the summary (the container tests skip only without a Docker engine);
# --durations: the slowest tests, so that the tiers' cost stays visible.
exec "${FWBENCH_VENVS:-.venvs}/aggregator/bin/python" -m pytest -m "" -rs --durations=25 "$@"

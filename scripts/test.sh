#!/usr/bin/env bash
# The test suite: set up every environment, then run every tier of tests from the aggregator's environment (the
# runners start from their own). pytest.ini's default is the fast tier; -m "" selects every tier (real frameworks,
# containers, Slurm, the browser). Extra arguments go to pytest, e.g. `bash scripts/test.sh -m frameworks -k parity`.
#
# Without arguments (or with -q alone, as CI calls it) the suite runs in three parts, the container tests (which wait
# on image builds) beside the first two. First the runner-direct tests (conformance over gRPC, and parity) in two
# processes: both cores stay busy. Then every other test but those marked quiet, in three processes, a file to each
# (pytest.ini): they wait on subprocesses, runners and timeouts more than they compute. Where the images are built
# already the container tests end within the first part; where they are not (a fresh machine) they run on into the
# second, instead of the second waiting for them (on a fresh machine, 2026-12-02: conformance and parity took
# 1462 s beside the containers' 1696 s). Last, the quiet ones, which judge measured times or time limits, one at a
# time with nothing beside them.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each environment's set-up and image build, and each tier's time, go to one table at the end (tests/support/timings.py).
export FWBENCH_TIMINGS=${FWBENCH_TIMINGS:-$(mktemp -t fwbench-timings.XXXXXX)}
started=$SECONDS
bash scripts/setup_envs.sh
printf 'setup\tall environments (in parallel)\t%s\n' $((SECONDS - started)) >> "$FWBENCH_TIMINGS"
pytest=("${FWBENCH_VENVS:-.venvs}/aggregator/bin/python" -m pytest -m "" -rs)
# -rs: a skipped test says why in the summary (the container tests skip only without a Docker engine);
# --durations: the slowest tests, so that the tiers' cost stays visible.
if [ $# -gt 1 ] || { [ $# -eq 1 ] && [ "$1" != "-q" ]; }; then
  exec "${pytest[@]}" --durations=25 "$@"
fi
# Only these in the first part: adding the plug-in, distributed, stub and lock tests (about 600 s alone) stretched it
# to 47 minutes (24 in an earlier CI) on a 2-core VM and failed them on their own time limits (2026-11-28).
parallel=(tests/test_conformance.py tests/test_parity.py)
beside=tests/test_containers.py
line() {  # line NAME SECONDS: one line of the table at the end
  printf 'part\t%s\t%s\n' "$1" "$2" >> "$FWBENCH_TIMINGS"
}
log=$(mktemp -t fwbench-containers.XXXXXX)
ended=$(mktemp -t fwbench-containers-ended.XXXXXX)
first=$SECONDS
{ code=0; FWBENCH_TIMINGS_TABLE_LATER=1 "${pytest[@]}" -n 0 --durations=10 "$@" "$beside" > "$log" 2>&1 || code=$?
  echo "$SECONDS" > "$ended"; exit "$code"; } &
containers=$!
status=0
# The Keras runners' conformance and parity come after, in one process: each of the two processes here starts every
# runner its tests name, and with the Keras runners too (six real runners of 1.5-2 GB) the two filled this VM's 24 GB
# beside the image builds, and the kernel killed runners (2026-12-04).
FWBENCH_TIMINGS_TABLE_LATER=1 "${pytest[@]}" -n 2 --dist load --durations=10 -k "not keras" "$@" "${parallel[@]}" \
  || status=$?
line "1: conformance, parity (2 processes)" $((SECONDS - first))
keras=$SECONDS
FWBENCH_TIMINGS_TABLE_LATER=1 "${pytest[@]}" -n 0 --durations=10 -k keras "$@" "${parallel[@]}" || status=$((status ? status : $?))
line "1b: the Keras runners' conformance and parity (1 process)" $((SECONDS - keras))
rest=$(printf -- '--ignore=%s ' "${parallel[@]}" "$beside")
second=$SECONDS
# shellcheck disable=SC2086  # $rest is a list of options
FWBENCH_TIMINGS_TABLE_LATER=1 "${pytest[@]}" -m "not quiet" --durations=25 "$@" $rest || status=$((status ? status : $?))
line "2: all but those marked quiet (3 processes)" $((SECONDS - second))
wait "$containers" || status=$((status ? status : $?))
line "the containers, from part 1's start (beside 1, and 2 if need be)" $(($(cat "$ended") - first))
line "1 and 2, the containers beside them" $((SECONDS - first))
printf 'pytest\twall time\t%s\n' $((SECONDS - first)) >> "$FWBENCH_TIMINGS"
rm -f "$ended"
echo "--- the container tests, run beside them:"
cat "$log"
# The last run prints the table of all three parts (its own wall time included).
# shellcheck disable=SC2086
"${pytest[@]}" -m quiet -n 0 --durations=10 "$@" $rest || status=$((status ? status : $?))
exit "$status"

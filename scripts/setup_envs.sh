#!/usr/bin/env bash
# Create the embedded environments under .venvs/ (or $FWBENCH_VENVS): the aggregator's, and one per runner that
# aggregator/fwbench_aggregator/base/frameworks.toml declares. The frameworks never share one.
#   setup_envs.sh                 every framework's
#   setup_envs.sh --default       those a comparison starts when the user names none (the main job's)
#   setup_envs.sh NAME ...        the named frameworks' (the aggregator makes one so the first time it is named)
# Each environment installs exactly its lock (requirements*.lock, made by scripts/lock.sh) with uv; a lock that no
# longer matches its requirements is refused. Re-running is cheap: an environment whose inputs did not change is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venvs=${FWBENCH_VENVS:-$root/.venvs}
python=${PYTHON:-python3}
mkdir -p "$venvs"
. "$root/scripts/env_lib.sh"

# The runner list, as NAME ENVIRONMENT FOLDER lines (the reader needs only the standard library).
wanted=("$@")
if [ "${1:-}" = --default ]; then
  runners=$("$python" aggregator/fwbench_aggregator/base/frameworks.py --default)
  wanted=()
else
  runners=$("$python" aggregator/fwbench_aggregator/base/frameworks.py)
fi
if [ ${#wanted[@]} -gt 0 ]; then
  runners=$(while read -r name rest; do
    for w in "${wanted[@]}"; do if [ "$w" = "$name" ]; then echo "$name $rest"; fi; done
  done <<< "$runners")
  [ -n "$runners" ] || { echo "setup_envs.sh: no framework named ${wanted[*]}; known: $("$python" aggregator/fwbench_aggregator/base/frameworks.py | cut -d' ' -f1 | tr '\n' ' ')" >&2; exit 2; }
fi

# Every lock is checked before anything is installed.
locks_ok=0
while read -r name environment folder; do
  check_lock "$folder/requirements.txt" || locks_ok=2
done <<< "$runners"
check_lock aggregator/requirements-test.txt || locks_ok=2
[ $locks_ok -eq 0 ] || exit 2
ensure_uv

# The installs run in parallel (uv links each package from its cache); each writes its own log.
pids=()
names=()
while read -r name environment folder; do
  make_env "$environment" "$venvs/$environment" "$folder/requirements.lock" runners/core/pyproject.toml \
    "$folder/pyproject.toml" > "$venvs/$environment-setup.log" 2>&1 & pids+=($!)
  names+=("$environment")
done <<< "$runners"
make_env aggregator "$venvs/aggregator" aggregator/requirements-test.lock runners/core/pyproject.toml \
  aggregator/pyproject.toml > "$venvs/aggregator-setup.log" 2>&1 & pids+=($!)
names+=(aggregator)
status=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || status=1
done
for name in "${names[@]}"; do
  if grep -q "^\[$name\] \(ready\|up to date\)" "$venvs/$name-setup.log"; then
    tail -n 1 "$venvs/$name-setup.log"
  else
    cat "$venvs/$name-setup.log"
  fi
done
if [ $status -ne 0 ]; then
  echo "setting up an environment failed; its log is above" >&2
  exit 1
fi

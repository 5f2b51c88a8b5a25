#!/usr/bin/env bash
# Create the embedded environments under .venvs/ (or $FWBENCH_VENVS): the aggregator's, and one per runner that
# aggregator/fwbench_aggregator/base/frameworks.toml declares. The frameworks never share one; a Keras runner
# runs in the environment of the framework it runs on.
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

# The environments to make, as ENVIRONMENT OWNER_FOLDER [FOLDER ...] lines: the owner's lock makes it, and every
# runner that shares it (a Keras runner, in its backend's) installs its package there too. The reader needs only the
# standard library, and refuses an unknown name.
if [ "${1:-}" = --default ]; then
  environments=$("$python" aggregator/fwbench_aggregator/base/frameworks.py --environments --default)
else
  environments=$("$python" aggregator/fwbench_aggregator/base/frameworks.py --environments "$@") || exit 2
fi

# Every lock is checked before anything is installed.
locks_ok=0
while read -r environment owner folders; do
  check_lock "$owner/requirements.txt" || locks_ok=2
done <<< "$environments"
check_lock aggregator/requirements-test.txt || locks_ok=2
[ $locks_ok -eq 0 ] || exit 2
ensure_uv

# The installs run in parallel (uv links each package from its cache); each writes its own log.
pids=()
names=()
while read -r environment owner folders; do
  pyprojects=()
  for folder in $owner $folders; do pyprojects+=("$folder/pyproject.toml"); done
  make_env "$environment" "$venvs/$environment" "$owner/requirements.lock" runners/core/pyproject.toml \
    "${pyprojects[@]}" > "$venvs/$environment-setup.log" 2>&1 & pids+=($!)
  names+=("$environment")
done <<< "$environments"
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

#!/usr/bin/env bash
# Create the embedded environments under .venvs/ (or $FWBENCH_VENVS): the aggregator's, and one per runner that
# aggregator/fwbench_aggregator/base/frameworks.toml declares. The frameworks never share one.
#   setup_envs.sh                 every framework's
#   setup_envs.sh --default       those a comparison starts when the user names none (the main job's)
#   setup_envs.sh NAME ...        the named frameworks' (the aggregator makes one so the first time it is named)
# Re-running is cheap: an environment whose inputs did not change is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venvs=${FWBENCH_VENVS:-$root/.venvs}
python=${PYTHON:-python3}
mkdir -p "$venvs"

setup_env() {
  local name=$1 requirements=$2; shift 2
  local env=$venvs/$name
  local stamp included started=$SECONDS
  # A requirements file's own "-r" includes count as its inputs too.
  included=$(sed -n "s|^-r |$(dirname "$requirements")/|p" "$requirements")
  stamp=$(cat "$requirements" $included "$@" protos/generate.py protos/install_stubs.sh protos/fwbench/runner/v1/*.proto "$root/scripts/setup_envs.sh" | sha256sum | cut -d' ' -f1)
  if [ -f "$env/.fwbench-stamp" ] && [ "$(cat "$env/.fwbench-stamp")" = "$stamp" ]; then
    echo "[$name] up to date ($env)"
    return
  fi
  echo "[$name] installing into $env"
  rm -rf "$env"
  "$python" -m venv "$env"
  "$env/bin/python" -m pip install -q --upgrade pip
  # Byte-compiled at install (about a minute more): where PYTHONDONTWRITEBYTECODE is set, as on CI hosts and in many
  # images, Python never writes what it compiles, and every runner and worker process compiled torch or TensorFlow
  # from source again (a DDP worker spent over 9 s importing torchvision, past its job's rendezvous timeout).
  "$env/bin/python" -m pip install -q -r "$requirements"
  local packages=()
  for pyproject in "$@"; do packages+=(-e "$(dirname "$pyproject")"); done
  "$env/bin/python" -m pip install -q --no-deps "${packages[@]}"
  sh "$root/protos/install_stubs.sh" "$env/bin/python"
  echo "$stamp" > "$env/.fwbench-stamp"
  echo "[$name] ready"
  timing "$name" $((SECONDS - started))
}

# A test run's timings file (scripts/test.sh) gets each environment's set-up time.
timing() { if [ -n "${FWBENCH_TIMINGS:-}" ]; then printf 'setup\tenvironment %s\t%s\n' "$1" "$2" >> "$FWBENCH_TIMINGS"; fi; }

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

# The installs download in parallel; each writes its own log.
pids=()
names=()
while read -r name environment folder; do
  setup_env "$environment" "$folder/requirements.txt" runners/core/pyproject.toml "$folder/pyproject.toml" \
    > "$venvs/$environment-setup.log" 2>&1 & pids+=($!)
  names+=("$environment")
done <<< "$runners"
setup_env aggregator aggregator/requirements-test.txt runners/core/pyproject.toml aggregator/pyproject.toml \
  > "$venvs/aggregator-setup.log" 2>&1 & pids+=($!)
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

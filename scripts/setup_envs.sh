#!/usr/bin/env bash
# Create the three embedded environments (torch runner, TensorFlow runner,
# aggregator) under .venvs/ (or $FWBENCH_VENVS). The frameworks never share one.
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
  local stamp included
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
  "$env/bin/python" -m pip install -q -r "$requirements"
  local packages=()
  for pyproject in "$@"; do packages+=(-e "$(dirname "$pyproject")"); done
  "$env/bin/python" -m pip install -q --no-deps "${packages[@]}"
  sh "$root/protos/install_stubs.sh" "$env/bin/python"
  echo "$stamp" > "$env/.fwbench-stamp"
  echo "[$name] ready"
}

# The three installs download in parallel; each writes its own log.
pids=()
setup_env torch runners/torch/requirements.txt runners/core/pyproject.toml runners/torch/pyproject.toml \
  > "$venvs/torch-setup.log" 2>&1 & pids+=($!)
setup_env tensorflow runners/tensorflow/requirements.txt runners/core/pyproject.toml runners/tensorflow/pyproject.toml \
  > "$venvs/tensorflow-setup.log" 2>&1 & pids+=($!)
setup_env aggregator aggregator/requirements-test.txt runners/core/pyproject.toml aggregator/pyproject.toml \
  > "$venvs/aggregator-setup.log" 2>&1 & pids+=($!)
status=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || status=1
done
for name in torch tensorflow aggregator; do
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

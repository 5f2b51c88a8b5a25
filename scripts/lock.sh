#!/usr/bin/env bash
# Make every environment's lock from its requirements: requirements*.lock beside each requirements*.txt, every
# package at its exact version with its hashes, for CPython 3.11 on x86-64 Linux (the embedded environments and
# the images). Run it after changing a requirements file, and commit the locks; set-up refuses a lock that no
# longer matches its requirements. scripts/setup_envs.sh installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venvs=${FWBENCH_VENVS:-$root/.venvs}
python=${PYTHON:-python3}
mkdir -p "$venvs"
. "$root/scripts/env_lib.sh"
ensure_uv
# Each environment's lock is its owner's (a Keras runner installs its package into its backend's).
folders=$("$python" aggregator/fwbench_aggregator/base/frameworks.py --environments | cut -d' ' -f2)
for requirements in aggregator/requirements.txt aggregator/requirements-test.txt $(printf '%s/requirements.txt ' $folders); do
  write_lock "$requirements" "$(lock_of "$requirements")"
  echo "$(lock_of "$requirements"): $(grep -c '^[a-z0-9]' "$(lock_of "$requirements")") packages"
done

#!/usr/bin/env bash
# Make an embedded environment for one pinned version of a framework: .venvs/FRAMEWORK@VERSION (or under
# $FWBENCH_VENVS), from that framework's requirements.txt with its pin replaced. fwbench starts the runner labelled
# FRAMEWORK@VERSION from it: a sweep file's `versions: {FRAMEWORK: [VERSION, ...], embedded: true}`, or
# `--frameworks FRAMEWORK@VERSION` (docs/versions.md).
#   setup_version_env.sh torch 2.8.0 torchvision==0.23.0   # torch's pin, and every pin that must move with it
#   setup_version_env.sh tensorflow 2.20.0 keras==3.10.0
# A pin not in the requirements is refused by name. The environment installs a lock made from them (kept beside it
# as FRAMEWORK@VERSION.requirements.lock) with uv. Re-running is cheap: an unchanged environment is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=${PYTHON:-python3}
if [ $# -lt 2 ]; then
  echo "usage: $0 FRAMEWORK VERSION [PACKAGE==VERSION ...]" >&2
  exit 2
fi
framework=$1 version=$2
shift 2
line=$("$python" aggregator/fwbench_aggregator/base/frameworks.py | awk -v name="$framework" '$1 == name')
if [ -z "$line" ]; then
  echo "setup_version_env.sh: no framework named $framework; known: $("$python" aggregator/fwbench_aggregator/base/frameworks.py | cut -d' ' -f1 | tr '\n' ' ')" >&2
  exit 2
fi
read -r _ environment folder <<< "$line"
if [ "$environment" != "$framework" ]; then
  echo "setup_version_env.sh: $framework runs in the $environment environment; make a version of $environment instead" >&2
  exit 2
fi
venvs=${FWBENCH_VENVS:-$root/.venvs}
env=$venvs/$framework@$version
mkdir -p "$venvs"

# The framework's requirements with each given pin in place of its own (the framework's package is named as it).
requirements=$env.requirements.txt
"$python" - "$folder/requirements.txt" "$framework==$version" "$@" > "$requirements" <<'PY'
import re
import sys

path, *pins = sys.argv[1:]
wanted = {}
for pin in pins:
    name, sep, _ = pin.partition("==")
    if not sep or not name:
        sys.exit(f"{pin!r} is not PACKAGE==VERSION")
    wanted[name.lower()] = pin
lines = open(path).read().splitlines()
for line in lines:
    name = re.split(r"[=<>!~\[; ]", line.strip(), maxsplit=1)[0].lower()
    print(wanted.pop(name, line) if name and not line.lstrip().startswith("#") else line)
if wanted:
    sys.exit(f"{', '.join(wanted)} is not pinned in {path}; accepted: the packages it pins")
PY

# Its lock, made once beside the environment from those requirements and kept while they stay the same, so that a
# later set-up of this version installs the same packages (scripts/env_lib.sh).
. "$root/scripts/env_lib.sh"
ensure_uv
lock=$env.requirements.lock
if ! check_lock "$requirements" 2>/dev/null; then
  echo "[$framework@$version] locking $requirements into $lock"
  write_lock "$requirements" "$lock"
fi
# Every package its environment installs (the Keras runners' beside TensorFlow's, whose models they hold).
read -r _ _ folders <<< "$("$python" aggregator/fwbench_aggregator/base/frameworks.py --environments "$framework")"
pyprojects=()
for each in $folder $folders; do pyprojects+=("$each/pyproject.toml"); done
make_env "$framework@$version" "$env" "$lock" runners/core/pyproject.toml "${pyprojects[@]}"
echo "[$framework@$version] ready: fwbench starts the runner labelled $framework@$version from it"

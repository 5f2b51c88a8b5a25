#!/bin/sh
# The runner layer of a framework image, in steps the Dockerfile caches apart:
#   install.sh deps LOCK REQUIREMENTS...   the dependencies of the core and the runner
#   install.sh packages PROJECT...         the core's and the runner's own code
# Every package the base image ships is pinned at its version (a constraints
# file made from the image itself), so installing the runner can add packages
# but never upgrade or downgrade the framework's own, protobuf and numpy included.
# Every other package takes its version from LOCK, the embedded environment's
# lock (scripts/lock.sh), so that the image's runner layer is the same software
# as the embedded runner's; the lock's sha256 is left where the runner reports it.
set -eu
python=${PYTHON:-python3}
state=/opt/fwbench
base_packages=$state/base-packages.txt

case "${1:-}" in
  deps)
    shift
    lock=$1; shift
    requirements=""
    for file in "$@"; do requirements="$requirements -r $file"; done
    mkdir -p "$state"
    "$python" -m pip list --format=freeze > "$base_packages"
    # The lock applies where the base agrees with it (every package both pin at one version: a base built from
    # the lock, as CI's are). A base of another framework version keeps the newest versions that fit it: the
    # lock's would not (grpcio-health-checking 1.85's generated code needs the protobuf 6 runtime, which
    # TensorFlow 2.20's base, at protobuf 5, cannot load).
    "$python" - "$lock" "$base_packages" > "$state/lock-pins.txt" <<'PY'
import re
import sys


def name(line):
    return re.split(r"[=<>!~\[; ]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")


pins = [m.group(1) for m in (re.match(r"^([A-Za-z0-9_.-]+==[^\s;\\]+)", line) for line in open(sys.argv[1])) if m]
base = {name(line): line.strip() for line in open(sys.argv[2]) if "==" in line and not line.startswith("#")}
differ = [f"{base[name(pin)]} (lock: {pin})" for pin in pins
          if name(pin) in base and name(pin) not in ("pip", "setuptools", "wheel") and base[name(pin)].split("==")[1] != pin.split("==")[1]]
if differ:
    print(f"the base differs from {sys.argv[1]} ({', '.join(differ[:3])}): its own versions rule", file=sys.stderr)
else:
    print("\n".join(pin for pin in pins if name(pin) not in base))
PY
    "$python" -m pip install -q --no-cache-dir -c "$base_packages" -c "$state/lock-pins.txt" $requirements
    if [ -s "$state/lock-pins.txt" ]; then
      sha256sum "$lock" | cut -d' ' -f1 > "$("$python" -c 'import sys; print(sys.prefix)')/fwbench-lock.sha256"
    fi
    ;;
  packages)
    shift
    "$python" -m pip install -q --no-cache-dir --no-deps "$@"
    # Fail the build, naming the package, if anything the base image shipped has moved.
    "$python" -m pip list --format=freeze | grep -vxFf - "$base_packages" > "$state/moved.txt" || true
    if [ -s "$state/moved.txt" ]; then
      echo "the runner layer changed packages of the base image:" >&2
      cat "$state/moved.txt" >&2
      exit 1
    fi
    "$python" -m pip list --format=freeze > "$state/packages.txt"
    ;;
  *)
    echo "usage: install.sh deps LOCK REQUIREMENTS... | install.sh packages PROJECT..." >&2
    exit 2
    ;;
esac

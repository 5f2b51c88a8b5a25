#!/bin/sh
# The runner layer of a framework image, in steps the Dockerfile caches apart:
#   install.sh deps REQUIREMENTS PROJECT...  the runner's dependencies
#   install.sh packages PROJECT...           the runner's own code
# Every package the base image ships is pinned at its version (a constraints
# file made from the image itself), so installing the runner can add packages
# but never upgrade or downgrade the framework's own, protobuf and numpy included.
set -eu
python=${PYTHON:-python3}
state=/opt/fwbench
base_packages=$state/base-packages.txt

case "${1:-}" in
  deps)
    shift
    requirements=$1; shift
    mkdir -p "$state"
    "$python" -m pip list --format=freeze > "$base_packages"
    "$python" -m pip install -q --no-cache-dir -c "$base_packages" -r "$requirements" "$@"
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
    echo "usage: install.sh deps REQUIREMENTS PROJECT... | install.sh packages PROJECT..." >&2
    exit 2
    ;;
esac

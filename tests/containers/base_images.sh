#!/usr/bin/env bash
# Make the base images CI builds the runner images on. CI's Docker engine can
# pull nothing, so instead of pytorch/pytorch, tensorflow/tensorflow and
# nvcr.io/nvidia/jax we make a Debian root filesystem with debootstrap, load it
# with `docker import`, and install Python and the framework from PyPI on top,
# the way the official images carry them (system Python, the framework in its
# site-packages; NVIDIA's JAX image ships Flax and optax beside JAX).
#
#   base_images.sh python                      -> fwbench-ci/python:3.11
#   base_images.sh torch VERSION PACKAGES...   -> fwbench-ci/pytorch:VERSION
#   base_images.sh tensorflow VERSION PACKAGES... -> fwbench-ci/tensorflow:VERSION
#   base_images.sh jax VERSION PACKAGES...     -> fwbench-ci/jax:VERSION
#
# An image whose recipe (this script, its arguments and, for a framework, its lock) did not change is kept.
#
# FWBENCH_BASE_LOCK=FILE: a lock (scripts/lock.sh) whose versions constrain every package installed, so that the
# base image carries the framework and its dependencies exactly as the embedded environment of that lock does.
# FWBENCH_UV=PATH: install with this uv binary and the host's uv cache (UV_CACHE_DIR, default ~/.cache/uv) mounted,
# so that what set-up downloaded for the embedded environments is not downloaded again (a torch base: ~4 GB).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
suite=bookworm
python_image=fwbench-ci/python:3.11
# The host's trust store goes into the image so that pip in a container trusts
# whatever the host trusts (an egress proxy's CA, say).
host_ca_bundle=/etc/ssl/certs/ca-certificates.crt

# A recipe: this script and the arguments; a framework's also its lock. The Python image's is the same whichever
# framework asks for it, so that one debootstrap serves them all.
recipe() { { cat "$here/base_images.sh"; printf '%s\n' "$@"; } | sha256sum | cut -c1-16; }

current() {  # current IMAGE RECIPE: is IMAGE there and built from RECIPE?
  [ "$(docker image inspect --format '{{ index .Config.Labels "fwbench.ci.recipe" }}' "$1" 2>/dev/null)" = "$2" ]
}

make_python() {
  local id; id=$(recipe python "$suite")
  if current "$python_image" "$id"; then echo "$python_image is up to date"; return; fi
  command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }
  local work; work=$(mktemp -d)
  echo "debootstrap $suite into $work (about a minute)"
  debootstrap --variant=minbase --include=python3,python3-pip,ca-certificates \
    "$suite" "$work/rootfs" http://deb.debian.org/debian > "$work/debootstrap.log" 2>&1 \
    || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
  cp "$host_ca_bundle" "$work/rootfs/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$work/rootfs/var/cache/apt/archives"/*.deb "$work/rootfs/var/lib/apt/lists"/*
  tar -C "$work/rootfs" --numeric-owner -c . | docker import \
    --change "LABEL fwbench.ci.recipe=$id" \
    --change "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt" \
    --change 'CMD ["python3"]' \
    - "$python_image" > /dev/null
  rm -rf "$work"
  echo "built $python_image"
}

make_framework() {  # make_framework NAME VERSION PACKAGES...
  local name=$1 version=$2; shift 2
  local image=fwbench-ci/$name:$version id
  id=$(recipe "$name" "$version" "$@" "$(cat ${FWBENCH_BASE_LOCK:-} < /dev/null | sha256sum)")
  if current "$image" "$id"; then echo "$image is up to date"; return; fi
  make_python
  local container=fwbench-ci-base-$name-$$
  echo "installing $* into $image"
  docker rm "$container" > /dev/null 2>&1 || true
  local mounts=() constraints=()
  if [ -n "${FWBENCH_BASE_LOCK:-}" ]; then
    # The lock's pins without their hashes: a constraint says which version, not that the package is wanted.
    local pins; pins=$(mktemp)
    sed -n 's/^\([A-Za-z0-9_.-]*==[^ ;\\]*\).*/\1/p' "$FWBENCH_BASE_LOCK" > "$pins"
    mounts+=(-v "$pins:/fwbench-constraints.txt:ro"); constraints=(-c /fwbench-constraints.txt)
  fi
  if [ -n "${FWBENCH_UV:-}" ]; then
    local cache=${UV_CACHE_DIR:-$HOME/.cache/uv}
    mkdir -p "$cache"
    docker run --name "$container" -v "$FWBENCH_UV:/usr/local/bin/uv:ro" -v "$cache:/uv-cache" "${mounts[@]}" \
      --env UV_CACHE_DIR=/uv-cache --env UV_LINK_MODE=copy --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
      "$python_image" \
      uv pip install -q --system --break-system-packages "${constraints[@]}" "$@"
  else
    docker run --name "$container" --env PIP_ROOT_USER_ACTION=ignore "${mounts[@]}" "$python_image" \
      python3 -m pip install -q --no-cache-dir --break-system-packages "${constraints[@]}" "$@"
  fi
  docker commit --change "LABEL fwbench.ci.recipe=$id" "$container" "$image" > /dev/null
  docker rm "$container" > /dev/null
  echo "built $image"
}

case "${1:-}" in
  python) make_python ;;
  torch) shift; make_framework pytorch "$@" ;;
  tensorflow) shift; make_framework tensorflow "$@" ;;
  jax) shift; make_framework jax "$@" ;;
  *) echo "usage: $0 python | torch|tensorflow|jax VERSION PACKAGES..." >&2; exit 2 ;;
esac

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
# FWBENCH_UV=PATH: install with this uv binary, here on the host, from the host's uv cache, so that what set-up
# downloaded for the embedded environments is not downloaded again (a torch base: ~4 GB); see install_on_host.
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

import_rootfs() {  # import_rootfs DIR RECIPE IMAGE: a root filesystem as an image whose Python trusts the host's CAs
  tar -C "$1" --numeric-owner -c . | docker import \
    --change "LABEL fwbench.ci.recipe=$2" \
    --change "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt" \
    --change 'CMD ["python3"]' \
    - "$3" > /dev/null
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
  import_rootfs "$work/rootfs" "$id" "$python_image"
  rm -rf "$work"
  echo "built $python_image"
}

make_framework() {  # make_framework NAME VERSION PACKAGES...
  local name=$1 version=$2; shift 2
  local image=fwbench-ci/$name:$version id
  id=$(recipe "$name" "$version" "$@" "$(cat ${FWBENCH_BASE_LOCK:-} < /dev/null | sha256sum)")
  if current "$image" "$id"; then echo "$image is up to date"; return; fi
  make_python
  echo "installing $* into $image"
  local pins=""
  if [ -n "${FWBENCH_BASE_LOCK:-}" ]; then
    # The lock's pins without their hashes: a constraint says which version, not that the package is wanted.
    pins=$(mktemp)
    sed -n 's/^\([A-Za-z0-9_.-]*==[^ ;\\]*\).*/\1/p' "$FWBENCH_BASE_LOCK" > "$pins"
  fi
  if [ -n "${FWBENCH_UV:-}" ]; then
    install_on_host "$image" "$id" ${pins:+-c "$pins"} "$@"
  else
    install_in_container "$image" "$id" "$pins" "$@"
  fi
  [ -z "$pins" ] || rm -f "$pins"
  echo "built $image"
}

# install_in_container IMAGE RECIPE CONSTRAINTS PACKAGES...: pip in a container of the Python image, committed
# (CONSTRAINTS: a file, or "" for none).
install_in_container() {
  local image=$1 id=$2 pins=$3; shift 3
  local container=fwbench-ci-base-$$ mounts=() constraints=()
  if [ -n "$pins" ]; then
    mounts=(-v "$pins:/fwbench-constraints.txt:ro"); constraints=(-c /fwbench-constraints.txt)
  fi
  docker rm "$container" > /dev/null 2>&1 || true
  docker run --name "$container" --env PIP_ROOT_USER_ACTION=ignore "${mounts[@]}" "$python_image" \
    python3 -m pip install -q --no-cache-dir --break-system-packages "${constraints[@]}" "$@"
  docker commit --change "LABEL fwbench.ci.recipe=$id" "$container" "$image" > /dev/null
  docker rm "$container" > /dev/null
}

# install_on_host IMAGE RECIPE [-c CONSTRAINTS] PACKAGES...: the Python image's files, with the packages installed
# by uv into its site directory here on the host, loaded as one new image. Installing in a container and committing
# it wrote every file through the engine's fuse-overlayfs, then read it back for the commit: the torch base took
# 141 s that way against 83 s here on a quiet host, 261 s against 128 s beside CI's first part. `docker import`
# unpacks straight into the image's layer.
install_on_host() {
  local image=$1 id=$2; shift 2
  local work container version platform site
  work=$(mktemp -d)
  mkdir "$work/rootfs"
  # The image's Python decides the wheels: its version, and its C library's for the manylinux tag.
  read -r version platform < <(docker run --rm "$python_image" python3 -c \
    'import platform, sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}", platform.machine() + "-manylinux_"
     + platform.libc_ver()[1].replace(".", "_"))')
  container=$(docker create "$python_image")
  docker export "$container" | tar -C "$work/rootfs" -x
  docker rm "$container" > /dev/null
  # Debian's Python reads /usr/local/lib/python3.X/dist-packages, where pip --system installs.
  site=usr/local/lib/python$version/dist-packages
  mkdir -p "$work/rootfs/$site"
  # Copies, not uv's default hard links into its cache: the bases install at once, and one install linking a file
  # the other's tar is reading changes the file's ctime, which tar fails as "file changed as we read it".
  "$FWBENCH_UV" pip install -q --link-mode copy --target "$work/rootfs/$site" --python-version "$version" \
    --python-platform "$platform" "$@"
  # Console scripts go to /usr/local/bin, as pip's, calling the image's Python rather than the host's.
  if [ -d "$work/rootfs/$site/bin" ]; then
    sed -i '1s|^#!.*python.*$|#!/usr/bin/python3|' "$work/rootfs/$site/bin"/*
    mv "$work/rootfs/$site/bin"/* "$work/rootfs/usr/local/bin/"
    rmdir "$work/rootfs/$site/bin"
  fi
  import_rootfs "$work/rootfs" "$id" "$image"
  rm -rf "$work"
}

case "${1:-}" in
  python) make_python ;;
  torch) shift; make_framework pytorch "$@" ;;
  tensorflow) shift; make_framework tensorflow "$@" ;;
  jax) shift; make_framework jax "$@" ;;
  *) echo "usage: $0 python | torch|tensorflow|jax VERSION PACKAGES..." >&2; exit 2 ;;
esac

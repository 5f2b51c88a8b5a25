#!/usr/bin/env bash
# Pack .gpu/ (ignored by git) for a GPU machine that has Python 3.12 with torch, torchvision, numpy, pyarrow, scipy
# and matplotlib but no network (the device tool's machines): the gRPC, protobuf, CLI and pandas wheels this project
# pins, for x86-64 CPython 3.12. Then, there, `GPU_OUT=DIR bash benchmarks/gpu_acceptance.sh` (docs/development.md).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
pin() { sed -n "s/^$1==\([^ ;]*\).*/\1/p" aggregator/requirements.txt runners/torch/requirements.txt | head -1; }
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
rm -rf .gpu && mkdir -p .gpu/whl
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
get() { python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" -d .gpu/whl "$@"; }
get "grpcio==$(pin grpcio)" "grpcio-tools==$(pin grpcio)" "grpcio-health-checking==$(pin grpcio)" \
    "grpcio-reflection==$(pin grpcio)" "protobuf==$(pin protobuf)" "typer==$(pin typer)" "rich==$(pin rich)" \
    "pyyaml==$(pin pyyaml)" "packaging==$(pin packaging)"
get --no-deps "pandas==$(pin pandas)"
# The GPU machine's own numpy and setuptools stay: its torch was built against them.
rm -f .gpu/whl/numpy-* .gpu/whl/setuptools-*
du -sh .gpu | sed 's/^/packed: /'

#!/usr/bin/env bash
# The GPU acceptance run (benchmarks/gpu_acceptance.py says what it checks), on the GPU machine, from the project
# root, with .gpu/ packed here first by scripts/pack_gpu.sh and carried there:
#   GPU_OUT=$OUT bash benchmarks/gpu_acceptance.sh [--wall-budget-s S]
# It installs the packed wheels beside the machine's own torch, generates the gRPC stubs, and writes its report
# (report.md, report.csv) and every section's files to $GPU_OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${GPU_OUT:-/tmp/gpu-acceptance}
site=/tmp/fwbench-site
export PYTHONUNBUFFERED=1
[ -d .gpu/whl ] || { echo "no .gpu/whl: run bash scripts/pack_gpu.sh on the development machine and carry .gpu" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .gpu/whl/*.whl || exit 1
export PYTHONPATH=$site:$PWD/runners/core:$PWD/runners/torch:$PWD/runners/jax:$PWD/aggregator
python3 protos/generate.py --out "$site" || exit 1
python3 benchmarks/gpu_acceptance.py --out "$out" "$@"

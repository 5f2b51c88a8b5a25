#!/usr/bin/env bash
# The main job on the embedded default (no GPU, no Docker): set up the aggregator's environment and those of the
# runners a comparison starts by default (PyTorch and TensorFlow; JAX's is made the first time it is named), then
# compare PyTorch and TensorFlow training resnet18 on the CPU.
# Extra arguments go to `fwbench compare` (e.g. --mode infer --batch-size 16).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_envs.sh --default
exec "${FWBENCH_VENVS:-.venvs}/aggregator/bin/fwbench" compare \
  --model resnet18 --mode train --batch-size 8 --shape 3x64x64 "$@"

#!/usr/bin/env bash
# The main job on the embedded default (no GPU, no Docker): set up the aggregator's environment and those of the
# runners a comparison starts by default (PyTorch and TensorFlow; JAX's is made the first time it is named), then
# compare PyTorch and TensorFlow serving resnet18 on the CPU (inference, batch 8, 3x64x64): a difference of about a
# third on a 2-core VM, which four process blocks settle, where training's sixth needed all eight and often more.
# Extra arguments go to `fwbench compare` (e.g. --mode train --batch-size 16).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
bash scripts/setup_envs.sh --default
echo "set-up: $((SECONDS - started)) s"
exec "${FWBENCH_VENVS:-.venvs}/aggregator/bin/fwbench" compare \
  --model resnet18 --mode infer --batch-size 8 --shape 3x64x64 "$@"

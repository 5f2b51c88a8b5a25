#!/usr/bin/env bash
# The main job on the embedded default (no GPU, no Docker): set up the aggregator's environment and those of the
# runners a comparison starts by default (PyTorch and TensorFlow; JAX's is made the first time it is named), then
# compare PyTorch and TensorFlow serving mobilenet_v2 on the CPU (inference, batch 8, 3x64x64): a difference of about
# half on a 2-core VM, which the first look, after four process blocks, settles;
# resnet18's was 5% on a quiet host and took all eight.
# Extra arguments go to `fwbench compare` (e.g. --model resnet18 --mode train).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
bash scripts/setup_envs.sh --default
echo "set-up: $((SECONDS - started)) s"
exec "${FWBENCH_VENVS:-.venvs}/aggregator/bin/fwbench" compare \
  --model mobilenet_v2 --mode infer --batch-size 8 --shape 3x64x64 "$@"

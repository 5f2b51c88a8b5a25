#!/bin/sh
# Generate the gRPC stubs into PYTHON's site-packages (default python3) with a
# grpcio-tools matched to the protobuf and grpcio that environment already has,
# so neither moves: protobuf's generated code refuses a runtime older than its
# generator. grpcio-tools goes into a scratch folder and is removed afterwards.
# With FWBENCH_UV (scripts/env_lib.sh sets it) uv installs it, from its cache;
# elsewhere (the images) pip does.
set -eu
python=${1:-python3}
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if [ -n "${FWBENCH_UV:-}" ]; then
  "$FWBENCH_UV" pip freeze -q --python "$python" | grep -iE '^(protobuf|grpcio)==' > "$scratch/constraints.txt"
  "$FWBENCH_UV" pip install -q --python "$python" --target "$scratch/tools" -c "$scratch/constraints.txt" grpcio-tools
else
  "$python" -m pip list --format=freeze | grep -iE '^(protobuf|grpcio)==' > "$scratch/constraints.txt"
  "$python" -m pip install -q --no-cache-dir --target "$scratch/tools" -c "$scratch/constraints.txt" grpcio-tools
fi
PYTHONPATH="$scratch/tools" "$python" "$here/generate.py"
"$python" -c "from fwbench.runner.v1 import runner_pb2_grpc"

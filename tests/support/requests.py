"""One run sent straight to a runner over gRPC, as the aggregator would send it, small enough for CI."""

from __future__ import annotations

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb

RUN_TIMEOUT_S = 300
MEASURED = 2
CPU = pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU, index=0)


def run(stub, **fields) -> tuple[pb.ResolvedConfig, pb.Summary]:
    request = dict(
        model="resnet18",
        mode=pb.MODE_INFER,
        batch_size=2,
        input_shape=[3, 32, 32],
        device=CPU,
        warmup_steps=1,
        measured_steps=MEASURED,
        min_measure_s=0.0,
        power_sample_rate_hz=0.0,
        seed=1,
    )
    request.update(fields)
    events = list(stub.Run(pb.RunRequest(**request), timeout=RUN_TIMEOUT_S))
    (config,) = [e.config for e in events if e.WhichOneof("event") == "config"]
    (summary,) = [e.summary for e in events if e.WhichOneof("event") == "summary"]
    return config, summary


def refusal(stub, **fields) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        run(stub, **fields)
    return info.value

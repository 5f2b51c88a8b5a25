"""A RunResult from the contract's messages a test writes, read through the aggregator's edge (run.wire) as a run's
stream is: so the tests that build results exercise the conversion too."""

from __future__ import annotations

from collections.abc import Sequence

from fwbench.runner.v1 import runner_pb2 as pb

from fwbench_aggregator.run import wire
from fwbench_aggregator.run.client import RunResult


def run_result(
    info: pb.DescribeResponse,
    config: pb.ResolvedConfig | None = None,
    summary: pb.Summary | None = None,
    steps: Sequence[pb.StepTiming] = (),
    power: Sequence[pb.PowerSample] = (),
    queries: Sequence[pb.QueryLatencies] = (),
    runner: str = "torch",
    address: str = "127.0.0.1:1",
    repetition: int = 0,
) -> RunResult:
    return RunResult(
        runner,
        address,
        wire.description(info),
        repetition,
        None if config is None else wire.resolved(config),
        [wire.step(s) for s in steps],
        [wire.power_sample(p) for p in power],
        None if summary is None else wire.summary(summary),
        [wire.query_latencies(q) for q in queries],
    )

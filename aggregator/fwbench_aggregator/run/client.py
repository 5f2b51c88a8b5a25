"""Talking to one runner over gRPC and collecting what a run streams back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc

from . import replies, wire
from .connection import Transport

# A runner answers these at once, however busy it is.
DESCRIBE_TIMEOUT_S = 30.0
LIST_MODELS_TIMEOUT_S = 30.0
CHECK_RUN_TIMEOUT_S = 30.0
# These build a model on the runner's CPU, and may wait for its runs there: slow for large models.
BUILD_TIMEOUT_S = 600.0
# Why a runner refused with RESOURCE_EXHAUSTED, in its trailing metadata (runner.proto).
REASON_KEY = "fwbench-reason"
OUT_OF_MEMORY = "out-of-memory"


class RunnerFailure(Exception):
    """A runner could not be reached or refused a request; the message names the runner."""

    def __init__(self, runner: str, code: str, message: str, reason: str = "") -> None:
        super().__init__(f"{runner}: {code}: {message}")
        self.runner = runner
        self.code = code
        self.message = message
        self.reason = reason

    @property
    def out_of_memory(self) -> bool:
        """The runner's device ran out of memory: a smaller batch or input may fit. A runner that is busy,
        or gRPC's own RESOURCE_EXHAUSTED (a message over its size limit), is not this."""
        return self.code == "RESOURCE_EXHAUSTED" and self.reason == OUT_OF_MEMORY

    @classmethod
    def from_rpc(cls, runner: str, error: grpc.RpcError, transport: Transport = Transport()) -> RunnerFailure:
        code = error.code()
        reason = dict(error.trailing_metadata() or ()).get(REASON_KEY, "")
        return cls(runner, code.name, transport.explain(code, error.details() or ""), reason)


@dataclass(frozen=True)
class BlockPlace:
    """Where a window sits in a comparison's block design (plan.design): the design's label, the process block it
    ran in (its name, shared by every runner's windows of the block) and its place among its runner's windows there."""

    design: str
    block: str
    window: int


@dataclass
class RunResult:
    runner: str
    address: str
    runner_info: replies.RunnerDescription
    repetition: int = 0
    config: replies.Resolved | None = None
    steps: list[replies.StepTiming] = field(default_factory=list)
    power: list[replies.PowerSample] = field(default_factory=list)
    summary: replies.Summary | None = None
    queries: list[replies.QueryLatencies] = field(default_factory=list)  # under a scenario: the latencies as streamed
    block: BlockPlace | None = None  # a window of a block design; None for a run of its own


class RunnerClient:
    def __init__(self, name: str, address: str, transport: Transport = Transport()) -> None:
        self.name = name
        self.address = address
        self.transport = transport
        self._channel = transport.channel(address)
        self._stub = pb_grpc.RunnerStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> RunnerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> replies.RunnerDescription:
        return wire.description(self._call(self._stub.Describe, pb.DescribeRequest(), DESCRIBE_TIMEOUT_S))

    def list_models(self) -> list[pb.ModelInfo]:
        return list(self._call(self._stub.ListModels, pb.ListModelsRequest(), LIST_MODELS_TIMEOUT_S).models)

    def check_run(self, request: pb.RunRequest) -> replies.Resolved:
        """The run the runner would run for `request`, or RunnerFailure with the status Run would refuse it with."""
        return wire.resolved(self._call(self._stub.CheckRun, request, CHECK_RUN_TIMEOUT_S))

    def inspect(self, model: str, input_shape=(), model_options=None) -> pb.ModelReport:
        request = pb.InspectRequest(model=model, input_shape=input_shape, model_options=model_options or {})
        return self._call(self._stub.InspectModel, request, BUILD_TIMEOUT_S)

    def export_reference(self, request: pb.ReferenceRequest) -> pb.ReferenceReport:
        return self._call(self._stub.ExportReference, request, BUILD_TIMEOUT_S)

    def compare_reference(self, request: pb.ReferenceRequest) -> pb.ReferenceReport:
        return self._call(self._stub.CompareReference, request, BUILD_TIMEOUT_S)

    def open_block(self, block: str) -> pb.OpenBlockResponse:
        """Start process block `block`'s worker, its framework imported, ahead of the block's runs."""
        return self._call(self._stub.OpenBlock, pb.OpenBlockRequest(process_block=block), BUILD_TIMEOUT_S)

    def _call(self, method, request, timeout_s: float):
        try:
            return method(request, timeout=timeout_s)
        except grpc.RpcError as error:
            raise RunnerFailure.from_rpc(self.name, error, self.transport) from None

    def run(
        self,
        request: pb.RunRequest,
        on_progress: Callable[[replies.Progress], None] = lambda progress: None,
        repetition: int = 0,
        on_summary: Callable[[RunResult], None] = lambda result: None,
    ) -> RunResult:
        """The run's events collected; `on_summary` gets the complete result as its summary (the last event)
        arrives, while the runner still frees the run's memory before it ends the call."""
        result = RunResult(self.name, self.address, self.describe(), repetition)
        stream = self._stub.Run(request)
        try:
            for event in stream:
                kind = event.WhichOneof("event")
                if kind == "config":
                    result.config = wire.resolved(event.config)
                elif kind == "steps":
                    result.steps.extend(wire.step(s) for s in event.steps.steps)
                elif kind == "progress":
                    on_progress(wire.progress(event.progress))
                elif kind == "power":
                    result.power.extend(wire.power_sample(p) for p in event.power.samples)
                elif kind == "queries":
                    result.queries.append(wire.query_latencies(event.queries))
                elif kind == "summary":
                    result.summary = wire.summary(event.summary)
                    on_summary(result)
        except grpc.RpcError as error:
            raise RunnerFailure.from_rpc(self.name, error, self.transport) from None
        except BaseException:
            # Ctrl-C (or any other way out): cancel the call, so the runner stops between
            # steps and frees the device instead of running on for nobody.
            stream.cancel()
            raise
        if result.summary is None:
            raise RunnerFailure(self.name, "INTERNAL", "the run stream ended without a summary")
        return result

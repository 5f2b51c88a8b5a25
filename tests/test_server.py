"""The gRPC server in-process: error status table, serving, graceful stop, the container health check."""

from __future__ import annotations

import inspect
import signal
import socket
import threading

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.core import RecordingBackend
from support.fakes import Fake

from fwbench_core import errors, healthcheck
from fwbench_core.backend import Backend
from fwbench_core.builtin import MODEL_SPECS
from fwbench_core.errors import (
    REASON_KEY,
    Aborted,
    Busy,
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    OutOfMemory,
    ResourceExhausted,
    RunnerError,
    Unavailable,
    error_from_status,
    reason_for,
    status_for,
)
from fwbench_core.fake import FakeBackend
from fwbench_core.server import create_server
from fwbench_core.service import RunnerService

STATUS_TABLE = {
    RunnerError: grpc.StatusCode.INTERNAL,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    OutOfMemory: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Busy: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Cancelled: grpc.StatusCode.CANCELLED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    Aborted: grpc.StatusCode.ABORTED,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def test_status_table_covers_every_error_kind():
    kinds = {obj for _, obj in inspect.getmembers(errors, inspect.isclass) if issubclass(obj, RunnerError)}
    assert kinds == set(STATUS_TABLE)


@pytest.mark.parametrize("kind", list(STATUS_TABLE), ids=lambda k: k.__name__)
def test_status_for_runner_errors(kind):
    assert status_for(kind("what the user reads")) == (STATUS_TABLE[kind], "what the user reads")


@pytest.mark.parametrize("kind", list(STATUS_TABLE), ids=lambda k: k.__name__)
def test_an_error_rebuilt_from_its_status_and_reason_is_of_its_kind(kind):
    # How an error crosses from a worker process: a busy runner never reads as out of memory.
    error = kind("what the user reads")
    rebuilt = error_from_status(*status_for(error), reason_for(error))
    assert type(rebuilt) is kind and str(rebuilt) == "what the user reads"


def test_status_for_a_plain_exception_is_internal():
    code, message = status_for(KeyError("lost"))
    assert code is grpc.StatusCode.INTERNAL
    assert "KeyError" in message and "lost" in message


@pytest.mark.parametrize("text", ["x" * 100_000, "\u00e9" * 100_000], ids=["ascii", "two-byte"])
@pytest.mark.parametrize("exc_type", [InvalidArgument, ValueError], ids=["runner-error", "plain"])
def test_status_for_cuts_a_huge_message_to_what_grpc_carries(exc_type, text):
    code, message = status_for(exc_type(text))
    assert len(message.encode()) <= errors.MAX_MESSAGE_BYTES + len("... (message cut)")
    assert message.endswith("... (message cut)")


# --- the gRPC server, in-process ------------------------------------------------


class InProcessServer:
    def __init__(self, backend: Backend) -> None:
        self.server, self.port, self.health = create_server(RunnerService(backend), "127.0.0.1:0")
        self.server.start()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = pb_grpc.RunnerStub(self.channel)

    def close(self) -> None:
        self.channel.close()
        self.server.stop(None).wait(5)


@pytest.fixture
def serve_backend():
    servers = []

    def start(backend):
        servers.append(InProcessServer(backend))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def rpc_run(stub, **overrides):
    fields = dict(
        model="resnet18",
        mode=pb.MODE_INFER,
        batch_size=2,
        input_shape=[3, 32, 32],
        warmup_steps=1,
        measured_steps=2,
        min_measure_s=0.0,
    )
    fields.update(overrides)
    return list(stub.Run(pb.RunRequest(**fields), timeout=30))


def test_server_describes_the_fake_backend(serve_backend):
    srv = serve_backend(FakeBackend(step_time_s=0.0))
    info = srv.stub.Describe(pb.DescribeRequest(), timeout=10)
    assert (info.framework, info.protocol) == ("fake", "fwbench.runner.v1")
    assert list(info.precisions) == [pb.PRECISION_FP32]
    models = srv.stub.ListModels(pb.ListModelsRequest(), timeout=10).models
    assert [m.name for m in models] == sorted(MODEL_SPECS)
    events = rpc_run(srv.stub)
    assert events[-1].summary.measured_steps == 2


def test_server_out_of_memory_in_build_is_resource_exhausted(serve_backend):
    backend = RecordingBackend(build_error=MemoryError("cannot allocate"))
    srv = serve_backend(backend)
    with pytest.raises(grpc.RpcError) as info:
        rpc_run(srv.stub)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "cannot allocate" in info.value.details()
    assert dict(info.value.trailing_metadata())[REASON_KEY] == "out-of-memory"
    assert backend.released == 1
    backend.build_error = None
    assert rpc_run(srv.stub)[-1].summary.measured_steps == 2


def test_server_out_of_memory_in_a_step_closes_the_workload(serve_backend):
    backend = RecordingBackend(step_error=MemoryError("cannot allocate"))
    srv = serve_backend(backend)
    with pytest.raises(grpc.RpcError) as info:
        rpc_run(srv.stub)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert backend.workloads[0].closed == 1 and backend.released == 1
    backend.step_error = None
    assert rpc_run(srv.stub)[-1].summary.measured_steps == 2


def test_server_unexpected_error_is_internal(serve_backend):
    srv = serve_backend(RecordingBackend(build_error=ZeroDivisionError("oops")))
    with pytest.raises(grpc.RpcError) as info:
        rpc_run(srv.stub)
    assert info.value.code() == grpc.StatusCode.INTERNAL
    assert "ZeroDivisionError" in info.value.details() and "oops" in info.value.details()
    assert REASON_KEY not in dict(info.value.trailing_metadata())


# A RunRequest / InspectRequest whose field 1 (model, a string) holds bytes that are not UTF-8: tag 0x0a
# (field 1, length-delimited), length 2, then 0xff 0xfe.
NOT_UTF8_MODEL = b"\x0a\x02\xff\xfe"


def raw_error(channel, method: str, streaming: bool, data: bytes) -> grpc.RpcError:
    """Send `data` as it is to a method of the Runner service, as a hostile client can; the error it gets."""
    path = f"/fwbench.runner.v1.Runner/{method}"
    call = (channel.unary_stream if streaming else channel.unary_unary)(
        path, request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.RpcError) as info:
        response = call(data, timeout=10)
        if streaming:
            list(response)
    return info.value


@pytest.mark.parametrize("method, streaming", [("InspectModel", False), ("Run", True)])
def test_a_string_that_is_not_utf8_is_an_invalid_argument(serve_backend, method, streaming):
    srv = serve_backend(FakeBackend(step_time_s=0.0))
    error = raw_error(srv.channel, method, streaming, NOT_UTF8_MODEL)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert "not valid protobuf" in error.details() and "UTF-8" in error.details()
    # Valid bytes reach the servicer: the runner serves on.
    valid = pb.InspectRequest(model="no_such_net").SerializeToString()
    assert raw_error(srv.channel, method, streaming, valid).code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("method", ["ExportReference", "CompareReference"])
def test_reference_requests_take_the_seed_rule_of_runs(serve_backend, method):
    srv = serve_backend(FakeBackend(step_time_s=0.0))
    request = pb.ReferenceRequest(model="resnet18", seed=2**32, name="reference.npz")
    with pytest.raises(grpc.RpcError) as info:
        getattr(srv.stub, method)(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "seed must be between 0 and 4294967295" in info.value.details()


def test_server_graceful_stop_finishes_the_run_in_flight():
    srv = InProcessServer(FakeBackend(step_time_s=0.01))
    try:
        building = threading.Event()
        outcome: dict[str, object] = {}

        def consume():
            try:
                events = []
                for event in srv.stub.Run(
                    pb.RunRequest(
                        model="resnet18",
                        mode=pb.MODE_INFER,
                        batch_size=2,
                        input_shape=[3, 32, 32],
                        warmup_steps=1,
                        measured_steps=30,
                        min_measure_s=0.0,
                    ),
                    timeout=30,
                ):
                    events.append(event)
                    building.set()
                outcome["events"] = events
            except Exception as exc:
                outcome["error"] = exc
            finally:
                building.set()

        thread = threading.Thread(target=consume)
        thread.start()
        assert building.wait(10)
        # What serve() does on SIGTERM.
        srv.health.enter_graceful_shutdown()
        reply = health_pb2_grpc.HealthStub(srv.channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
        stopped = srv.server.stop(grace=10)
        thread.join(15)
        assert "error" not in outcome, outcome.get("error")
        assert outcome["events"][-1].summary.measured_steps == 30
        assert stopped.wait(5)
        with pytest.raises(grpc.RpcError) as info:
            srv.stub.Describe(pb.DescribeRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        srv.close()


def test_runner_process_exits_cleanly_on_sigterm(tmp_path):
    runner = Fake(step_s=0.01).runner(tmp_path / "fake.log")
    address = runner.start()
    try:
        with grpc.insecure_channel(address) as channel:
            call = pb_grpc.RunnerStub(channel).Run(
                pb.RunRequest(
                    model="resnet18",
                    mode=pb.MODE_INFER,
                    batch_size=2,
                    input_shape=[3, 32, 32],
                    warmup_steps=1,
                    measured_steps=30,
                    min_measure_s=0.0,
                ),
                timeout=30,
            )
            first = next(call)
            assert first.progress.phase == pb.PHASE_BUILD
            runner.process.send_signal(signal.SIGTERM)
            rest = list(call)  # the run in flight finishes
            assert rest[-1].summary.measured_steps == 30
        assert runner.process.wait(15) == 0
    finally:
        runner.stop()


@pytest.mark.parametrize(
    "listen, probe",
    [("0.0.0.0:50051", "127.0.0.1:50051"), ("[::]:7", "127.0.0.1:7"), ("torch:50051", "torch:50051")],
)
def test_healthcheck_probes_loopback_for_a_wildcard_listen_address(listen, probe):
    assert healthcheck.probe_address(listen) == probe


def test_healthcheck_fails_naming_the_address_where_nothing_listens():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    serving, message = healthcheck.check(f"127.0.0.1:{port}", timeout_s=1.0)
    assert not serving
    assert f"127.0.0.1:{port}" in message and ("UNAVAILABLE" in message or "DEADLINE_EXCEEDED" in message)

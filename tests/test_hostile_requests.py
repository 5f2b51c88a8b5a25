"""Generated hostile requests against live runners, over real gRPC.

Whatever a client sends in Run, InspectModel, ExportReference and CompareReference, the runner answers
with a status from the table in docs/architecture.md, keeps serving (health, Describe within a second), and creates no
file outside its reference folder.

The fake runner gets the whole space (its steps only sleep). The torch runner gets every hostile value
too, but a request it would accept is kept small, since a valid batch of 65,536 images is 40 GB on a
CPU: there the generated numbers are either tiny or out of range.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.runners import FAKE_STEP_TIME_S
from support.wire_bytes import delimited_field, varint, varint_field

from fwbench_aggregator.run import launch

# Every test here runs the command line, runners or generated requests end to end: seconds each.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
UINT32 = 2**32 - 1
UINT64 = 2**64 - 1
CALL_TIMEOUT_S = 20.0
SERVING_WITHIN_S = 1.0
# The status table in docs/architecture.md, and a client deadline for a valid run that would go on for hours.
DOCUMENTED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}
MODELS = ["resnet18", "lstm_lm", "bert_base", "mobilenet_v2"]
SENTINEL = "sentinel"
# Names a hostile client tries for references: traversal into a folder beside the reference folder,
# absolute paths, separators, a missing suffix, control characters and the empty name.
HOSTILE_NAMES = [
    f"../{SENTINEL}/x.npz",
    f"../{SENTINEL}/x",
    "../../../../tmp/fwbench-hostile.npz",
    "/tmp/fwbench-hostile.npz",
    "/etc/passwd",
    "a/b.npz",
    "..",
    ".",
    ".npz",
    "x",
    "x.npz\x00.txt",
    "",
    "link.npz",
    "fifo.npz",
    "x" * 5000 + ".npz",
]


def hostile_text(examples):
    return st.one_of(st.sampled_from(examples), st.text(max_size=40), st.text(min_size=1000, max_size=20_000))


def numbers(small: tuple[int, int], top: int):
    """Either a small value, a boundary, or anything the wire carries."""
    return st.one_of(
        st.integers(*small), st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**32 - 1, top]), st.integers(0, top)
    )


def floats():
    return st.one_of(
        st.sampled_from([0.0, -0.0, -1.0, float("nan"), float("inf"), float("-inf"), 1e300]),
        st.floats(allow_nan=True, allow_infinity=True),
    )


def enum_numbers(enum_type):
    return st.integers(0, max(enum_type.values()) + 3)


def hostile_run_fields(cheap: bool) -> dict:
    """Per field of a RunRequest, what a hostile client sends; with `cheap`, a value a runner accepts is
    a few milliseconds of work (numbers are tiny or out of range)."""
    count = st.integers(1, 2) if cheap else numbers((0, 50), UINT32)
    return dict(
        model=hostile_text(MODELS),
        mode=enum_numbers(pb.Mode),
        batch_size=st.one_of(st.integers(1, 2), st.integers(65537, UINT32)) if cheap else numbers((1, 64), UINT32),
        input_shape=st.one_of(st.just([]), st.lists(st.integers(0, 40 if cheap else UINT32), max_size=4)),
        precision=enum_numbers(pb.Precision),
        device=st.builds(pb.DeviceSelector, kind=enum_numbers(pb.DeviceKind), index=numbers((0, 2), UINT32)),
        warmup_steps=st.one_of(st.none(), count),
        measured_steps=st.one_of(st.none(), count),
        seed=numbers((0, 10), UINT64),
        model_options=st.dictionaries(hostile_text(["head", "variant"]), hostile_text(["mlm", "lm"]), max_size=3),
        layout=enum_numbers(pb.Layout),
        compilation=enum_numbers(pb.Compilation),
        cudnn_autotune=enum_numbers(pb.Switch),
        intra_op_threads=numbers((0, 2), UINT32),
        inter_op_threads=numbers((0, 2), UINT32),
        warmup_until_stable=st.one_of(
            st.none(), st.builds(pb.WarmupUntilStable, cv_threshold=floats(), window=numbers((0, 5), UINT32))
        ),
        min_measure_s=floats().filter(lambda s: not 0.0 < s <= 86_400.0) if cheap else floats(),
        power_sample_rate_hz=st.one_of(st.none(), st.just(0.0), floats()),
        idle_baseline_s=st.one_of(st.none(), st.just(0.0), floats()),
    )


def run_requests(cheap: bool):
    """A small valid run with one to three fields replaced by hostile values, so that every check (and an
    accepted run) is reached, not only the first field a wholly random request fails on."""
    fields = hostile_run_fields(cheap)
    base = dict(
        model="resnet18",
        mode=pb.MODE_INFER,
        batch_size=2,
        input_shape=[3, 32, 32],
        warmup_steps=1,
        measured_steps=2,
        min_measure_s=0.0,
        power_sample_rate_hz=0.0,
    )

    @st.composite
    def request(draw):
        chosen = draw(st.sets(st.sampled_from(sorted(fields)), min_size=0, max_size=3))
        overrides = {name: draw(fields[name]) for name in chosen}
        # None leaves an optional field unset: the runner's default.
        return pb.RunRequest(**{k: v for k, v in {**base, **overrides}.items() if v is not None})

    return request()


def mutated(message_type, base: dict, fields: dict):
    """`base` with up to three of its fields replaced by hostile values."""

    @st.composite
    def request(draw):
        chosen = draw(st.sets(st.sampled_from(sorted(fields)), max_size=3))
        return message_type(**{**base, **{name: draw(fields[name]) for name in chosen}})

    return request()


def inspect_requests():
    return mutated(
        pb.InspectRequest,
        dict(model="resnet18", input_shape=[3, 32, 32]),
        dict(
            model=hostile_text(MODELS),
            input_shape=st.one_of(
                st.just([]),
                st.lists(st.integers(0, UINT32), max_size=4),
                st.lists(st.integers(1, 48), min_size=1, max_size=3),
            ),
            model_options=st.dictionaries(hostile_text(["head"]), hostile_text(["mlm"]), max_size=2),
        ),
    )


def reference_requests():
    return mutated(
        pb.ReferenceRequest,
        dict(model="resnet18", input_shape=[3, 32, 32], name="ok.npz"),
        dict(
            model=hostile_text(MODELS),
            input_shape=st.one_of(st.just([]), st.lists(st.integers(0, UINT32), max_size=4), st.just([8])),
            model_options=st.dictionaries(hostile_text(["head"]), hostile_text(["mlm"]), max_size=2),
            batch_size=numbers((0, 2), UINT32),
            seed=numbers((0, 10), UINT64),
            name=hostile_text(HOSTILE_NAMES),
        ),
    )


class LiveRunner:
    """A runner process with its own reference folder, beside a sentinel folder that must stay empty."""

    def __init__(self, name: str, root: Path) -> None:
        self.root = root
        self.references = root / "references"
        self.references.mkdir()
        (root / SENTINEL).mkdir()
        # What a hostile client hopes the runner follows or blocks on.
        (root / SENTINEL / "target.npz").write_bytes(b"not yours")
        os.symlink(root / SENTINEL / "target.npz", self.references / "link.npz")
        os.mkfifo(self.references / "fifo.npz")
        command = (
            launch.fake_runner_command() if name == "fake" else launch.embedded_command(name, launch.default_venvs())
        )
        env = {"FWBENCH_FAKE_STEP_TIME_S": FAKE_STEP_TIME_S} if name == "fake" else None
        self.process = launch.LocalRunner(
            f"hostile-{name}",
            [*command, "--reference-dir", str(self.references)],
            log_path=root / "runner.log",
            env=env,
        )
        self.channel = grpc.insecure_channel(self.process.start())
        self.stub = pb_grpc.RunnerStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.outside_before = self.files_outside()

    def files_outside(self) -> set[Path]:
        """Every file under the test's folder but outside the reference folder, and the hostile /tmp name."""
        found = {p for p in self.root.rglob("*") if self.references not in p.parents and p != self.references}
        return found | {p for p in (Path("/tmp/fwbench-hostile.npz"),) if p.exists()}

    def close(self) -> None:
        self.channel.close()
        self.process.stop()


@pytest.fixture(scope="module", params=["fake", pytest.param("torch", marks=pytest.mark.frameworks)])
def live(request, tmp_path_factory):
    runner = LiveRunner(request.param, tmp_path_factory.mktemp(f"hostile-{request.param}"))
    untracked_before = untracked_files()
    yield runner
    runner.close()
    assert untracked_files() == untracked_before, "the runner created files in the repository"


def untracked_files() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def assert_documented_and_still_serving(live: LiveRunner, call) -> tuple[grpc.StatusCode, str]:
    try:
        reply = call()
        if hasattr(reply, "__next__"):
            for _ in reply:
                pass
        code, details = grpc.StatusCode.OK, ""
    except grpc.RpcError as error:
        code, details = error.code(), error.details() or ""
    assert code in DOCUMENTED, f"{code.name}: {details[:500]}"
    assert len(details) <= 4096, f"{code.name} message of {len(details)} characters"
    assert "Traceback" not in details
    health = live.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=SERVING_WITHIN_S)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    live.stub.Describe(pb.DescribeRequest(), timeout=SERVING_WITHIN_S)
    assert live.files_outside() == live.outside_before
    assert (live.root / SENTINEL / "target.npz").read_bytes() == b"not yours"
    return code, details


def examples(live: LiveRunner, fake: int, real: int) -> int:
    return fake if "fake" in live.process.name else real


HYPOTHESIS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def test_generated_run_requests(live):
    @settings(max_examples=examples(live, 150, 40), **HYPOTHESIS)
    @given(run_requests(cheap="torch" in live.process.name))
    def check(request):
        assert_documented_and_still_serving(live, lambda: live.stub.Run(request, timeout=3.0))

    check()


def test_generated_inspect_requests(live):
    @settings(max_examples=examples(live, 100, 25), **HYPOTHESIS)
    @given(inspect_requests())
    def check(request):
        assert_documented_and_still_serving(live, lambda: live.stub.InspectModel(request, timeout=CALL_TIMEOUT_S))

    check()


def test_generated_reference_requests(live):
    @settings(max_examples=examples(live, 100, 25), **HYPOTHESIS)
    @given(reference_requests(), st.booleans())
    def check(request, export):
        method = live.stub.ExportReference if export else live.stub.CompareReference
        assert_documented_and_still_serving(live, lambda: method(request, timeout=CALL_TIMEOUT_S))

    check()


# A small valid request with one field sent again (the last one counts) as bytes no generated class writes, per
# case: the method, whether it streams, the bytes, and what the refusal says.
RUN = pb.RunRequest(
    model="resnet18",
    mode=pb.MODE_INFER,
    batch_size=2,
    input_shape=[3, 32, 32],
    warmup_steps=1,
    measured_steps=2,
    min_measure_s=0.0,
    power_sample_rate_hz=0.0,
).SerializeToString()
INSPECT = pb.InspectRequest(model="resnet18", input_shape=[3, 32, 32]).SerializeToString()
RAW_REQUESTS = {
    # Protobuf keeps a 32-bit field's low 32 bits: these would arrive as batch size 0, mode 1 (train) and
    # input_shape [3, 0].
    "batch_size of 2**40": ("Run", True, RUN + varint_field(3, 2**40), "batch_size is 1099511627776 on the wire"),
    "mode of 2**32 + 1": ("Run", True, RUN + varint_field(2, 2**32 + 1), "mode is 4294967297 on the wire"),
    "packed input_shape with 2**33": (
        "InspectModel",
        False,
        INSPECT + delimited_field(2, varint(3) + varint(2**33)),
        "input_shape is 8589934592 on the wire",
    ),
    "corrupt wire": ("Run", True, RUN + b"\xff\xff\xff", "request is not valid protobuf"),
    "string not UTF-8": (
        "InspectModel",
        False,
        INSPECT + delimited_field(1, b"\xff\xfe"),
        "every string field must be UTF-8",
    ),
}


@pytest.mark.parametrize("case", sorted(RAW_REQUESTS))
def test_raw_requests_are_refused_naming_what_was_sent(live, case):
    method, streaming, data, said = RAW_REQUESTS[case]
    path = f"/fwbench.runner.v1.Runner/{method}"
    call = (live.channel.unary_stream if streaming else live.channel.unary_unary)(
        path, request_serializer=None, response_deserializer=None
    )
    code, details = assert_documented_and_still_serving(live, lambda: call(data, timeout=CALL_TIMEOUT_S))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and said in details, details
    # The UTF-8 hint only where a string was not UTF-8.
    assert ("UTF-8" in details) == ("UTF-8" in case), details

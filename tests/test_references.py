"""Parity references obey no file path: names in the runner's reference folder, checked, bounded, over real gRPC.

Most tests drive the fake runner, whose export and compare go through the same core file handling as the
real runners'; the framework-specific parts (the torch runner's export, the TensorFlow runner's loading of
weights) are checked against the real runners of the session's pool, which share one reference folder.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import threading
import time
import zipfile
from pathlib import Path

import grpc
import numpy as np
import pandas as pd
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.cli import fwbench
from support.fakes import Fake

from fwbench_aggregator.base import folders
from fwbench_aggregator.run.launch import fake_runner_command
from fwbench_core import service as service_mod
from fwbench_core import system_folders
from fwbench_core.builtin import MODEL_SPECS
from fwbench_core.choices import DeviceKind, Precision
from fwbench_core.devices import DeviceRef
from fwbench_core.errors import Cancelled, InvalidArgument, Unavailable
from fwbench_core.fake import FakeBackend
from fwbench_core.models import ModelConfig, ReferenceReport, ReferenceRequest
from fwbench_core.references import (
    GENERATED_TOKENS,
    PARITY_NEW_TOKENS,
    ReferenceFolder,
    compared_tokens,
    expected_tokens,
    reference_tokens,
)
from fwbench_core.service import RunnerService

MAX_BYTES = 4_000_000  # the test runner's --max-reference-bytes
SHAPE = [3, 32, 32]
RPC_TIMEOUT_S = 60
# What "promptly" means on this loaded machine: far below the timeouts a hang would run into.
PROMPT_S = 15
SHORT_MESSAGE_CHARS = 600


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("references")


@pytest.fixture(scope="module")
def folder_fake_address(folder, module_fakes) -> str:
    # Slow steps: a run of a few hundred steps holds the CPU for seconds.
    fake = Fake(step_s=0.02, flags=("--reference-dir", str(folder), "--max-reference-bytes", str(MAX_BYTES)))
    return module_fakes(fake).addresses["fake"]


@pytest.fixture(scope="module")
def fake(folder_fake_address):
    with grpc.insecure_channel(folder_fake_address) as channel:
        yield pb_grpc.RunnerStub(channel)


def reference(name: str, **fields) -> pb.ReferenceRequest:
    return pb.ReferenceRequest(**{"model": "resnet18", "input_shape": SHAPE, "name": name, **fields})


def refused(call, request, timeout: float = RPC_TIMEOUT_S) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=timeout)
    return caught.value


def assert_short_and_clean(error: grpc.RpcError) -> None:
    details = error.details()
    assert "Traceback" not in details and 'File "' not in details, details
    assert len(details) < SHORT_MESSAGE_CHARS, details


def write_npz(path: Path, **arrays) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.write_bytes(buffer.getvalue())


def valid_arrays() -> dict[str, np.ndarray]:
    inputs = np.ones((2, *SHAPE), np.float32)
    return {"input": inputs, "output": np.ones((2, 1000), np.float32)}


@pytest.fixture
def cpu_held(fake):
    """A long CPU run on the fake runner, holding its CPU lock until the test ends."""
    run = fake.Run(
        pb.RunRequest(
            model="resnet18",
            mode=pb.MODE_INFER,
            batch_size=1,
            input_shape=SHAPE,
            warmup_steps=0,
            measured_steps=5000,
            min_measure_s=0.0,
            device=pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU),
        )
    )
    for event in run:
        if event.WhichOneof("event") == "config":
            break  # building: the run holds the CPU
    yield
    run.cancel()


def test_export_then_compare_by_name(fake, folder):
    exported = fake.ExportReference(reference("round-trip.npz"), timeout=RPC_TIMEOUT_S)
    assert exported.name == "round-trip.npz" and list(exported.output_shape) == [2, 1000]
    assert (folder / "round-trip.npz").is_file()
    compared = fake.CompareReference(reference("round-trip.npz"), timeout=RPC_TIMEOUT_S)
    assert compared.name == "round-trip.npz" and compared.matched and compared.compared_values == 2000
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")], "a temporary file was left behind"


@pytest.mark.parametrize(
    "name",
    [
        "../escape.npz",
        "../../../../tmp/escape.npz",
        "/tmp/escape.npz",
        "sub/escape.npz",
        ".hidden.npz",
        "escape",
        "escape.npy",
        "",
        "escape.npz/",
        "escape.npz\n",
        "esc\x00ape.npz",
        "ü.npz",
        "e" * 200 + ".npz",
    ],
)
@pytest.mark.parametrize("rpc", ["ExportReference", "CompareReference"])
def test_names_that_are_not_plain_file_names_are_refused(fake, folder, rpc, name):
    error = refused(getattr(fake, rpc), reference(name))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert error.details().startswith("name ") and "ending in '.npz'" in error.details()
    assert_short_and_clean(error)
    assert not (folder.parent / "escape.npz").exists() and not Path("/tmp/escape.npz").exists()
    assert not (folder / "escape").exists() and not (folder / "escape.npz").exists(), "'.npz' must never be appended"


def test_absolute_names_tell_nothing_about_what_exists(fake):
    there, absent = (refused(fake.CompareReference, reference(name)) for name in ("/etc/passwd", "/nonexistent"))
    assert there.code() is absent.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert there.details().replace("/etc/passwd", "X") == absent.details().replace("/nonexistent", "X")


def test_a_long_name_is_cut_in_the_message(fake):
    error = refused(fake.ExportReference, reference("x" * 100_000 + ".npz"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert_short_and_clean(error)


def test_a_missing_reference_is_not_found_and_the_message_shows_no_path(fake, folder):
    error = refused(fake.CompareReference, reference("absent.npz"))
    assert error.code() is grpc.StatusCode.NOT_FOUND
    assert error.details() == "no reference named 'absent.npz' in this runner's reference folder"
    assert str(folder) not in error.details()


def test_export_replaces_a_symlink_and_leaves_its_target_alone(fake, folder, tmp_path):
    target = tmp_path / "target.npz"
    target.write_bytes(b"precious")
    (folder / "link.npz").symlink_to(target)
    fake.ExportReference(reference("link.npz"), timeout=RPC_TIMEOUT_S)
    assert target.read_bytes() == b"precious"
    assert not (folder / "link.npz").is_symlink() and (folder / "link.npz").is_file()
    assert fake.CompareReference(reference("link.npz"), timeout=RPC_TIMEOUT_S).matched


def test_compare_does_not_follow_a_symlink(fake, folder, tmp_path):
    outside = tmp_path / "outside.npz"
    write_npz(outside, **valid_arrays())
    (folder / "followed.npz").symlink_to(outside)
    error = refused(fake.CompareReference, reference("followed.npz"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "symbolic link" in error.details()
    assert str(tmp_path) not in error.details()


def test_a_fifo_is_refused_at_once_and_the_cpu_stays_free(fake, folder):
    os.mkfifo(folder / "fifo.npz")
    started = time.monotonic()
    error = refused(fake.CompareReference, reference("fifo.npz"), timeout=PROMPT_S * 4)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "not a regular file" in error.details()
    assert time.monotonic() - started < PROMPT_S
    run = fake.Run(
        pb.RunRequest(
            model="resnet18",
            mode=pb.MODE_INFER,
            batch_size=1,
            input_shape=SHAPE,
            warmup_steps=0,
            measured_steps=2,
            min_measure_s=0.0,
            device=pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU),
        ),
        timeout=PROMPT_S * 4,
    )
    phases = [event.progress.phase for event in run if event.WhichOneof("event") == "progress"]
    assert pb.PHASE_QUEUED not in phases and phases[-1] == pb.PHASE_DONE


def test_a_folder_under_the_name_is_refused(fake, folder):
    (folder / "folder.npz").mkdir()
    error = refused(fake.CompareReference, reference("folder.npz"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "not a regular file" in error.details()
    error = refused(fake.ExportReference, reference("folder.npz"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert_short_and_clean(error)


def malformed_files() -> dict[str, bytes]:
    def npz(**arrays) -> bytes:
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        return buffer.getvalue()

    valid = npz(**valid_arrays())
    npy = io.BytesIO()
    np.save(npy, np.ones(3))
    pickled = io.BytesIO()
    np.savez(pickled, input=np.array([{"a": 1}], dtype=object), output=np.ones(2))
    not_npy = io.BytesIO()
    with zipfile.ZipFile(not_npy, "w") as archive:
        archive.writestr("input.npy", b"not an array")
        archive.writestr("output.npy", b"nor this")
    return {
        "garbage": b"\x00garbage" * 100,
        "empty": b"",
        "npy": npy.getvalue(),
        "truncated": valid[: len(valid) // 2],
        "pickled": pickled.getvalue(),
        "not_npy": not_npy.getvalue(),
        "no_output": npz(input=valid_arrays()["input"]),
        "strings": npz(input=np.array(["a", "b"]), output=np.ones(2)),
        "wrong_shape": npz(input=np.ones((2, 3, 16, 16), np.float32), output=np.ones((2, 1000), np.float32)),
    }


@pytest.mark.parametrize("kind", list(malformed_files()))
def test_a_malformed_file_is_an_invalid_argument_with_a_short_reason(fake, folder, kind):
    (folder / f"malformed-{kind}.npz").write_bytes(malformed_files()[kind])
    error = refused(fake.CompareReference, reference(f"malformed-{kind}.npz"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert f"'malformed-{kind}.npz'" in error.details()
    assert_short_and_clean(error)


def test_token_ids_outside_the_vocabulary_are_refused(fake, folder):
    write_npz(folder / "tokens.npz", input=np.full((2, 8), 10**9), output=np.ones((2, 2), np.float32))
    error = refused(fake.CompareReference, pb.ReferenceRequest(model="bert_base", input_shape=[8], name="tokens.npz"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "token ids" in error.details()


def test_an_oversized_file_is_refused(fake, folder):
    (folder / "big.npz").write_bytes(b"\x00" * (MAX_BYTES + 1))
    error = refused(fake.CompareReference, reference("big.npz"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "--max-reference-bytes" in error.details()


def test_a_small_file_that_unpacks_past_the_bound_is_refused(fake, folder):
    buffer = io.BytesIO()
    np.savez_compressed(buffer, input=np.zeros(MAX_BYTES, np.float32), output=np.zeros(2, np.float32))
    assert len(buffer.getvalue()) < MAX_BYTES // 10
    (folder / "bomb.npz").write_bytes(buffer.getvalue())
    error = refused(fake.CompareReference, reference("bomb.npz"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "--max-reference-bytes" in error.details()


def test_an_export_past_the_bound_writes_nothing(fake, folder):
    error = refused(fake.ExportReference, reference("too-big.npz", input_shape=[3, 224, 224], batch_size=64))
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-reference-bytes" in error.details()
    assert not (folder / "too-big.npz").exists()
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("rpc", ["ExportReference", "CompareReference"])
@pytest.mark.parametrize(
    "fields, named",
    [
        ({"batch_size": 2**31}, "batch_size must be between 1 and 64"),
        ({"batch_size": 65}, "batch_size must be between 1 and 64"),
        ({"seed": 2**40}, "seed must be between 0 and 4294967295"),
    ],
)
def test_batch_size_and_seed_out_of_range(fake, rpc, fields, named):
    error = refused(getattr(fake, rpc), reference("in-range.npz", **fields))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and named in error.details(), error.details()


def test_cancelled_parity_requests_waiting_for_the_cpu_end_promptly(fake, folder, cpu_held):
    # The CPU run and these fill the runner's queue (--max-queued-requests, 8): if a cancelled request kept
    # waiting for the CPU, its place would stay taken and every later request would be refused as busy.
    waiting = [fake.ExportReference.future(reference(f"waiting-{i}.npz")) for i in range(7)]
    time.sleep(1.0)
    assert not any(future.done() for future in waiting), "parity work ran beside a CPU run"
    busy = refused(fake.ExportReference, reference("one-more.npz"))
    assert busy.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and "busy" in busy.details()
    for future in waiting:
        future.cancel()
    started = time.monotonic()
    fake.Describe(pb.DescribeRequest(), timeout=PROMPT_S)
    assert time.monotonic() - started < PROMPT_S
    time.sleep(1.0)
    write_npz(folder / "waiting.npz", **valid_arrays())
    # Admitted again (the cancelled ones left the queue), so it waits for the CPU until its deadline.
    with_deadline = refused(fake.CompareReference, reference("waiting.npz"), timeout=1.0)
    assert with_deadline.code() is grpc.StatusCode.DEADLINE_EXCEEDED


def test_the_wait_for_the_cpu_is_bounded_and_cancellable(monkeypatch, tmp_path):
    service = RunnerService(FakeBackend(step_time_s=0.0), references=ReferenceFolder(str(tmp_path)))
    request = ReferenceRequest(model="resnet18", name="bounded.npz", input_shape=tuple(SHAPE))
    cpu = service._locks.lock(DeviceRef(DeviceKind.CPU))
    monkeypatch.setattr(service_mod, "CPU_WAIT_LIMIT_S", 0.5)
    with cpu:
        with pytest.raises(Unavailable, match="CPU stayed busy"):
            service.export_reference(request, lambda: False)
        cancel = threading.Event()
        threading.Timer(0.3, cancel.set).start()
        with pytest.raises(Cancelled, match="waiting for the CPU"):
            service.export_reference(request, cancel.is_set)
    assert not (tmp_path / "bounded.npz").exists()
    service.export_reference(request, lambda: False)
    assert service.compare_reference(request, lambda: False).matched


def test_the_default_folder_is_private_and_removed_at_exit(tmp_path):
    env = {"TMPDIR": str(tmp_path), "FWBENCH_REFERENCE_DIR": ""}
    with Fake(env=env).runner(tmp_path / "fake.log") as runner:
        with grpc.insecure_channel(runner.address) as channel:
            pb_grpc.RunnerStub(channel).ExportReference(reference("private.npz"), timeout=RPC_TIMEOUT_S)
        [made] = [p for p in tmp_path.iterdir() if p.name.startswith("fwbench-references-")]
        assert made.stat().st_mode & 0o777 == 0o700
        assert (made / "private.npz").is_file()
    assert not made.exists()


def _fake_runner(tmp_path: Path, *flags: str) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmp_path), "FWBENCH_REFERENCE_DIR": ""}
    return subprocess.Popen(
        [*fake_runner_command(), *flags],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )


def test_a_runner_stopped_the_moment_it_listens_removes_its_folder(tmp_path):
    # A parent may stop a runner as soon as it reads the line that says where it listens; before the runner set its
    # own handlers, SIGTERM's default action ended it (-15) in 18 of 20 such stops and left the folder behind.
    for attempt in range(5):
        made = tmp_path / str(attempt)
        made.mkdir()
        runner = _fake_runner(made)
        assert b"listening" in runner.stdout.readline()
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(PROMPT_S) == 0
        assert list(made.iterdir()) == []


def test_a_runner_refused_at_start_leaves_no_folder(tmp_path):
    runner = _fake_runner(tmp_path, "--address", "0.0.0.0:0")  # no TLS nor token: refused
    assert runner.wait(PROMPT_S) != 0
    assert list(tmp_path.iterdir()) == []


def test_the_folder_comes_from_the_environment(tmp_path):
    env = {"FWBENCH_REFERENCE_DIR": str(tmp_path)}
    with Fake(env=env).runner(tmp_path / "fake.log") as runner:
        with grpc.insecure_channel(runner.address) as channel:
            pb_grpc.RunnerStub(channel).ExportReference(reference("from-env.npz"), timeout=RPC_TIMEOUT_S)
    assert (tmp_path / "from-env.npz").is_file()


@pytest.mark.parametrize("given", ["/etc", "/usr/lib", "/"])
def test_a_system_folder_is_refused_as_the_reference_folder_before_the_runner_listens(tmp_path, given):
    before = sorted(os.listdir(given))
    done = subprocess.run(
        [*fake_runner_command(), "--address", "127.0.0.1:0", "--reference-dir", given],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and f"--reference-dir {given} is a system folder" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and sorted(os.listdir(given)) == before


def test_the_core_refuses_the_folders_the_aggregator_refuses():
    # Two copies of one list (the aggregator and the runners share only the contract): held equal here.
    assert (system_folders.SYSTEM_FOLDERS, system_folders.SYSTEM_TREES) == (
        folders.SYSTEM_FOLDERS,
        folders.SYSTEM_TREES,
    )


def test_parity_between_runners_with_different_folders_says_to_share_one(folder_fake_address, tmp_path):
    other = tmp_path / "other-references"
    other.mkdir()
    with Fake(flags=("--reference-dir", str(other))).runner(tmp_path / "other.log") as second:
        runners = ["--runner", f"torch={second.address}", "--runner", f"tensorflow={folder_fake_address}"]
        done = fwbench("parity", "--models", "resnet18", *runners, "--out", str(tmp_path / "out"))
    assert done.returncode == 1, done.stderr
    assert "NOT_FOUND" in done.stderr and "--reference-dir" in " ".join(done.stderr.split()), done.stderr


def test_parity_in_bf16_checks_the_generating_models_and_says_where_their_tokens_diverge(folder_fake_address, tmp_path):
    runners = ["--runner", f"torch={folder_fake_address}", "--runner", f"tensorflow={folder_fake_address}"]
    out = tmp_path / "out"
    done = fwbench("parity", "--precision", "amp_bf16", *runners, "--out", str(out))
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(next(out.glob("*-parity")) / "parity.csv")
    generating = {name for name, spec in MODEL_SPECS.items() if spec.generates}
    assert set(table["model"].str.split(" ").str[0]) == generating, table["model"]
    assert set(table["tokens"]) == {f"identical ({2 * PARITY_NEW_TOKENS}) in amp_bf16"}, table["tokens"]
    assert "in amp_bf16" in done.stdout

    named = fwbench("parity", "--precision", "amp_bf16", "--models", "resnet18", *runners, "--out", str(out))
    assert named.returncode == 2, named.stderr
    message = " ".join(named.stderr.split())
    assert "--precision" in message and "resnet18 does not generate" in message and "gpt2_small" in message, message


# --- the real runners, sharing the pool's reference folder ---------------------------------------------


@pytest.fixture(scope="module")
def real(runner_pool):
    stubs = {}
    channels = []
    for name in ("torch", "tensorflow"):
        channels.append(grpc.insecure_channel(runner_pool.get(name).address))
        stubs[name] = pb_grpc.RunnerStub(channels[-1])
    yield stubs, runner_pool.reference_dir
    for channel in channels:
        channel.close()


@pytest.mark.frameworks
def test_torch_refuses_a_huge_batch_before_the_framework_sees_it(real):
    stubs, _ = real
    error = refused(stubs["torch"].ExportReference, reference("huge.npz", batch_size=2**31))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "batch_size" in error.details()


@pytest.mark.frameworks
def test_torch_export_replaces_a_symlink_and_tensorflow_refuses_weights_that_do_not_fit(real, tmp_path):
    stubs, shared = real
    target = tmp_path / "target.npz"
    target.write_bytes(b"precious")
    (shared / "torch-link.npz").symlink_to(target)
    stubs["torch"].ExportReference(reference("torch-link.npz"), timeout=RPC_TIMEOUT_S)
    assert target.read_bytes() == b"precious" and not (shared / "torch-link.npz").is_symlink()
    assert stubs["tensorflow"].CompareReference(reference("torch-link.npz"), timeout=RPC_TIMEOUT_S).matched

    with np.load(shared / "torch-link.npz") as stored:
        arrays = {key: stored[key] for key in stored.files}
    without = {key: value for key, value in arrays.items() if key != "weights/fc.weight"}
    write_npz(shared / "no-fc.npz", **without)
    error = refused(stubs["tensorflow"].CompareReference, reference("no-fc.npz"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "fc.weight" in error.details(), error.details()
    write_npz(shared / "bad-fc.npz", **{**arrays, "weights/fc.weight": np.ones((3, 3), np.float32)})
    error = refused(stubs["tensorflow"].CompareReference, reference("bad-fc.npz"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "do not fit resnet18" in error.details(), (
        error.details()
    )
    assert_short_and_clean(error)


def _config(model: str, token_precision: Precision = Precision.FP32) -> ModelConfig:
    spec = MODEL_SPECS[model]
    return ModelConfig(spec, spec.default_input_shape, {}, 2, 0, token_precision)


def test_generated_tokens_match_only_where_every_token_is_the_same_and_say_where_they_first_differ():
    outputs_matched = ReferenceReport(output_shape=(2, 5), matched=True)
    fp32 = _config("gpt2_small")
    expected = np.array([[5, 6, 7, 8], [1, 2, 3, 4]])
    same = compared_tokens(outputs_matched, fp32, expected.copy(), expected)
    assert (same.matched, same.tokens_compared, same.first_token_divergence) == (True, 8, -1)
    later = expected.copy()
    later[1, 2] = 9
    differs = compared_tokens(outputs_matched, fp32, later, expected)
    assert (differs.matched, differs.first_token_divergence) == (False, 2)
    short = compared_tokens(outputs_matched, fp32, expected[:, :3], expected)
    assert (short.matched, short.first_token_divergence) == (False, 0)


def test_in_a_lower_precision_the_first_divergence_is_reported_and_the_outputs_alone_decide():
    bf16 = _config("gpt2_small", Precision.AMP_BF16)
    expected = np.array([[5, 6, 7, 8], [1, 2, 3, 4]])
    later = expected.copy()
    later[0, 3] = 0
    for outputs_matched in (True, False):
        report = compared_tokens(ReferenceReport(output_shape=(2, 5), matched=outputs_matched), bf16, later, expected)
        assert (report.matched, report.tokens_compared, report.first_token_divergence) == (outputs_matched, 8, 3)


def test_a_references_tokens_are_compared_only_in_the_precision_they_were_generated_in():
    bf16, fp32 = _config("gpt2_small", Precision.AMP_BF16), _config("gpt2_small")
    tokens = np.array([[5, 6]])
    stored = reference_tokens(bf16, tokens)
    assert (expected_tokens(bf16, stored) == tokens).all()
    with pytest.raises(InvalidArgument, match="generated in amp_bf16, but precision asks to compare them in fp32"):
        expected_tokens(fp32, stored)
    # fp32 tokens stand where they stood before precisions were recorded.
    legacy = {GENERATED_TOKENS: tokens}
    assert (expected_tokens(fp32, legacy) == tokens).all()
    with pytest.raises(InvalidArgument, match="generated in fp32"):
        expected_tokens(bf16, legacy)
    with pytest.raises(InvalidArgument, match="holds no generated_tokens"):
        expected_tokens(fp32, {})


def test_a_reference_precision_is_refused_naming_the_field_and_the_accepted_values(fake, folder):
    error = refused(
        fake.ExportReference,
        pb.ReferenceRequest(model="gpt2_small", input_shape=[16], name="fp16.npz", precision=pb.PRECISION_AMP_FP16),
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert "precision amp_fp16" in error.details() and "accepted values: fp32, amp_bf16" in error.details()
    error = refused(fake.ExportReference, reference("resnet-bf16.npz", precision=pb.PRECISION_AMP_BF16))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "resnet18 does not generate" in error.details()
    assert not (folder / "fp16.npz").exists() and not (folder / "resnet-bf16.npz").exists()


def test_a_bf16_reference_records_its_tokens_precision_and_a_comparison_in_fp32_is_refused(fake, folder):
    bf16 = pb.ReferenceRequest(
        model="gpt2_small", input_shape=[16], name="gpt2-bf16.npz", precision=pb.PRECISION_AMP_BF16
    )
    fake.ExportReference(bf16, timeout=RPC_TIMEOUT_S)
    with np.load(folder / "gpt2-bf16.npz") as stored:
        assert "generated_tokens_amp_bf16" in stored.files and GENERATED_TOKENS not in stored.files
    compared = fake.CompareReference(bf16, timeout=RPC_TIMEOUT_S)
    assert compared.matched and compared.tokens_compared == 2 * PARITY_NEW_TOKENS, compared
    fp32 = pb.ReferenceRequest(model="gpt2_small", input_shape=[16], name="gpt2-bf16.npz")
    error = refused(fake.CompareReference, fp32)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "export the reference with the same" in error.details()

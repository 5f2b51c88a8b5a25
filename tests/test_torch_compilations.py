"""The torch runner's TorchScript and onnxruntime compilations over real gRPC on the CPU: runs that say how the
model was compiled, and refusals of what a compilation cannot run."""

from __future__ import annotations

import subprocess

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.requests import CPU, MEASURED, refusal, run

from fwbench_aggregator.run import launch
from fwbench_core.choices import DeviceKind
from fwbench_core.devices import Device, DeviceRef
from fwbench_core.errors import FailedPrecondition
from fwbench_core.onnx_runtime import provider_for

# Every test here runs a real framework runner.
pytestmark = pytest.mark.frameworks


@pytest.fixture(scope="module")
def torch_stub(runner_pool):
    with grpc.insecure_channel(runner_pool.get("torch").address) as channel:
        yield pb_grpc.RunnerStub(channel)


@pytest.mark.parametrize("mode", [pb.MODE_TRAIN, pb.MODE_INFER], ids=["train", "infer"])
@pytest.mark.parametrize(
    "model, shape, compiled",
    [
        ("resnet18", [3, 32, 32], "torchscript (scripted)"),
        # deepspeech2 calls hardtanh with integer bounds, which the script compiler refuses; the second run names
        # that reason too, not what the first failed attempt left behind.
        ("deepspeech2", [161, 16], "torchscript (traced: torch.jit.script failed: RuntimeError: hardtanh("),
    ],
    ids=["scripted", "traced"],
)
def test_torchscript_runs_and_says_whether_it_scripted_or_traced(torch_stub, model, shape, compiled, mode):
    config, summary = run(torch_stub, model=model, input_shape=shape, mode=mode, compilation=pb.COMPILATION_TORCHSCRIPT)
    assert config.compilation == pb.COMPILATION_TORCHSCRIPT
    assert summary.measured_steps == MEASURED
    notes = [flag for flag in summary.flags if flag.startswith("torchscript")]
    assert len(notes) == 1 and notes[0].startswith(compiled), summary.flags
    assert summary.first_step_traced


def test_torchscript_infers_after_training_the_same_model(torch_stub):
    # TorchScript shares a class's graph optimized while training with the next module of that class.
    for mode in (pb.MODE_TRAIN, pb.MODE_INFER):
        _, summary = run(
            torch_stub, model="lstm_lm", input_shape=[8], mode=mode, compilation=pb.COMPILATION_TORCHSCRIPT
        )
        assert "torchscript (scripted)" in summary.flags


def test_onnxruntime_runs_inference_on_the_cpu_provider_in_channels_first(torch_stub):
    config, summary = run(torch_stub, compilation=pb.COMPILATION_ONNXRUNTIME)
    assert config.compilation == pb.COMPILATION_ONNXRUNTIME
    assert config.layout == pb.LAYOUT_CHANNELS_FIRST  # unset, the layout the exported graph takes
    assert summary.measured_steps == MEASURED and summary.throughput_samples_per_s > 0
    assert any(flag.startswith("onnxruntime ") and "(CPUExecutionProvider)" in flag for flag in summary.flags)
    assert summary.peak_memory_bytes > 0


def test_onnxruntime_refuses_training_naming_the_compilations_that_train(torch_stub):
    error = refusal(torch_stub, mode=pb.MODE_TRAIN, compilation=pb.COMPILATION_ONNXRUNTIME)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "compilation onnxruntime runs mode infer only, not mode train; "
        "compilations for mode train on the torch runner: eager, torch_compile, torchscript"
    )


@pytest.mark.parametrize(
    "fields, named",
    [
        (dict(precision=pb.PRECISION_AMP_BF16), "precision amp_bf16 is not supported with compilation onnxruntime"),
        (dict(layout=pb.LAYOUT_CHANNELS_LAST), "layout channels_last is not supported with compilation onnxruntime"),
        (
            dict(device=None, devices=[CPU, pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU, index=1)]),
            "strategy ddp is not supported with compilation onnxruntime",
        ),
    ],
    ids=["amp_bf16", "channels_last", "ddp"],
)
def test_onnxruntime_refuses_what_it_cannot_run_naming_what_it_can(torch_stub, fields, named):
    error = refusal(torch_stub, compilation=pb.COMPILATION_ONNXRUNTIME, **fields)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert named in error.details() and "supported with it: " in error.details()


def test_onnxruntime_on_a_gpu_without_the_cuda_provider_is_refused_naming_it():
    gpu = Device(DeviceRef(DeviceKind.GPU, 0), "Test GPU")
    assert provider_for(gpu, ["CUDAExecutionProvider", "CPUExecutionProvider"], "1.0") == "CUDAExecutionProvider"
    with pytest.raises(FailedPrecondition) as refused:
        provider_for(gpu, ["AzureExecutionProvider", "CPUExecutionProvider"], "1.0")
    assert str(refused.value) == (
        "compilation onnxruntime on gpu:0 needs onnxruntime's CUDAExecutionProvider, which this runner's "
        "onnxruntime 1.0 lacks (it has AzureExecutionProvider, CPUExecutionProvider); install onnxruntime-gpu "
        "(built for this CUDA) in place of onnxruntime"
    )


def test_torchscript_trains_under_bf16_autocast(torch_stub):
    config, summary = run(
        torch_stub, mode=pb.MODE_TRAIN, compilation=pb.COMPILATION_TORCHSCRIPT, precision=pb.PRECISION_AMP_BF16
    )
    assert config.precision == pb.PRECISION_AMP_BF16
    assert "torchscript (scripted)" in summary.flags


def test_torchscript_trains_under_ddp_on_two_cpu_workers(torch_stub):
    config, summary = run(
        torch_stub,
        mode=pb.MODE_TRAIN,
        compilation=pb.COMPILATION_TORCHSCRIPT,
        device=None,
        devices=[CPU, pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU, index=1)],
    )
    assert (config.strategy, config.world_size) == (pb.STRATEGY_DDP, 2)
    assert "torchscript (scripted)" in summary.flags


SAME_OUTPUT_CHECK = """
import torch
from fwbench_core.catalog import load_catalog
from fwbench_core.choices import Compilation, DeviceKind, Mode
from fwbench_core.devices import DeviceRef, RunnerSettings
from fwbench_core.runs import RunRequest
from fwbench_core.validation import resolve
from fwbench_torch.backend import TorchBackend, build_model

backend = TorchBackend(RunnerSettings(1, 1))
request = RunRequest("resnet18", Mode.INFER, 2, (3, 32, 32), compilation=Compilation.ONNXRUNTIME, seed=3,
                     device=DeviceRef(DeviceKind.CPU, 0))
config = resolve(request, backend.runner_info().devices, backend.capabilities, load_catalog(backend.models))
workload = backend.build(config)
inputs = workload.inputs.numpy()
(exported,) = workload.session.run(None, {workload.session.get_inputs()[0].name: inputs})
torch.manual_seed(config.seed)
with torch.no_grad():
    eager = build_model(config).eval()(torch.from_numpy(inputs)).numpy()
print(abs(exported - eager).max() / abs(eager).max())
"""


def test_onnxruntime_runs_the_network_eager_pytorch_runs():
    python = launch.default_venvs() / "torch" / "bin" / "python"
    done = subprocess.run([str(python), "-c", SAME_OUTPUT_CHECK], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.strip().splitlines()[-1]) < 1e-4

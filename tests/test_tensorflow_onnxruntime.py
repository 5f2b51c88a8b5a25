"""The TensorFlow runner's onnxruntime compilation over real gRPC on the CPU: the Keras model converted by tf2onnx
and run by the core's onnxruntime session, the same network as Keras runs, and a model tf2onnx cannot convert
refused by name. (The session, its provider check and the limits it shares with the torch runner:
tests/test_torch_compilations.py.)"""

from __future__ import annotations

import subprocess

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.requests import MEASURED, refusal, run

from fwbench_aggregator.run import launch

# Every test here runs a real framework runner.
pytestmark = pytest.mark.frameworks


@pytest.fixture(scope="module")
def tensorflow_stub(runner_pool):
    with grpc.insecure_channel(runner_pool.get("tensorflow").address) as channel:
        yield pb_grpc.RunnerStub(channel)


def test_onnxruntime_runs_the_converted_model_channels_last(tensorflow_stub):
    config, summary = run(tensorflow_stub, compilation=pb.COMPILATION_ONNXRUNTIME)
    assert config.compilation == pb.COMPILATION_ONNXRUNTIME and config.layout == pb.LAYOUT_CHANNELS_LAST
    assert summary.measured_steps == MEASURED and summary.throughput_samples_per_s > 0
    assert any(
        flag.startswith("onnxruntime ") and "(CPUExecutionProvider), exported by tf2onnx " in flag
        for flag in summary.flags
    ), summary.flags


def test_onnxruntime_refuses_training_naming_the_compilations_that_train(tensorflow_stub):
    error = refusal(tensorflow_stub, mode=pb.MODE_TRAIN, compilation=pb.COMPILATION_ONNXRUNTIME)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "compilation onnxruntime runs mode infer only, not mode train; "
        "compilations for mode train on the tensorflow runner: eager, graph, xla"
    )


UNCONVERTED_OP_CHECK = """
import keras
from fwbench_core.catalog import load_catalog
from fwbench_core.errors import FailedPrecondition
from fwbench_core.choices import Compilation, DeviceKind, Mode
from fwbench_core.devices import DeviceRef, RunnerSettings
from fwbench_core.runs import RunRequest
from fwbench_core.validation import resolve
from fwbench_tensorflow.backend import TensorFlowBackend
from fwbench_tensorflow.onnx_runtime import onnxruntime_workload

backend = TensorFlowBackend(RunnerSettings(1, 1))
request = RunRequest("resnet18", Mode.INFER, 2, (3, 32, 32), compilation=Compilation.ONNXRUNTIME,
                     device=DeviceRef(DeviceKind.CPU, 0))
config = resolve(request, backend.runner_info().devices, backend.capabilities, load_catalog(backend.models))
# A small stand-in for bert_base and gpt2_small: Keras's exact GELU is written with Erfc.
exact_gelu = lambda config: keras.Sequential(
    [keras.Input((32, 32, 3)), keras.layers.Flatten(), keras.layers.Dense(4, activation="gelu")]
)
try:
    onnxruntime_workload(config, exact_gelu)
except FailedPrecondition as error:
    print(error)
"""


def test_a_model_tf2onnx_cannot_convert_is_refused_naming_the_op():
    python = launch.default_venvs() / "tensorflow" / "bin" / "python"
    done = subprocess.run([str(python), "-c", UNCONVERTED_OP_CHECK], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].endswith("cannot convert resnet18's TensorFlow op(s) Erfc to ONNX")


SAME_OUTPUT_CHECK = """
import keras
from fwbench_core.catalog import load_catalog
from fwbench_core.choices import Compilation, DeviceKind, Mode
from fwbench_core.devices import DeviceRef, RunnerSettings
from fwbench_core.runs import RunRequest
from fwbench_core.validation import resolve
from fwbench_tensorflow.backend import TensorFlowBackend
from fwbench_tensorflow.workload import build_model

backend = TensorFlowBackend(RunnerSettings(1, 1))
request = RunRequest("mobilenet_v2", Mode.INFER, 2, (3, 32, 32), compilation=Compilation.ONNXRUNTIME, seed=3,
                     device=DeviceRef(DeviceKind.CPU, 0))
config = resolve(request, backend.runner_info().devices, backend.capabilities, load_catalog(backend.models))
workload = backend.build(config)
inputs = workload.inputs.numpy()
(converted,) = workload.session.run(None, {workload.session.get_inputs()[0].name: inputs})
keras.utils.set_random_seed(config.seed)
keras_output = build_model(config)(inputs, training=False).numpy()
print(abs(converted - keras_output).max() / abs(keras_output).max())
"""


def test_onnxruntime_runs_the_network_keras_runs():
    python = launch.default_venvs() / "tensorflow" / "bin" / "python"
    done = subprocess.run([str(python), "-c", SAME_OUTPUT_CHECK], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.strip().splitlines()[-1]) < 1e-4

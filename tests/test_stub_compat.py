"""Generated stubs keep working with an older protobuf, as an older TensorFlow image carries.

TensorFlow up to 2.15 pins protobuf below 5. This builds such an environment,
generates the stubs there the way setup and the images do, and serves and
calls the Runner service across the two protobuf generations.
"""

from __future__ import annotations

import subprocess
import textwrap
import venv

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc

from fwbench_aggregator.run.launch import REPO_ROOT, LocalRunner
from fwbench_core.builtin import MODEL_SPECS

# Every test here runs the command line, runners or generated requests end to end: seconds each.
pytestmark = pytest.mark.slow

OLD_PROTOBUF = "protobuf<5"


def run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def old_protobuf_python(tmp_path_factory) -> str:
    env = tmp_path_factory.mktemp("old-protobuf-env")
    venv.EnvBuilder(with_pip=True).create(env)
    python = str(env / "bin" / "python")
    run(
        python,
        "-m",
        "pip",
        "install",
        "-q",
        OLD_PROTOBUF,
        "grpcio-tools",
        "grpcio-health-checking",
        "grpcio-reflection",
        "numpy",
    )
    run(python, "-m", "pip", "install", "-q", "--no-deps", str(REPO_ROOT / "runners" / "core"))
    run(python, str(REPO_ROOT / "protos" / "generate.py"))
    return python


def test_the_old_environment_really_has_an_old_protobuf(old_protobuf_python):
    version = run(old_protobuf_python, "-c", "import google.protobuf as p; print(p.__version__)").strip()
    assert int(version.split(".")[0]) < 5, version
    import google.protobuf

    assert int(google.protobuf.__version__.split(".")[0]) >= 5, "the test needs two protobuf generations"


def test_a_runner_on_old_protobuf_serves_a_client_on_new_protobuf_and_back(old_protobuf_python, tmp_path):
    command = [old_protobuf_python, "-m", "fwbench_core.fake", "--address", "127.0.0.1:0"]
    with LocalRunner("fake-old-protobuf", command, tmp_path / "runner.log") as runner:
        with grpc.insecure_channel(runner.address) as channel:
            stub = pb_grpc.RunnerStub(channel)
            assert stub.Describe(pb.DescribeRequest()).protocol == "fwbench.runner.v1"
            request = pb.RunRequest(
                model="resnet18", mode=pb.MODE_INFER, batch_size=2, warmup_steps=1, measured_steps=3, min_measure_s=0.0
            )
            events = list(stub.Run(request))
            assert events[-1].summary.measured_steps == 3

        client = textwrap.dedent(
            f"""
            import grpc
            from fwbench.runner.v1 import runner_pb2 as pb, runner_pb2_grpc as pb_grpc
            stub = pb_grpc.RunnerStub(grpc.insecure_channel("{runner.address}"))
            names = [m.name for m in stub.ListModels(pb.ListModelsRequest()).models]
            events = list(stub.Run(pb.RunRequest(model="mobilenet_v2", mode=pb.MODE_TRAIN, batch_size=1, measured_steps=2, min_measure_s=0.0)))
            print(",".join(names), events[-1].summary.measured_steps)
            """
        )
        assert run(old_protobuf_python, "-c", client).split() == [",".join(sorted(MODEL_SPECS)), "2"]

"""A user's plug-in code cannot wedge or kill a runner: a builder that hangs or ends its process at import, or
hangs, ends its process or fails to allocate in build(), costs the process that ran it, within the runner's plug-in
limit, and the request fails naming the plug-in, its builder and the phase; the runner serves every other model at
once. Over real gRPC, on the torch runner (the code paths are the core's; every framework's runner shares them)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.plugins import SHAPE, declaration, write_plugin
from support.processes import alive, assert_all_end, descendants
from support.requests import refusal, run

from fwbench_aggregator.run import launch
from fwbench_core.limits import MAX_WORKER_OUTPUT_BYTES
from fwbench_core.plugins import MODELS_DIR_ENV, MODELS_DIR_FLAG, content_hash

pytestmark = pytest.mark.frameworks

TINY_CNN_BUILDER = """\
import os

import torch


def build(spec, input_shape, options):
    # Which process built the model: the test tells the runner's own from a run's worker process.
    with open(os.environ["FWBENCH_TEST_BUILD_LOG"], "a") as log:
        log.write(f"{os.getpid()}\\n")
    classes = spec.heads[0][1].outputs
    return torch.nn.Sequential(
        torch.nn.Conv2d(input_shape[0], 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, classes),
    )
"""
# Conv2d(3, 8, 3): 3*8*9 weights + 8 biases; Linear(8, 10): 80 + 10.
TINY_CNN_PARAMETERS = 224 + 90


def built_by(build_log: Path) -> set[int]:
    return {int(line) for line in build_log.read_text().split()}


# Short enough for a test, long enough for a tiny model's build on a loaded 2-core host.
LIMIT_S = 10
RPC_TIMEOUT_S = 120
HANG = "import time\nwhile True:\n    time.sleep(0.1)\n"
EXIT = "import os\nos._exit(3)\n"
PROMPT_S = 5


def builder(body: str) -> str:
    """A build_torch.py whose build() runs `body`, indented, then returns the tiny CNN."""
    indented = "".join(f"    {line}\n" for line in body.splitlines())
    return TINY_CNN_BUILDER.replace(
        "def build(spec, input_shape, options):\n", f"def build(spec, input_shape, options):\n{indented}"
    )


# A build() that leaves a busy forked child and a detached sleep, their pids beside the build log.
LEAVES_PROCESSES = """\
import subprocess
children = [subprocess.Popen(["sleep", "61"], start_new_session=True).pid]
child = os.fork()
if child == 0:
    while True:
        pass
children.append(child)
with open(os.environ["FWBENCH_TEST_BUILD_LOG"] + ".children", "w") as log:
    log.write(" ".join(map(str, children)))
"""
PRINTS_A_LOT = "chunk = 'x' * (1 << 20) + '\\n'\nfor _ in range(64):\n    print(chunk)\n    print(chunk, file=__import__('sys').stderr)\n"

PLUGINS = {
    "tiny_cnn": TINY_CNN_BUILDER,
    "broken": "raise RuntimeError('broken on purpose')\n",
    "hangs_at_import": HANG + TINY_CNN_BUILDER,
    "exits_at_import": EXIT + TINY_CNN_BUILDER,
    "hangs_in_build": builder(HANG),
    "exits_in_build": builder(EXIT),
    "fails_to_allocate": builder("raise MemoryError('cannot allocate 64 GiB for the embedding table')"),
    "leaves_processes": builder(LEAVES_PROCESSES),
    "prints_a_lot": builder(PRINTS_A_LOT),
}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, runner_logs):
    """(models folder, stub, runner process id, build log, seconds the runner took to listen) of a torch runner
    given every plug-in above and a description of 10 MB."""
    models = tmp_path_factory.mktemp("models")
    for name, source in PLUGINS.items():
        write_plugin(models, name, builders={"torch": source})
    write_plugin(
        models,
        "long_description",
        builders={"torch": TINY_CNN_BUILDER},
        text=declaration("long_description").replace('"A tiny test CNN"', '"' + "x" * (10 << 20) + '"'),
    )
    build_log = tmp_path_factory.mktemp("builds") / "build-pids"
    env = {MODELS_DIR_ENV: "", "FWBENCH_TEST_BUILD_LOG": str(build_log)}
    command = [
        *launch.embedded_command("torch", launch.default_venvs()),
        MODELS_DIR_FLAG,
        str(models),
        "--plugin-limit-s",
        str(LIMIT_S),
    ]
    started = time.monotonic()
    with launch.LocalRunner("torch-hostile-plugins", command, runner_logs / "torch-hostile-plugins.log", env) as local:
        listening_s = time.monotonic() - started
        with grpc.insecure_channel(local.address) as channel:
            yield models, pb_grpc.RunnerStub(channel), local.process.pid, build_log, listening_s


def served_at_once(stub) -> float:
    """A built-in model runs right after: the seconds its run took, from request to summary."""
    started = time.monotonic()
    config, summary = run(stub, model="resnet18", input_shape=[3, 32, 32])
    assert summary.measured_steps == 2 and config.model == "resnet18"
    return time.monotonic() - started


def failure(call) -> tuple[grpc.RpcError, float]:
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value, time.monotonic() - started


def test_a_builder_that_hangs_or_exits_at_import_is_named_and_the_runner_listens(hostile):
    models, stub, _, _, listening_s = hostile
    described = {p.folder: p.error for p in stub.Describe(pb.DescribeRequest(), timeout=RPC_TIMEOUT_S).plugins}
    builder_of = lambda name: models / name / "build_torch.py"
    assert described[str(models / "hangs_at_import")] == (
        f"{builder_of('hangs_at_import')} did not finish importing within {LIMIT_S} s (a loop or a wait at import?); "
        "the runner stopped it and serves the other models"
    )
    assert described[str(models / "exits_at_import")] == (
        f"{builder_of('exits_at_import')} ended its process (exit code 3) while importing"
    )
    assert (
        described[str(models / "broken")] == f"{builder_of('broken')} failed to import: RuntimeError: broken on purpose"
    )
    assert described[str(models / "long_description")].startswith(
        f"{models / 'long_description' / 'model.toml'}: over 64 KiB"
    )
    served = {m.name for m in stub.ListModels(pb.ListModelsRequest(), timeout=RPC_TIMEOUT_S).models}
    assert {"tiny_cnn", "hangs_in_build", "exits_in_build", "fails_to_allocate", "resnet18"} <= served
    assert not served & {"broken", "hangs_at_import", "exits_at_import", "long_description"}
    print(f"\nthe runner listened {listening_s:.1f} s after it started, one plug-in hanging at import")

    error = refusal(stub, model="hangs_at_import", input_shape=SHAPE)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"did not finish importing within {LIMIT_S} s" in error.details()


def test_a_good_plugin_is_built_in_a_worker_kept_for_it_never_in_the_runners_process(hostile):
    models, stub, runner_pid, build_log, _ = hostile
    listed = {m.name: m for m in stub.ListModels(pb.ListModelsRequest(), timeout=RPC_TIMEOUT_S).models}
    assert listed["tiny_cnn"].content_hash == content_hash(models / "tiny_cnn")
    config, summary = run(stub, model="tiny_cnn", input_shape=SHAPE)
    assert (config.model, config.parameter_count, summary.measured_steps) == ("tiny_cnn", TINY_CNN_PARAMETERS, 2)
    report = stub.InspectModel(pb.InspectRequest(model="tiny_cnn", input_shape=SHAPE), timeout=RPC_TIMEOUT_S)
    assert report.parameter_count == TINY_CNN_PARAMETERS
    run(stub, model="tiny_cnn", input_shape=SHAPE)
    # Three builds, by one worker process: kept for the plug-in's next call, and never the runner.
    builds = build_log.read_text().split()
    assert len(builds) == 3 and len(built_by(build_log)) == 1 and runner_pid not in built_by(build_log), builds
    (kept,) = built_by(build_log)
    # A built-in's run ends the kept worker; the plug-in's next run starts another.
    served_at_once(stub)
    assert not Path(f"/proc/{kept}").exists(), "the kept worker outlived a built-in's run"
    run(stub, model="tiny_cnn", input_shape=SHAPE)
    assert len(built_by(build_log)) == 2 and runner_pid not in built_by(build_log)


@pytest.mark.parametrize("call", ["run", "inspect"])
@pytest.mark.parametrize(
    "model, code, message",
    [
        (
            "hangs_in_build",
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "{phase} did not return within 10 s; the runner stopped it",
        ),
        (
            "exits_in_build",
            grpc.StatusCode.FAILED_PRECONDITION,
            "the process running it ended (exit code 3) during {phase}",
        ),
        ("fails_to_allocate", grpc.StatusCode.RESOURCE_EXHAUSTED, "cannot allocate 64 GiB for the embedding table"),
    ],
)
def test_a_build_that_hangs_exits_or_fails_to_allocate_fails_alone_and_names_itself(
    hostile, call, model, code, message
):
    models, stub, _, _, _ = hostile
    if call == "run":
        error, took_s = failure(lambda: run(stub, model=model, input_shape=SHAPE))
        phase = "build()"
    else:
        request = pb.InspectRequest(model=model, input_shape=SHAPE)
        error, took_s = failure(lambda: stub.InspectModel(request, timeout=RPC_TIMEOUT_S))
        phase = "building and inspecting it"
    assert error.code() == code, error.details()
    assert message.format(phase=phase) in error.details()
    if code != grpc.StatusCode.RESOURCE_EXHAUSTED:
        assert error.details().startswith(f"plug-in {model} ({(models / model).resolve() / 'build_torch.py'}): ")
    after_s = served_at_once(stub)
    print(f"\n{call} {model}: {code.name} after {took_s:.1f} s; a built-in's run then took {after_s:.1f} s")


def test_what_a_build_leaves_running_ends_with_its_worker_and_a_built_in_runs_at_once_after(hostile):
    _, stub, _, build_log, _ = hostile
    run(stub, model="leaves_processes", input_shape=SHAPE)
    left = [int(pid) for pid in Path(f"{build_log}.children").read_text().split()]
    after_s = served_at_once(stub)  # its run closes the plug-in's kept worker, and all it started
    assert [pid for pid in left if alive(pid)] == [], "a forked child or a detached sleep outlived the worker"
    assert after_s < PROMPT_S, f"a built-in's run took {after_s:.1f} s after the plug-in's"
    print(f"\na built-in's run took {after_s:.1f} s after a plug-in that left a busy child and a detached sleep")


def test_a_plugins_prints_grow_the_runners_log_by_at_most_the_cap_and_a_note(hostile, runner_logs):
    _, stub, _, _, _ = hostile
    log = runner_logs / "torch-hostile-plugins.log"
    before = log.stat().st_size
    run(stub, model="prints_a_lot", input_shape=SHAPE)
    served_at_once(stub)  # closes the plug-in's kept worker: its output ends, and the note is written
    grown = log.read_bytes()[before:]
    assert len(grown) < MAX_WORKER_OUTPUT_BYTES + (64 << 10), f"the log grew by {len(grown)} bytes"
    assert b"bytes of its output dropped past 1048576 bytes (MAX_WORKER_OUTPUT_BYTES)" in grown


def test_a_plugin_edited_after_the_runner_loaded_it_is_refused_until_the_runner_restarts(hostile):
    # Last in this module: it edits tiny_cnn.
    models, stub, _, _, _ = hostile
    good = models / "tiny_cnn"
    (good / "build_torch.py").write_text(TINY_CNN_BUILDER + "# edited after the runner loaded it\n")
    error = refusal(stub, model="tiny_cnn", input_shape=SHAPE)
    assert f"plug-in {good.resolve()} changed since the runner loaded it" in error.details()
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, (
        "plugins.PluginError is no RunnerError: the worker's refusal of a changed plug-in reaches the "
        f"client as {error.code().name}: {error.details()}"
    )


def test_a_runner_stopped_while_a_plugin_hangs_at_import_ends_at_once_and_leaves_nothing(tmp_path):
    # Before it listens, a stop ends the start where it is (here the wait on a plug-in's check, up to its limit of
    # 60 s), and what the start made goes with it: the checking process and the private reference folder.
    models, scratch = tmp_path / "models", tmp_path / "scratch"
    scratch.mkdir()
    write_plugin(models, "hangs_at_import", builders={"torch": PLUGINS["hangs_at_import"]})
    log_path = tmp_path / "runner.log"
    command = [*launch.embedded_command("torch", launch.default_venvs()), MODELS_DIR_FLAG, str(models)]
    with open(log_path, "wb") as log:
        runner = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, MODELS_DIR_ENV: "", "TMPDIR": str(scratch), "FWBENCH_REFERENCE_DIR": ""},
        )
    try:
        deadline = time.monotonic() + RPC_TIMEOUT_S
        while "checking model plug-in" not in log_path.read_text(errors="replace"):
            assert runner.poll() is None and time.monotonic() < deadline, log_path.read_text(errors="replace")
            time.sleep(0.1)
        checking = descendants(runner.pid)
        assert checking, "the plug-in's check runs in a process of its own"
        stopped = time.monotonic()
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(RPC_TIMEOUT_S) == 128 + signal.SIGTERM
        assert time.monotonic() - stopped < LIMIT_S, "it waited for the plug-in's limit"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    # The checking process was killed and reaped before the runner exited; the resource tracker beside it ends when
    # its pipe from the runner closes, a moment later.
    assert_all_end(checking, "the plug-in's checking process and its resource tracker", PROMPT_S)
    assert [p.name for p in scratch.iterdir() if p.name.startswith("fwbench-references-")] == []

"""The command line and sweep files for distributed runs: --strategy, --devices and jobs across runners are
refused with exit 2 naming the option and the accepted forms before any runner starts; accepted ones become
the RunRequest the contract defines."""

from __future__ import annotations

import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from typer.testing import CliRunner

from fwbench_aggregator.base.vocabulary import Strategy
from fwbench_aggregator.cli import app
from fwbench_aggregator.plan.command_line_sweep import sweep_from_options
from fwbench_aggregator.plan.field_checks import SweepError
from fwbench_aggregator.plan.spec import RunSpec, per_runner
from fwbench_aggregator.plan.study_file import load_sweep
from fwbench_aggregator.run import wire

REFUSED = [
    (["--strategy", "horovod"], "--strategy", "accepted values: single, dp, ddp, mirrored, multi_worker_mirrored"),
    (["--strategy", "torch=fsdp"], "--strategy", "RUNNER=VALUE"),
    (["--devices", "cpu:0,cpu:0"], "--devices", "names cpu:0 twice"),
    (["--devices", "gpu0,gpu1"], "--devices", "is not KIND:N"),
    (["--devices", "cpu:0,gpu:1"], "--devices", "mixes CPU and GPU"),
    (["--devices", "cpu:0,cpu:1", "--device", "cpu"], "--devices", "not both"),
    (["--runner", "torch=a:1,a:1"], "--runner", "each address once"),
    (["--runner", "torch=a:1,b"], "--runner", "NAME=HOST:PORT,HOST:PORT"),
    (["--rendezvous-port", "70000"], "--rendezvous-port", "less than or equal to 65535"),
    (["--distributed-timeout-s", "0"], "--distributed-timeout-s", "greater than or equal to 1"),
]


@pytest.mark.parametrize("arguments, option, accepted", REFUSED, ids=[" ".join(a) for a, _, _ in REFUSED])
def test_a_bad_distributed_option_exits_2_naming_it_and_the_accepted_forms(tmp_path, arguments, option, accepted):
    done = CliRunner().invoke(
        app,
        ["compare", *arguments, "--out", str(tmp_path / "out"), "--venvs", str(tmp_path / "none")],
        env={"COLUMNS": "300"},
    )
    assert done.exit_code == 2, (done.exit_code, done.exception, done.output)
    text = " ".join(done.output.replace("│", " ").split())
    assert option in text and accepted in text, text
    assert not any(tmp_path.iterdir()), "nothing may be written for a refused command"


def test_strategy_per_runner_wins_over_one_for_all():
    values = ["ddp", "tensorflow=mirrored"]
    assert per_runner("torch", values, Strategy) is Strategy.ddp
    assert per_runner("tensorflow", values, Strategy) is Strategy.mirrored
    assert per_runner("torch", [], Strategy) is None


def test_a_run_spec_writes_strategy_devices_and_timeout_into_the_request():
    request = wire.to_request(
        RunSpec("mlp", batch_size=8, strategy=Strategy.ddp, devices="cpu:0,cpu:1", distributed_timeout_s=30.0)
    )
    assert request.strategy == pb.STRATEGY_DDP and request.batch_size == 8
    assert [(d.kind, d.index) for d in request.devices] == [(pb.DEVICE_KIND_CPU, 0), (pb.DEVICE_KIND_CPU, 1)]
    assert not request.HasField("device") and request.distributed_timeout_s == 30.0
    plain = wire.to_request(RunSpec("mlp"))
    assert (
        plain.strategy == pb.STRATEGY_UNSPECIFIED and not plain.devices and not plain.HasField("distributed_timeout_s")
    )


def test_a_sweep_takes_strategies_per_runner_and_device_lists(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "runners: [torch, tensorflow]\nmodels: [mlp]\nrepetitions: 1\ndevices: [cpu, 'cpu:0,cpu:1']\n"
        "strategies: {torch: [ddp], tensorflow: [mirrored]}\n"
    )
    configurations = load_sweep(path).configurations()
    assert [(c.runner, c.device, c.devices, c.strategy.value) for c in configurations] == [
        ("torch", "cpu", None, "ddp"),
        ("tensorflow", "cpu", None, "mirrored"),
        ("torch", None, "cpu:0,cpu:1", "ddp"),
        ("tensorflow", None, "cpu:0,cpu:1", "mirrored"),
    ]
    keys = {str(c.key_fields()) for c in configurations}
    assert len(keys) == 4, "strategy and devices are part of a run's key"
    # A sweep that names neither keeps the keys runs were stored under before distributed runs existed.
    assert "strategy" not in sweep_from_options("mlp").configurations()[0].key_fields()


@pytest.mark.parametrize(
    "text, field, problem",
    [
        ("models: [mlp]\ndevices: ['cpu:0,cpu:0']\n", "devices[0]", "names cpu:0 twice"),
        ("models: [mlp]\nstrategies: [ring]\n", "strategies[0]", "accepted values: single, dp, ddp"),
        (
            "models: [mlp]\nrunners: [torch]\nstrategies: {tensorflow: [mirrored]}\n",
            "strategies.tensorflow",
            "not one of this sweep's runners",
        ),
    ],
)
def test_a_bad_sweep_strategy_or_device_list_names_the_field(tmp_path, text, field, problem):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    with pytest.raises(SweepError) as raised:
        load_sweep(path)
    assert raised.value.field == field and problem in raised.value.problem

"""Option groups: a dataclass of typer options, laid out as a command's own options and handed to it as one object."""

from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import dataclass, field
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from fwbench_aggregator.analyse.sequential import DEFAULT_MAX_BLOCKS, DEFAULT_MAX_RUNS
from fwbench_aggregator.app.rounds import Repetitions
from fwbench_aggregator.base.vocabulary import Mode, Precision, Scenario
from fwbench_aggregator.cli import app as cli_app
from fwbench_aggregator.cli.groups import with_groups
from fwbench_aggregator.cli.runner_options import RunnerAccess, RunnerOptions
from fwbench_aggregator.cli.setting_options import Execution, Power, Profile, Rounds, ServingLoad, Startup
from fwbench_aggregator.cli.workload_options import Measurement, ModelOnDevice
from fwbench_aggregator.plan.spec import RunSpec, StartupSettings
from fwbench_aggregator.run.connection import EMBEDDED


@dataclass(frozen=True)
class Window:
    steps: Annotated[int, typer.Option(min=1, help="measured steps")] = 10
    tags: Annotated[list[str], typer.Option("--tag", help="repeatable")] = field(default_factory=list)
    label: Annotated[str | None, typer.Option(help="a name")] = None


def app_with(command) -> typer.Typer:
    app = typer.Typer()
    app.command()(with_groups(command))
    app.command("other", hidden=True)(lambda: None)  # two commands: typer then names them
    return app


def test_a_groups_fields_are_the_commands_options_and_it_gets_one_object():
    seen = []

    def measure(model: Annotated[str, typer.Option()] = "resnet18", window: Window = Window()) -> None:
        seen.append((model, window))

    app = app_with(measure)
    done = CliRunner().invoke(app, ["measure", "--steps", "3", "--tag", "a", "--tag", "b", "--model", "bert"])
    assert done.exit_code == 0, done.output
    assert seen[-1] == ("bert", Window(steps=3, tags=["a", "b"], label=None))
    assert CliRunner().invoke(app, ["measure"]).exit_code == 0 and seen[-1] == ("resnet18", Window())
    refused = CliRunner().invoke(app, ["measure", "--steps", "0"])
    assert refused.exit_code == 2 and "--steps" in refused.output  # the field's own bounds hold


def test_an_option_named_by_a_group_and_the_command_is_refused_when_the_command_is_declared():
    def clash(steps: int = 1, window: Window = Window()) -> None:
        pass

    with pytest.raises(TypeError, match="clash: options named twice by its groups and parameters: steps"):
        with_groups(clash)


def test_the_runner_group_builds_the_choice_every_command_used_to_build_itself(tmp_path):
    embedded = RunnerOptions(frameworks="torch")
    assert embedded.choice().frameworks == "torch" and embedded.choice().transport is EMBEDDED
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    remote = RunnerAccess(runner=["torch=10.0.0.2:50051"], token_file=token)
    choice = remote.choice()
    assert choice.given == ("torch=10.0.0.2:50051",) and choice.frameworks == ""
    assert choice.transport.token == "s3cret" and not choice.transport.tls
    token.write_text("two words\n")
    with pytest.raises(typer.BadParameter, match="--token-file .* holds no token"):
        remote.choice()


def test_the_model_and_measurement_groups_build_the_run_each_command_built_itself():
    workload = ModelOnDevice(
        model="bert_base", shape="seq=8", option=["head=mlm", "dropout=0"], precision=Precision.amp_bf16, device="cpu"
    )
    measurement = Measurement(warmup=2, steps=5, min_measure_s=0.5)
    spec = workload.spec(Mode.infer, 4, seed=3, **measurement.settings())
    assert spec == RunSpec(
        "bert_base",
        Mode.infer,
        4,
        "seq=8",
        Precision.amp_bf16,
        "cpu",
        warmup=2,
        steps=5,
        seed=3,
        model_options=(("dropout", "0"), ("head", "mlm")),
        min_measure_s=0.5,
    )
    assert workload.label(Mode.infer, 4) == "bert_base infer, batch 4, amp_bf16"
    assert workload.label(Mode.train) == "bert_base train, amp_bf16"  # max-batch's: the batch is what it searches


def test_every_command_that_runs_a_model_takes_the_model_group_and_those_that_time_steps_the_measurement_group():
    model_options = {"--model", "--shape", "--option", "--precision", "--device"}
    measurement_options = {"--warmup", "--steps", "--min-measure-s"}
    for command, measures in (
        ("compare", True),
        ("calibrate", True),
        ("factors", True),
        ("max-batch", False),
        ("serve-capacity", False),
    ):
        shown = CliRunner().invoke(cli_app, [command, "--help"], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, shown.output
        options = set(re.findall(r"(--[a-z-]+)", shown.output))
        assert model_options <= options, command
        assert (measurement_options <= options) == measures, command


def test_the_setting_groups_build_the_run_compare_built_itself():
    startup = Startup(cudnn_autotune="on", intra_op_threads=2, inter_op_threads=1)
    assert startup.settings() == StartupSettings(2, 1, "on")
    profile, execution = Profile("native", "channels_first"), Execution(["torch=compiled"], [], "cpu:0,cpu:1")
    load = ServingLoad(scenario=Scenario.server, target_qps=50.0, queries=400, batch_timeout_ms=2.0)
    spec = ModelOnDevice().spec(
        Mode.infer,
        4,
        **profile.settings(),
        **execution.settings(),
        **Power(0.0, 0.5).settings(),
        **load.settings(Mode.infer),
        **Measurement(stable_window=7).settings(),
    )
    assert (spec.profile, spec.layout, spec.devices) == ("native", "channels_first", "cpu:0,cpu:1")
    assert (spec.power_rate_hz, spec.idle_baseline_s, spec.stable_window) == (0.0, 0.5, 7)
    load_fields = (spec.scenario, spec.target_qps, spec.query_count, spec.batch_timeout_ms)
    assert load_fields == (Scenario.server, 50.0, 400, 2.0)
    assert ServingLoad().settings(Mode.train) == {}  # back-to-back batches
    with pytest.raises(typer.Exit):  # the load's rules: a target rate without a scenario
        ServingLoad(target_qps=5.0).load(Mode.infer)
    # No --max-repetitions: the design chosen once the runners resolve their devices sets the budget.
    assert Rounds().repetitions_plan() == Repetitions(None, None, None)
    assert Rounds().repetitions_plan().in_design(blocks=False).budget == DEFAULT_MAX_RUNS
    assert Rounds().repetitions_plan().in_design(blocks=True).budget == DEFAULT_MAX_BLOCKS
    assert Rounds(max_repetitions=12).repetitions_plan().in_design(blocks=True).budget == 12
    # What every run stores as where its design looked: at half the budget and its end in blocks, none otherwise.
    assert Rounds().repetitions_plan().in_design(blocks=True).looks(blocks=True) == (4, 8)
    assert Rounds(max_repetitions=12).repetitions_plan().in_design(blocks=True).looks(blocks=True) == (6, 12)
    assert Rounds().repetitions_plan().in_design(blocks=False).looks(blocks=False) == ()
    assert Rounds(repetitions="6").repetitions_plan().looks(blocks=True) == ()
    assert Rounds(repetitions="6", time_budget_s=60.0).repetitions_plan() == Repetitions(6, None, 60.0)


# Options a command declares under a group's name on purpose: each means something else there.
OWN_MEANING = {
    "sweep": {
        "warmup",
        "steps",
        "min_measure_s",
        "warmup_until_cv",
        "repetitions",
        "max_repetitions",
        "time_budget_s",
        "latency_budget_ms",
    },  # unset means the sweep file's or the study's default
    "serve-capacity": {
        "warmup",
        "min_measure_s",
        "repetitions",
        "queries",
        "batch_timeout_ms",
        "latency_budget_ms",
    },  # probes of a search: their own defaults, the scenario fixed
    "calibrate": {"repetitions", "max_repetitions"},  # runs of an A/A, or the floor's precision's limit
    "factors": {"repetitions"},  # a fixed count: each factor's value against the baseline
    "slurm": {"latency_budget_ms", "venvs"},  # the nodes' environments: srun starts its runners, none is reached
    "report": {"latency_budget_ms"},  # read from the store, nothing measured
    "parity": {"precision"},  # the precision greedy tokens are compared in (fp32 or amp_bf16), not a run's
}


def test_an_option_a_group_declares_comes_from_that_group_in_every_command():
    groups = (ModelOnDevice, Measurement, RunnerOptions, Startup, Profile, Execution, Power, ServingLoad, Rounds)
    grouped = {field.name for group in groups for field in dataclasses.fields(group)}
    for command in cli_app.registered_commands:
        name = command.name or command.callback.__name__
        declared = inspect.signature(getattr(command.callback, "__wrapped__", command.callback), eval_str=True)
        own = {
            parameter.name
            for parameter in declared.parameters.values()
            if not dataclasses.is_dataclass(parameter.annotation)
        }
        allowed = OWN_MEANING.get(name, set())
        assert own & grouped <= allowed, (name, sorted(own & grouped - allowed))

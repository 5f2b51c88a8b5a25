"""Option groups: a dataclass of typer options, laid out as a command's own options and handed to it as one object."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Optional

import pytest
import typer
from typer.testing import CliRunner

from fwbench_aggregator.base.vocabulary import Mode, Precision
from fwbench_aggregator.cli import app as cli_app
from fwbench_aggregator.cli.groups import with_groups
from fwbench_aggregator.cli.runner_options import RunnerAccess, RunnerOptions
from fwbench_aggregator.cli.workload_options import Measurement, ModelOnDevice
from fwbench_aggregator.plan.spec import RunSpec
from fwbench_aggregator.run.connection import EMBEDDED


@dataclass(frozen=True)
class Window:
    steps: Annotated[int, typer.Option(min=1, help="measured steps")] = 10
    tags: Annotated[list[str], typer.Option("--tag", help="repeatable")] = field(default_factory=list)
    label: Annotated[Optional[str], typer.Option(help="a name")] = None


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
    workload = ModelOnDevice(model="bert_base", shape="seq=8", option=["head=mlm", "dropout=0"],
                             precision=Precision.amp_bf16, device="cpu")
    measurement = Measurement(warmup=2, steps=5, min_measure_s=0.5)
    spec = workload.spec(Mode.infer, 4, seed=3, **measurement.settings())
    assert spec == RunSpec("bert_base", Mode.infer, 4, "seq=8", Precision.amp_bf16, "cpu", warmup=2, steps=5, seed=3,
                           model_options=(("dropout", "0"), ("head", "mlm")), min_measure_s=0.5)
    assert workload.label(Mode.infer, 4) == "bert_base infer, batch 4, amp_bf16"
    assert workload.label(Mode.train) == "bert_base train, amp_bf16"  # max-batch's: the batch is what it searches


def test_every_command_that_runs_a_model_takes_the_model_group_and_those_that_time_steps_the_measurement_group():
    model_options = {"--model", "--shape", "--option", "--precision", "--device"}
    measurement_options = {"--warmup", "--steps", "--min-measure-s"}
    for command, measures in (("compare", True), ("calibrate", True), ("factors", True), ("max-batch", False),
                              ("serve-capacity", False)):
        shown = CliRunner().invoke(cli_app, [command, "--help"], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, shown.output
        options = set(re.findall(r"(--[a-z-]+)", shown.output))
        assert model_options <= options, command
        assert (measurement_options <= options) == measures, command

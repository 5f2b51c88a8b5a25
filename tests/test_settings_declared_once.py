"""A run setting is declared once, in plan/settings.py: the command line's options, a sweep file's fields, the store's
columns and comparability key and the labels are made from that declaration. The scan lists the files each setting
is declared in and fails where one is declared anywhere else. What counts as a declaration:
- a string that is exactly a setting's option flag ("--warmup"): an option typed out again;
- a command's parameter named after a setting whose typer option is not the one made from its declaration;
- a setting's name written out in the sweep file's FIELDS;
- a stored setting's column written out in a tuple, list, set or dict key of the store, the sweep file reader or
  the labels (analyse/alike.py)."""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from pathlib import Path
from typing import get_args, get_type_hints

import pandas as pd
from fwbench.runner.v1 import runner_pb2 as pb
from support.cli import fwbench_in_process
from support.results import run_result

from fwbench_aggregator.analyse.alike import KEY_NAMES
from fwbench_aggregator.base.vocabulary import Mode
from fwbench_aggregator.cli import app as cli_app
from fwbench_aggregator.cli.run_option_types import SETTING_OPTIONS
from fwbench_aggregator.plan.settings import BLOCK, SETTINGS, stored
from fwbench_aggregator.plan.spec import RunSpec, StartupSettings
from fwbench_aggregator.plan.study_file import FIELDS, load_sweep
from fwbench_aggregator.run import wire
from fwbench_aggregator.store import records
from fwbench_aggregator.store.comparability_columns import BLOCK_KEY_COLUMNS
from fwbench_aggregator.store.results_store import ResultStore
from fwbench_aggregator.store.run_columns import SUMMARY_COLUMNS

PRODUCT = Path(__file__).resolve().parents[1] / "aggregator" / "fwbench_aggregator"
# Where a stored column written out would be the column declared again.
COLUMN_MODULES = (
    "store",
    "plan/study_file.py",
    "plan/study_fields.py",
    "plan/execution_fields.py",
    "plan/command_line_sweep.py",
    "analyse/alike.py",
)


def _literal_strings(node: ast.AST):
    """The string constants a collection literal holds as its items or keys."""
    items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", ())
    return [item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)]


def _declared_in(product: Path = PRODUCT) -> dict[str, set[str]]:
    """For each setting, the files under `product` that declare it (by the rules of this module's docstring)."""
    flags = {setting.flag: setting.name for setting in SETTINGS}
    columns = {setting.column: setting.name for setting in stored()}
    found: dict[str, set[str]] = {setting.name: set() for setting in SETTINGS}
    for path in sorted(product.rglob("*.py")):
        where = str(path.relative_to(product))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in flags:
                found[flags[node.value]].add(where)
            if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) and where.startswith(COLUMN_MODULES):
                for text in _literal_strings(node):
                    if text in columns:
                        found[columns[text]].add(where)
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "FIELDS" for t in node.targets):
                for text in _literal_strings(node.value):
                    if text in found:
                        found[text].add(where)
    return found


def test_no_setting_is_declared_outside_the_one_declaration():
    declared = _declared_in()
    assert declared == {setting.name: set() for setting in SETTINGS}, declared


def test_the_scan_finds_a_setting_declared_again(tmp_path):
    copy = tmp_path / "fwbench_aggregator"
    (copy / "store").mkdir(parents=True)
    (copy / "store" / "schema.py").write_text('COLUMNS = ("run_id", "input_seed")\n')
    (copy / "cli").mkdir()
    (copy / "cli" / "extra.py").write_text('Option = typer.Option("--steps")\n')
    declared = _declared_in(copy)
    assert declared["input_seed"] == {"store/schema.py"} and declared["steps"] == {"cli/extra.py"}


def test_every_command_option_named_after_a_setting_is_the_declared_one():
    checked = 0
    for command in cli_app.registered_commands:
        hints = get_type_hints(command.callback, include_extras=True)
        for name in inspect.signature(command.callback).parameters:
            if name in SETTING_OPTIONS:
                assert get_args(hints[name])[1] is get_args(SETTING_OPTIONS[name])[1], (command.name, name)
                checked += 1
    assert checked >= 3 * len(SETTINGS)  # compare, sweep and serve-capacity take the seeds, and more the measurement


def test_the_options_are_the_declarations():
    for setting in SETTINGS:
        option = get_args(SETTING_OPTIONS[setting.name])[1]
        assert (option.min, option.max, option.help) == (setting.low, setting.high, setting.help)


def test_the_sweep_fields_columns_key_and_labels_are_the_declarations():
    assert [name for name in FIELDS if name in {s.name for s in SETTINGS}] == [s.name for s in SETTINGS]
    assert {s.column for s in stored()} <= set(SUMMARY_COLUMNS)
    assert BLOCK_KEY_COLUMNS == ("device_name", *(s.column for s in stored(BLOCK)), "design")
    assert all(KEY_NAMES[s.column] == s.label for s in stored(BLOCK))


def test_an_input_seed_reaches_the_request_from_the_command_line_and_a_sweep_file(tmp_path):
    assert not wire.to_request(RunSpec("mlp")).HasField("input_seed")  # unset: the runner takes the seed's
    assert wire.to_request(RunSpec("mlp", seed=3, input_seed=7)).input_seed == 7
    path = tmp_path / "sweep.yaml"
    path.write_text(
        textwrap.dedent("""\
        models: [mlp]
        runners: [torch]
        repetitions: 1
        input_seed: 7
        seed: 3
    """)
    )
    configuration = load_sweep(path).configurations()[0]
    request = wire.to_request(configuration.run_spec(StartupSettings()))
    assert (request.seed, request.input_seed) == (3, 7)
    assert configuration.key_fields()["settings"]["input_seed"] == 7
    # Left at its default, a setting leaves the configuration's key as it was before it existed.
    path.write_text("models: [mlp]\nrunners: [torch]\nrepetitions: 1\n")
    assert "input_seed" not in load_sweep(path).configurations()[0].key_fields()["settings"]
    path.write_text("models: [mlp]\ninput_seed: -1\n")
    done = fwbench_in_process("sweep", str(path), "--store", str(tmp_path / "store"))
    assert done.exit_code == 2 and "input_seed: -1 is not accepted; accepted: an integer from 0 to 4294967295" in (
        " ".join(done.output.split())
    )
    done = fwbench_in_process("sweep", str(path), "--input-seed", "2", "--store", str(tmp_path / "store"))
    assert done.exit_code == 2 and "--input-seed applies to a sweep given by options (--models)" in done.output


def _result(config: pb.ResolvedConfig) -> records.RunResult:
    info = pb.DescribeResponse(framework="torch", framework_version="2.4.0")
    return run_result(info, config, pb.Summary(measured_steps=2))


def test_the_input_seed_is_stored_and_a_runner_that_does_not_report_it_used_the_seed():
    config = pb.ResolvedConfig(model="mlp", seed=3, input_seed=7, measured_steps=2, warmup_steps=1)
    row = records.summary_frame("r", [_result(config)], []).iloc[0]
    assert (row["seed"], row["input_seed"], row["warmup_steps"], row["measured_steps_asked"]) == (3, 7, 1, 2)
    older = pb.ResolvedConfig(model="mlp", seed=3)
    assert records.summary_frame("r", [_result(older)], []).iloc[0]["input_seed"] == 3


def test_a_store_of_the_previous_format_reads_its_runs_input_seed_as_their_seed(tmp_path):
    folder = tmp_path / "runs" / "0000000000000001"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    before_input_seed = next(s.stored_since for s in SETTINGS if s.name == "input_seed") - 1
    (folder / "manifest.json").write_text(json.dumps({"store_format": before_input_seed}))
    pd.DataFrame([{"run_id": "old", "runner": "torch", "status": "ok", "seed": 5, "run_key": folder.name}]).to_parquet(
        folder / "summary.parquet"
    )
    summary = ResultStore(tmp_path).load("summary")
    assert list(summary["input_seed"]) == [5] and list(summary["seed"]) == [5]


REPOSITORY = PRODUCT.parents[1]
# What carrying a run setting to the runners and back costs, in product files: its Setting (plan/settings.py), its
# RunSpec field (plan/spec.py), its fields in the contract, the core's request and resolved run (fwbench_core/runs.py)
# and its check (fwbench_core's validation); the wire on both sides copies plain fields by name, the store's columns,
# key, labels and migration come from the Setting. Where the setting changes a format, the format's history names it.
SETTING_FILES_AT_MOST = 6


def _product_files_naming(name: str) -> set[str]:
    folders = ("aggregator/fwbench_aggregator", "runners", "protos")
    found = set()
    for folder in folders:
        for path in (REPOSITORY / folder).rglob("*"):
            if path.suffix in (".py", ".proto") and "_pb2" not in path.name and name in path.read_text():
                found.add(str(path.relative_to(REPOSITORY)))
    return found


def test_a_setting_carried_to_the_runners_touches_at_most_six_product_files():
    assert _product_files_naming("input_seed") == {
        "protos/fwbench/runner/v1/runner.proto",
        "runners/core/fwbench_core/runs.py",
        "runners/core/fwbench_core/validation.py",
        "aggregator/fwbench_aggregator/plan/settings.py",
        "aggregator/fwbench_aggregator/plan/spec.py",
        "aggregator/fwbench_aggregator/store/schema.py",
    }
    assert len(_product_files_naming("input_seed")) <= SETTING_FILES_AT_MOST


def test_the_wire_carries_every_setting_there_and_back_by_its_declared_field():
    spec = RunSpec("mlp", Mode.generate, warmup=3, steps=4, seed=5, input_seed=6, min_measure_s=0.5, new_tokens=7)
    request = wire.to_request(spec)
    sent = {setting.name: getattr(request, setting.request) for setting in SETTINGS if setting.request}
    assert sent == {"warmup": 3, "steps": 4, "min_measure_s": 0.5, "seed": 5, "input_seed": 6, "new_tokens": 7}
    echoed = pb.ResolvedConfig(warmup_steps=3, measured_steps=4, min_measure_s=0.5, seed=5, input_seed=6, new_tokens=7)
    assert wire.resolved(echoed).settings == sent

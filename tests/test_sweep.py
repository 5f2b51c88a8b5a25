"""Sweep files and command-line shorthands: expansion, interleaving, and errors that say where."""

from __future__ import annotations

import textwrap

import pytest

from fwbench_aggregator.analyse.stats import MIN_REPETITIONS
from fwbench_aggregator.base import frameworks
from fwbench_aggregator.base.vocabulary import Mode, Precision
from fwbench_aggregator.plan.command_line_sweep import sweep_from_options
from fwbench_aggregator.plan.field_checks import SweepError
from fwbench_aggregator.plan.keys import config_key
from fwbench_aggregator.plan.spec import DEFAULT_MIN_MEASURE_S, DEFAULT_REPETITIONS, DEFAULT_WARMUP_UNTIL_CV
from fwbench_aggregator.plan.study import DEFAULT_MAX_REPETITIONS, Configuration
from fwbench_aggregator.plan.study_file import load_sweep
from fwbench_aggregator.run import wire
from fwbench_aggregator.run.launch import StartupSettings

SWEEP = """\
# a small grid
runners: [torch, tensorflow]
models: [resnet18, bert_tiny]
modes: [train, infer]
batch_sizes: [16, 32]
shapes:
  resnet18: [3x32x32, 3x64x64]
  bert_tiny: [seq=128]
precisions: [fp32]
devices: [gpu]
repetitions: 2
warmup: 3
steps: 10
options:
  bert_tiny: {head: mlm}
compilation: {torch: torch_compile}
cooldown_s: 0.5
"""


def write(tmp_path, text: str):
    path = tmp_path / "sweep.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_valid_file_expands_counterbalanced(tmp_path):
    sweep = load_sweep(write(tmp_path, SWEEP))
    configurations = sweep.configurations()
    # resnet18: 2 modes x 2 batches x 2 shapes; bert_tiny: 2 modes x 2 batches x 1 shape; x 2 repetitions x 2 runners.
    assert len(configurations) == (8 + 4) * 2 * 2
    # A B B A at every point, each runner's turn its batch sizes in order: each runner's average place is the same.
    assert [c.runner for c in configurations] == (["torch"] * 2 + ["tensorflow"] * 4 + ["torch"] * 2) * 6
    first = configurations[:8]
    assert [(c.runner, c.repetition, c.batch_size) for c in first] == [
        ("torch", 0, 16),
        ("torch", 0, 32),
        ("tensorflow", 0, 16),
        ("tensorflow", 0, 32),
        ("tensorflow", 1, 16),
        ("tensorflow", 1, 32),
        ("torch", 1, 16),
        ("torch", 1, 32),
    ]
    assert {(c.model, c.mode, c.shape) for c in first} == {("resnet18", Mode.train, "3x32x32")}
    # One build per runner and repetition: a chain's batch sizes share a reuse key, no two chains do.
    chains = [c.reuse_chain for c in first]
    assert chains[0::2] == chains[1::2] and len(set(chains)) == 4 and all(chains)
    assert len({c.reuse_chain for c in configurations}) == len(configurations) // 2
    assert first[0] == Configuration(
        "torch",
        "resnet18",
        Mode.train,
        16,
        "3x32x32",
        Precision.fp32,
        "gpu",
        0,
        (),
        None,
        "torch_compile",
        3,
        10,
        reuse_chain=chains[0],
    )
    assert first[2].compilation is None  # tensorflow keeps its default
    assert (first[0].warmup_until_cv, first[0].min_measure_s) == (DEFAULT_WARMUP_UNTIL_CV, DEFAULT_MIN_MEASURE_S)
    bert = [c for c in configurations if c.model == "bert_tiny"]
    assert {c.shape for c in bert} == {"seq=128"} and {c.model_options for c in bert} == {(("head", "mlm"),)}
    assert dict(wire.to_request(bert[0].run_spec(StartupSettings())).model_options) == {"head": "mlm"}
    assert sweep.cooldown_s == 0.5
    # Every run has its own store key, and the key is stable.
    keys = [config_key(c.key_fields()) for c in configurations]
    assert len(set(keys)) == len(keys)
    assert config_key(load_sweep(write(tmp_path, SWEEP)).configurations()[5].key_fields()) == keys[5]
    assert config_key(configurations[0].key_fields(seed=1)) != keys[0]


def test_defaults_are_long_enough_windows_and_enough_runs_to_call_a_verdict(tmp_path):
    sweep = load_sweep(write(tmp_path, "models: [resnet18]\n"))
    configurations = sweep.configurations()
    # Every framework compared by default, in the order aggregator/fwbench_aggregator/base/frameworks.toml lists them, each run
    # as often as a verdict needs: under repetitions auto the grid holds the most a point may take, and the sweep's
    # looks leave out what its verdict does not need (tests/test_sweep_sequential.py).
    assert sweep.auto and sweep.max_repetitions == DEFAULT_MAX_REPETITIONS
    assert len(configurations) == len(frameworks.default_names()) * DEFAULT_MAX_REPETITIONS
    assert DEFAULT_REPETITIONS >= MIN_REPETITIONS
    assert configurations[: len(frameworks.default_names())] == [
        Configuration(name, "resnet18", Mode.train, 32, None, Precision.fp32, None, 0)
        for name in frameworks.default_names()
    ]
    assert configurations[0].key_fields() == {
        "runner": frameworks.default_names()[0],
        "model": "resnet18",
        "model_options": {},
        "mode": "train",
        "batch_size": 32,
        "input_shape": None,
        "precision": "fp32",
        "device": None,
        "layout": None,
        "compilation": None,
        "settings": {"warmup_steps": 50, "warmup_until_cv": 0.05, "measured_steps": 20, "min_measure_s": 1.0},
        "repetition": 0,
    }


def test_reuse_chains_leave_the_store_keys_and_can_be_turned_off(tmp_path):
    chained = load_sweep(write(tmp_path, SWEEP)).configurations()
    fresh = load_sweep(write(tmp_path, SWEEP + "reuse_builds: false\n")).configurations()
    assert {c.reuse_chain for c in fresh} == {""}
    # The same runs in the same order, under the same store keys: a store written before chains existed resumes.
    assert [c.key_fields() for c in chained] == [c.key_fields() for c in fresh]
    assert "reuse" not in str(chained[0].key_fields())
    # One batch size: nothing to share.
    single = sweep_from_options("resnet18", batch_sizes="8", repetitions=2).configurations()
    assert {c.reuse_chain for c in single} == {""}
    spec = wire.to_request(chained[0].run_spec(StartupSettings(), "sweep-chain", end_reuse=True))
    assert (spec.reuse_key, spec.end_reuse) == ("sweep-chain", True)
    assert wire.to_request(chained[0].run_spec(StartupSettings())).reuse_key == ""


def test_nodes_are_a_point_of_the_grid_and_join_the_key_only_above_one(tmp_path):
    one = load_sweep(write(tmp_path, SWEEP)).configurations()
    both = load_sweep(write(tmp_path, SWEEP + "nodes: [1, 2]\n")).configurations()
    assert len(both) == 2 * len(one) and {c.nodes for c in both} == {1, 2}
    single = [c for c in both if c.nodes == 1]
    assert [config_key(c.key_fields()) for c in single] == [config_key(c.key_fields()) for c in one]
    spanning = [c for c in both if c.nodes == 2]
    assert all(c.key_fields()["nodes"] == 2 for c in spanning)
    # The runs that must share a machine: every runner, batch size and repetition of one point.
    assert len({c.family() for c in one}) == len({(c.model, c.mode, c.shape, c.precision, c.device) for c in one})
    assert {c.family() for c in single}.isdisjoint({c.family() for c in spanning})


def test_shorthands_give_the_same_grid_as_the_file(tmp_path):
    from_file = load_sweep(write(tmp_path, SWEEP))
    from_options = sweep_from_options(
        models="resnet18,bert_tiny",
        batch_sizes="16,32",
        modes=["train", "infer"],
        precisions="fp32",
        devices="gpu",
        runners="torch,tensorflow",
        repetitions=2,
        warmup=3,
        steps=10,
        shapes={"resnet18": ["3x32x32", "3x64x64"], "bert_tiny": ["seq=128"]},
        options={"bert_tiny": {"head": "mlm"}},
        compilation={"torch": "torch_compile"},
        cooldown_s=0.5,
    )
    assert from_options == from_file
    assert from_options.configurations() == from_file.configurations()


def test_shorthand_shapes_and_options_apply_to_every_model(tmp_path):
    from_file = load_sweep(
        write(
            tmp_path,
            """\
        models: [a, b]
        shapes: [3x32x32, seq=128]
        options: {a: {head: mlm}, b: {head: mlm}}
        compilation: eager
        """,
        )
    )
    from_options = sweep_from_options(["a", "b"], shapes="3x32x32,seq=128", options=["head=mlm"], compilation="eager")
    assert from_options == from_file
    assert {c.compilation for c in from_options.configurations()} == {"eager"}


def test_shorthand_errors_name_the_field():
    with pytest.raises(
        SweepError,
        match=r"^command line: batch_sizes\[1\]: 'x' is not a batch size; accepted: integers from 1 to 65536",
    ):
        sweep_from_options("resnet18", batch_sizes="16,x")
    with pytest.raises(
        SweepError,
        match=r"command line: precisions\[0\]: unknown precision 'fp8'; accepted values: fp32, tf32, amp_fp16, amp_bf16",
    ):
        sweep_from_options("resnet18", precisions="fp8")
    with pytest.raises(SweepError, match="command line: options: 'head' is not NAME=VALUE"):
        sweep_from_options("resnet18", options=["head"])
    with pytest.raises(SweepError, match=r"command line: batch_sizes\[0\]: 4294967296 is not a batch size"):
        sweep_from_options("resnet18", batch_sizes="4294967296")


BASE = "models: [resnet18, bert_tiny]\n"


@pytest.mark.parametrize(
    ("extra", "line", "field", "message"),
    [
        (
            "batch_sise: [32]\n",
            2,
            "batch_sise",
            "unknown field 'batch_sise' (did you mean batch_sizes?); accepted fields: runners, models, modes",
        ),
        ("batch_sizes: 32\n", 2, "batch_sizes", "32 is not a list of values"),
        ("batch_sizes: [16, 0]\n", 2, "batch_sizes[1]", "0 is not a batch size; accepted: integers from 1 to 65536"),
        ("batch_sizes:\n  - 16\n  - -8\n", 4, "batch_sizes[1]", "-8 is not a batch size"),
        ("batch_sizes: [16, true]\n", 2, "batch_sizes[1]", "True is not a batch size"),
        ("batch_sizes: [16, 16]\n", 2, "batch_sizes[1]", "16 is repeated"),
        (
            "shapes: [3x32x32, 3x0x32]\n",
            2,
            "shapes[1]",
            "'3x0x32' is not a shape; accepted: positive integers joined by 'x'",
        ),
        (
            "shapes:\n  resnet18: [3x32x32]\n  bert_tiny: [seq:128]\n",
            4,
            "shapes.bert_tiny[0]",
            "'seq:128' is not a shape; accepted:",
        ),
        (
            "shapes:\n  vgg11: [3x32x32]\n",
            3,
            "shapes.vgg11",
            "'vgg11' is not one of this sweep's models; accepted: resnet18, bert_tiny",
        ),
        (
            "modes: [train, inference]\n",
            2,
            "modes[1]",
            "unknown mode 'inference' (did you mean infer?); accepted values: train, infer",
        ),
        (
            "precisions: [fp16]\n",
            2,
            "precisions[0]",
            "unknown precision 'fp16' (did you mean amp_fp16?); accepted values: fp32, tf32, amp_fp16, amp_bf16",
        ),
        ("devices: [cuda]\n", 2, "devices[0]", "'cuda' is not a device; accepted: cpu, gpu, or gpu:N"),
        (
            "repetitions: 0\n",
            2,
            "repetitions",
            "0 is not accepted; accepted values: auto, or a number of runs from 1 to 1000",
        ),
        ("steps: ten\n", 2, "steps", "'ten' is not accepted; accepted: an integer from 1 to 1000000"),
        ("cooldown_s: -1\n", 2, "cooldown_s", "-1 is not accepted; accepted: a number from 0 to 3600"),
        ("min_measure_s: -1\n", 2, "min_measure_s", "-1 is not accepted; accepted: a number from 0 to 86400"),
        (
            "warmup_until_cv: 5\n",
            2,
            "warmup_until_cv",
            "5.0 is not a coefficient of variation; accepted: 0 (off) up to below 1",
        ),
        (
            "layout: nhwc\n",
            2,
            "layout",
            "unknown layout 'nhwc' (did you mean channels_last?); accepted values: channels_first, channels_last",
        ),
        (
            "compilation: jit\n",
            2,
            "compilation",
            "unknown compilation 'jit' (did you mean xla?); accepted values: eager, graph, xla, torch_compile, torchscript, onnxruntime",
        ),
        (
            "compilation: {jax: xla}\n",
            2,
            "compilation.jax",
            f"'jax' is not one of this sweep's runners; accepted: {', '.join(frameworks.default_names())}",
        ),
        ("options:\n  bert_tiny:\n    head: off\n", 4, "options.bert_tiny.head", "False is not an option value"),
        ("options:\n  bert_tiny: mlm\n", 3, "options.bert_tiny", "'mlm' is not a mapping of option to value"),
        ("steps: 10\nsteps: 20\n", 3, "steps", "given twice"),
        ("reuse_builds: yes please\n", 2, "reuse_builds", "'yes please' is not accepted; accepted: true or false"),
        # Numbers the runners (or the wire, or a sane study) cannot take are refused before any runner starts.
        (
            "batch_sizes: [16, 4294967296]\n",
            2,
            "batch_sizes[1]",
            "4294967296 is not a batch size; accepted: integers from 1 to 65536",
        ),
        ("repetitions: 1000000000\n", 2, "repetitions", "accepted values: auto, or a number of runs from 1 to 1000"),
        ("warmup: 4294967296\n", 2, "warmup", "accepted: an integer from 0 to 10000"),
        ("steps: 18446744073709551616\n", 2, "steps", "accepted: an integer from 1 to 1000000"),
        ("min_measure_s: 1.0e+300\n", 2, "min_measure_s", "accepted: a number from 0 to 86400"),
        ("cooldown_s: .inf\n", 2, "cooldown_s", "accepted: a number from 0 to 3600"),
        ("warmup_until_cv: .nan\n", 2, "warmup_until_cv", "nan is not a coefficient of variation"),
        (
            "shapes: [3x4294967296x32]\n",
            2,
            "shapes[0]",
            "'3x4294967296x32' is not a shape; accepted: positive integers",
        ),
        ("devices: [gpu:4294967296]\n", 2, "devices[0]", "'gpu:4294967296' is not a device"),
        ("nodes: [1, 0]\n", 2, "nodes[1]", "0 is not a number of machines; accepted: integers from 1 to 1024"),
        ("nodes: 2\n", 2, "nodes", "2 is not a list of values; write a non-empty list, e.g. nodes: [1, 2]"),
    ],
)
def test_errors_name_the_file_line_and_field(tmp_path, extra, line, field, message):
    path = write(tmp_path, BASE + extra)
    with pytest.raises(SweepError) as caught:
        load_sweep(path)
    text = str(caught.value)
    assert text.startswith(f"{path}, line {line}: {field}: "), text
    assert message in text
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ("", 1, "(sweep)", "the file is empty"),
        ("- resnet18\n", 1, "(sweep)", "a sweep is a mapping of fields"),
        ("modes: [train]\n", 1, "models", "missing"),
        ("models: [resnet18\n", 2, "(syntax)", "not valid YAML"),
    ],
)
def test_malformed_files(tmp_path, text, line, field, message):
    path = write(tmp_path, text)
    with pytest.raises(
        SweepError, match=rf"^{path}, line {line}: {field}: .*{message}".replace("(", r"\(").replace(")", r"\)")
    ):
        load_sweep(path)


def test_a_missing_file(tmp_path):
    with pytest.raises(SweepError, match="cannot be read"):
        load_sweep(tmp_path / "none.yaml")

"""Input that must neither escape, crash nor flood: numbers the runners or the wire cannot take are refused
by the command line before any runner starts, user text becomes safe file names, and a hostile model name
reaches the user as the runner's NOT_FOUND."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.cli import fwbench, fwbench_in_process
from typer.testing import CliRunner

from fwbench_aggregator.app.compare import run_id_for
from fwbench_aggregator.base.paths import CHANGED_MARK, MAX_COMPONENT_CHARS, safe_component
from fwbench_aggregator.cli import app
from fwbench_aggregator.plan import spec as plan
from fwbench_aggregator.plan.spec import RunSpec
from fwbench_core import limits
from fwbench_core.power import sampler

TOO_BIG_FOR_UINT32 = str(2**32)
TOO_BIG_FOR_UINT64 = str(2**64)

# (command, its required arguments)
COMPARE = ("compare",)
CALIBRATE = ("calibrate",)
MAX_BATCH = ("max-batch",)
SWEEP = ("sweep", "--models", "resnet18")


OUT_OF_RANGE = [
    (COMPARE, "--batch-size", "0", "--batch-size"),
    (COMPARE, "--batch-size", "65537", "--batch-size"),
    (COMPARE, "--batch-size", TOO_BIG_FOR_UINT32, "--batch-size"),
    (COMPARE, "--seed", "-1", "--seed"),
    (COMPARE, "--seed", TOO_BIG_FOR_UINT32, "--seed"),
    (COMPARE, "--seed", TOO_BIG_FOR_UINT64, "--seed"),
    (COMPARE, "--steps", "0", "--steps"),
    (COMPARE, "--steps", TOO_BIG_FOR_UINT32, "--steps"),
    (COMPARE, "--warmup", "-1", "--warmup"),
    (COMPARE, "--warmup", TOO_BIG_FOR_UINT32, "--warmup"),
    (COMPARE, "--warmup-until-cv", "1", "--warmup-until-cv"),
    (COMPARE, "--warmup-until-cv", "nan", "--warmup-until-cv"),
    (COMPARE, "--stable-window", "1", "--stable-window"),
    (COMPARE, "--stable-window", TOO_BIG_FOR_UINT32, "--stable-window"),
    (COMPARE, "--intra-op-threads", "0", "--intra-op-threads"),
    (COMPARE, "--intra-op-threads", TOO_BIG_FOR_UINT32, "--intra-op-threads"),
    (COMPARE, "--inter-op-threads", "1025", "--inter-op-threads"),
    (COMPARE, "--repetitions", "0", "--repetitions"),
    (COMPARE, "--repetitions", "1001", "--repetitions"),
    (COMPARE, "--min-measure-s", "-1", "--min-measure-s"),
    (COMPARE, "--min-measure-s", "inf", "--min-measure-s"),
    (COMPARE, "--min-measure-s", "nan", "--min-measure-s"),
    (COMPARE, "--power-rate-hz", "0.5", "--power-rate-hz"),
    (COMPARE, "--power-rate-hz", "101", "--power-rate-hz"),
    (COMPARE, "--power-rate-hz", "nan", "--power-rate-hz"),
    (COMPARE, "--idle-baseline-s", "61", "--idle-baseline-s"),
    (COMPARE, "--idle-baseline-s", "nan", "--idle-baseline-s"),
    (COMPARE, "--cooldown-s", "-1", "--cooldown-s"),
    (COMPARE, "--cooldown-s", "1e400", "--cooldown-s"),
    (COMPARE, "--cooldown-s", "nan", "--cooldown-s"),
    (COMPARE, "--min-effect", "-0.1", "--min-effect"),
    (COMPARE, "--min-effect", "nan", "--min-effect"),
    (COMPARE, "--shape", f"3x{TOO_BIG_FOR_UINT32}x32", "--shape"),
    (COMPARE, "--device", f"gpu:{TOO_BIG_FOR_UINT32}", "--device"),
    (COMPARE, "--runner", "fake=localhost:0", "--runner"),
    (COMPARE, "--runner", "fake=localhost:65536", "--runner"),
    (COMPARE, "--runner", "../x=localhost:50051", "--runner"),
    (CALIBRATE, "--batch-size", TOO_BIG_FOR_UINT32, "--batch-size"),
    (CALIBRATE, "--steps", TOO_BIG_FOR_UINT32, "--steps"),
    (CALIBRATE, "--repetitions", TOO_BIG_FOR_UINT32, "--repetitions"),
    (CALIBRATE, "--min-measure-s", "inf", "--min-measure-s"),
    (MAX_BATCH, "--limit", "0", "--limit"),
    (MAX_BATCH, "--limit", "65537", "--limit"),
    (MAX_BATCH, "--shape", f"seq={TOO_BIG_FOR_UINT32}", "--shape"),
    (SWEEP, "--repetitions", "1001", "--repetitions"),
    (SWEEP, "--warmup", TOO_BIG_FOR_UINT32, "--warmup"),
    (SWEEP, "--steps", TOO_BIG_FOR_UINT32, "--steps"),
    (SWEEP, "--min-measure-s", "inf", "--min-measure-s"),
    (SWEEP, "--warmup-until-cv", "nan", "--warmup-until-cv"),
    (SWEEP, "--batch-sizes", f"16,{TOO_BIG_FOR_UINT32}", "batch_sizes[1]"),
    (SWEEP, "--shapes", f"3x{TOO_BIG_FOR_UINT32}x32", "shapes[0]"),
]


@pytest.mark.parametrize(
    "command, option, value, named", OUT_OF_RANGE, ids=[f"{c[0]} {o} {v}" for c, o, v, _ in OUT_OF_RANGE]
)
def test_a_number_out_of_range_exits_2_naming_the_option_before_any_runner_starts(
    tmp_path, command, option, value, named
):
    where = {COMPARE: ("--out", str(tmp_path / "out")), MAX_BATCH: ()}.get(
        command, ("--store", str(tmp_path / "store"))
    )
    done = CliRunner().invoke(
        app, [*command, option, value, *where, "--venvs", str(tmp_path / "no-venvs")], env={"COLUMNS": "250"}
    )
    # A runner start would fail (no environments) with status 1; a crash would be 1 with an exception.
    assert done.exit_code == 2, (done.exit_code, done.exception, done.output)
    assert isinstance(done.exception, SystemExit)
    assert named in done.output, done.output
    assert not any(tmp_path.iterdir()), "nothing may be written for a refused command"


def test_the_command_line_takes_the_ranges_the_runners_take():
    # The aggregator installs no runner core (its image has none): its checks keep their own copy of each bound.
    assert plan.MAX_BATCH_SIZE == limits.MAX_BATCH_SIZE
    assert plan.MAX_WARMUP == limits.MAX_WARMUP_STEPS
    assert plan.MAX_STEPS == limits.MAX_MEASURED_STEPS
    assert plan.MAX_SEED == limits.MAX_SEED
    assert plan.MAX_THREADS == limits.MAX_THREADS
    assert plan.MAX_MEASURE_S == limits.MAX_MEASURE_S
    assert plan.MAX_IDLE_BASELINE_S == limits.MAX_IDLE_BASELINE_S
    assert plan.MAX_DISTRIBUTED_TIMEOUT_S == limits.MAX_DISTRIBUTED_TIMEOUT_S
    assert plan.MAX_NODES == limits.MAX_NODES
    assert plan.MAX_TARGET_QPS == limits.MAX_TARGET_QPS
    assert plan.MAX_QUERIES == limits.MAX_QUERY_COUNT
    assert plan.MAX_BATCH_TIMEOUT_MS == limits.MAX_BATCH_TIMEOUT_MS
    assert (plan.MIN_NEW_TOKENS, plan.MAX_NEW_TOKENS) == (limits.MIN_NEW_TOKENS, limits.MAX_NEW_TOKENS)
    assert (plan.MIN_POWER_RATE_HZ, plan.MAX_POWER_RATE_HZ) == (sampler.MIN_RATE_HZ, sampler.MAX_RATE_HZ)


@pytest.mark.slow
def test_a_model_name_that_is_not_utf8_exits_2(tmp_path):
    # Bytes that are not UTF-8 reach Python as lone surrogates, which no request can carry.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fwbench_aggregator",
            "compare",
            "--model",
            b"resnet\xff",
            "--out",
            tmp_path / "out",
            "--venvs",
            tmp_path / "no-venvs",
        ],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--model" in done.stderr and "not UTF-8" in done.stderr and "Traceback" not in done.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--shape", "3x22a"], ["--shape", "3x224x224"]),
        (["--shape", "0x32x32"], ["--shape"]),
        (["--batch-size", "0"], ["--batch-size", "greater than or equal to 1"]),
        (["--mode", "fly"], ["--mode", "train", "infer"]),
        (["--device", "tpu"], ["--device", "gpu:N"]),
        (["--runner", "torch"], ["--runner", "NAME=HOST:PORT"]),
        (["--shape", "seq=12x"], ["--shape", "seq=128"]),
        (["--option", "head"], ["--option", "NAME=VALUE"]),
    ],
)
def test_bad_input_is_rejected_before_any_runner_is_contacted(tmp_path, args, names):
    done = fwbench_in_process("compare", *args, "--out", str(tmp_path), "--venvs", str(tmp_path / "no-venvs"))
    assert done.exit_code == 2, done.output
    for name in names:
        assert name in done.output
    assert not any(tmp_path.iterdir()), "nothing may be written for a rejected command"


# --- user text as file names -----------------------------------------------------


@pytest.mark.parametrize("name", ["resnet18", "bert_base", "torch-2.4", "a_b.c"])
def test_a_safe_name_is_kept(name):
    assert safe_component(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "../../etc/passwd",
        "..",
        ".",
        "",
        ".hidden",
        "-rf",
        "a/b",
        "a\\b",
        "a..b",
        "x" * 100_000,
        "ré",
        "a\udcffb",
        "x~y",
        "C:x",
    ],
)
def test_an_unsafe_name_becomes_one_safe_component_marked_with_a_hash(name):
    safe = safe_component(name)
    assert 0 < len(safe) <= MAX_COMPONENT_CHARS
    assert "/" not in safe and "\\" not in safe and ".." not in safe and safe[0] not in ".-"
    assert set(safe) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-" + CHANGED_MARK)
    assert CHANGED_MARK in safe


def test_different_names_never_share_a_folder():
    names = ["a/b", "a_b", "a:b", "a\\b", "x" * 100, "x" * 101, "", "_", "..", "._"]
    assert len({safe_component(n) for n in names}) == len(names)
    # A name that needed no change cannot look like a changed one: the mark is itself unsafe.
    changed = safe_component("a/b")
    assert safe_component(changed) != changed


def test_the_readme_example_of_a_safe_name():
    assert safe_component("../../etc/passwd") == "____etc_passwd~3754d6cb3a38"


# --- a hostile model name, end to end --------------------------------------------


@pytest.mark.parametrize(
    "model", ["../../etc/passwd", "../" * 34_000, "[/bold]resnet[red]"], ids=["traversal", "100KB", "console-markup"]
)
@pytest.mark.slow
def test_a_hostile_model_name_is_refused_before_anything_runs_and_writes_nothing(tmp_path, fake_runner, model):
    out = tmp_path / "a" / "b" / "out"
    done = fwbench(
        "compare", "--model", model, "--batch-size", "2", "--runner", f"fake={fake_runner}", "--out", str(out)
    )
    # docs/usage.md: a request a runner refuses is named before anything runs, and the exit status is 2.
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "known models" in done.stderr and "resnet18" in done.stderr
    assert len(done.stderr) < 5000, "the runner's message repeats the name cut"
    assert not [p for p in tmp_path.rglob("*") if p.is_file()], "nothing is written for a comparison that never ran"


@pytest.mark.parametrize("model", ["../../etc/passwd", "../" * 34_000, "[/bold]resnet[red]"])
def test_a_hostile_model_name_makes_one_safe_results_folder_name(model):
    name = run_id_for(RunSpec(model))
    assert "/" not in name and CHANGED_MARK in name and len(name) < 120

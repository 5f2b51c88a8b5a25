"""Hostile sweep files: each is refused in well under a second, with little memory, as a SweepError naming the file,
field and limit, and through `fwbench sweep` with exit status 2 and a message, never a traceback.

Before the limits (plan/yaml_limits.py, the run count in plan/study_file.py) an alias bomb, a million-entry list or
a grid of 2000 batch sizes x 1000 shapes ran for over a minute and grew past 1.9 GB on a 2-core machine.
"""

from __future__ import annotations

import os
import threading
import time
import tracemalloc

import pytest
from support.cli import fwbench, fwbench_in_process

from fwbench_aggregator.base.frameworks import names as framework_names
from fwbench_aggregator.base.vocabulary import Strategy
from fwbench_aggregator.plan.command_line_sweep import sweep_from_options
from fwbench_aggregator.plan.field_checks import SweepError
from fwbench_aggregator.plan.study import Sweep
from fwbench_aggregator.plan.study_file import load_sweep

# Generous, so that a loaded machine does not flake: the slowest refusal (too many values in all) takes 1.3 s
# alone under tracemalloc here, and took 6.3 s in CI beside the image builds; a blow-up would take minutes.
QUICK_S = 12.0
SMALL_BYTES = 64 * 1024 * 1024
HUGE = "9" * 400  # an integer to YAML, past a float's range


def _laughs(name: str, depth: int = 9) -> list[str]:
    """Flow lists of nine aliases of the one before: 9**depth items once expanded."""
    lists = [f"&{name}0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lists += [f"&{name}{i} [" + ", ".join([f"*{name}{i - 1}"] * 9) + "]" for i in range(1, depth)]
    return lists


def _numbers(count: int) -> str:
    return "[" + ", ".join(map(str, range(1, count + 1))) + "]"


def _shapes(count: int) -> str:
    return "[" + ", ".join(f"3x{i}x{i}" for i in range(1, count + 1)) + "]"


# name: (file content, the field named, words the message must hold)
HOSTILE = {
    "anchor bomb at top level": (
        "models: [resnet18]\n" + "".join(f"lol{i}: {value}\n" for i, value in enumerate(_laughs("a"))),
        "lol1[0]",
        ["YAML alias (*a0) is not accepted"],
    ),
    "anchor bomb in batch_sizes": (
        "models: [resnet18]\nbatch_sizes: [" + ", ".join(_laughs("b")) + "]\n",
        "batch_sizes[1][0]",
        ["YAML alias (*b0) is not accepted"],
    ),
    "a million batch sizes": (
        "models: [resnet18]\nbatch_sizes: [" + ", ".join(["1"] * 1_000_000) + "]\n",
        "(file)",
        ["larger than 256 KiB"],
    ),
    "5000 batch sizes": (
        f"models: [resnet18]\nbatch_sizes: {_numbers(5000)}\n",
        "batch_sizes",
        ["more than 1000 entries"],
    ),
    "2000 batch sizes x 1000 shapes": (
        f"models: [resnet18]\nbatch_sizes: {_numbers(2000)}\nshapes: {_shapes(1000)}\n",
        "batch_sizes",
        ["more than 1000 entries"],
    ),
    "1000 batch sizes x 1000 shapes": (
        f"models: [resnet18]\nbatch_sizes: {_numbers(1000)}\nshapes: {_shapes(1000)}\n",
        "max_runs",
        ["40,000,000 runs", "limit of 10,000", "max_runs", "100,000"],
    ),
    "5000 nested brackets": (
        "models: [resnet18]\nbatch_sizes: " + "[" * 5000 + "1" + "]" * 5000 + "\n",
        "batch_sizes" + "[0]" * 14,
        ["nested more than 16 levels deep"],
    ),
    "not UTF-8": (
        "models: [resnet18]\n# caf\xe9\n".encode("latin-1"),
        "(file)",
        ["not UTF-8", "byte 0xe9 at offset 24"],
    ),
    "oversize": ("models: [resnet18]\n" + "# padding\n" * 30_000, "(file)", ["larger than 256 KiB"]),
    "unknown runner": (
        "models: [resnet18]\nrunners: [evilrunner, pytorch]\n",
        "runners[0]",
        [
            "unknown runner 'evilrunner'",
            "unknown runner 'pytorch' (did you mean torch?)",
            f"accepted: {', '.join(framework_names())}",
        ],
    ),
    "too many values in all": (
        "models: [resnet18]\n" + "".join(f"x{i}: [1, 2, 3, 4, 5, 6, 7, 8, 9]\n" for i in range(1200)),
        "x908[6]",
        ["more than 10000 values in the file"],
    ),
    "a long number in base 60": (
        "models: [resnet18]\nrepetitions: " + ":".join(["1"] * 100_000) + "\n",
        "repetitions",
        ["a value of 199999 characters; accepted: at most 4096"],
    ),
    "an impossible date": (
        "models: [2001-13-45]\n",
        "(syntax)",
        ["cannot read '2001-13-45'", "month must be in 1..12"],
    ),
    # Numbers past a float's range or not finite: each refused with its bounds (an OverflowError before).
    "a time budget past a float's range": (
        f"models: [resnet18]\ntime_budget_s: {HUGE}\n",
        "time_budget_s",
        ["is not accepted; accepted: a number of seconds above 0, at most 31536000"],
    ),
    "an infinite time budget": ("models: [resnet18]\ntime_budget_s: .inf\n", "time_budget_s", ["inf is not accepted"]),
    "a warm-up cv past a float's range": (
        f"models: [resnet18]\nwarmup_until_cv: {HUGE}\n",
        "warmup_until_cv",
        ["is not a coefficient of variation"],
    ),
    "a window past a float's range": (
        f"models: [resnet18]\nmin_measure_s: {HUGE}\n",
        "min_measure_s",
        ["accepted: a number from 0 to 86400"],
    ),
    "a cooldown past a float's range": (
        f"models: [resnet18]\ncooldown_s: {HUGE}\n",
        "cooldown_s",
        ["accepted: a number from 0 to 3600"],
    ),
    "a load past a float's range": (
        f"models: [resnet18]\nmodes: [infer]\nscenarios: [server]\ntarget_qps: [{HUGE}]\n",
        "target_qps[0]",
        ["is not a rate"],
    ),
    "a batch timeout past a float's range": (
        f"models: [resnet18]\nmodes: [infer]\nscenarios: [server]\ntarget_qps: [5]\nbatch_timeout_ms: {HUGE}\n",
        "batch_timeout_ms",
        ["accepted: a number from 0 to 60000"],
    ),
    # A plug-in folder by the rule --models-dir follows: ../ past the root stays at /, so this is /etc.
    "models_dir up to /etc": (
        "models: [resnet18]\nmodels_dir: " + "../" * 40 + "etc\n",
        "models_dir",
        ["(/etc) is a system folder, not a folder of model plug-ins"],
    ),
}


def _write(tmp_path, content: str | bytes):
    path = tmp_path / "hostile.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_file_is_refused_quickly_naming_the_field_and_limit(tmp_path, name):
    content, field, words = HOSTILE[name]
    path = _write(tmp_path, content)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(SweepError) as caught:
            load_sweep(path, framework_names())
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < QUICK_S and peak < SMALL_BYTES, (elapsed, peak)
    assert caught.value.field == field and caught.value.where.startswith(str(path)), str(caught.value)
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize("name", HOSTILE)
def test_fwbench_sweep_refuses_a_hostile_file_with_exit_2_and_no_traceback(tmp_path, name):
    path = _write(tmp_path, HOSTILE[name][0])
    start = time.perf_counter()
    done = fwbench_in_process("sweep", str(path), "--store", str(tmp_path / "store"))
    assert time.perf_counter() - start < QUICK_S
    output = " ".join(done.output.split())
    assert done.exit_code == 2 and "Traceback" not in output, output
    assert f"Error: {path}" in output and all(" ".join(word.split()) in output for word in HOSTILE[name][2])
    assert not (tmp_path / "store").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["anchor bomb in batch_sizes", "5000 nested brackets", "not UTF-8", "unknown runner"])
def test_the_command_in_its_own_process_exits_2_with_a_message(tmp_path, name):
    path = _write(tmp_path, HOSTILE[name][0])
    done = fwbench("sweep", str(path), "--store", str(tmp_path / "store"), timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert HOSTILE[name][2][0] in " ".join(done.stderr.split())


def test_the_command_line_shorthands_are_bounded_alike():
    with pytest.raises(SweepError, match=r"^command line: batch_sizes: 2000 values; accepted: at most 1000"):
        sweep_from_options("resnet18", batch_sizes=",".join(map(str, range(1, 2001))))
    start = time.perf_counter()
    with pytest.raises(
        SweepError,
        match=r"^command line: max_runs: the study plans 40,000,000 runs, more than the "
        r"limit of 10,000",
    ):
        sweep_from_options("resnet18", batch_sizes=",".join(map(str, range(1, 1001))), shapes=_shapes(1000)[1:-1])
    assert time.perf_counter() - start < QUICK_S


def test_fwbench_sweep_refuses_too_large_a_grid_of_shorthands(tmp_path):
    done = fwbench_in_process(
        "sweep",
        "--models",
        "resnet18",
        "--batch-sizes",
        ",".join(map(str, range(1, 1001))),
        "--shapes",
        "3x32x32,3x64x64",
        "--store",
        str(tmp_path / "store"),
    )
    output = " ".join(done.output.split())
    assert done.exit_code == 2 and "the study plans 80,000 runs, more than the limit of 10,000" in output, output
    assert "max_runs: 80000 in a sweep file" in output and not (tmp_path / "store").exists()


def test_max_runs_raises_the_limit_up_to_its_own(tmp_path):
    # 80,000 runs: under repetitions auto the grid holds the most a point may take (max_repetitions, 20).
    grid = f"models: [resnet18]\nbatch_sizes: {_numbers(1000)}\nshapes: [3x32x32, 3x64x64]\n"
    with pytest.raises(
        SweepError,
        match="80,000 runs, more than the limit of 20,000; shrink the grid, or raise the "
        "limit with max_runs: 80000 in a sweep file",
    ):
        load_sweep(_write(tmp_path, grid + "max_runs: 20000\n"))
    assert load_sweep(_write(tmp_path, grid + "max_runs: 80000\n")).run_count() == 80_000
    with pytest.raises(SweepError, match=r"max_runs: 1000000 is not accepted; accepted: an integer from 1 to 100000"):
        load_sweep(_write(tmp_path, grid + "max_runs: 1000000\n"))


def test_the_run_count_is_the_grids_length_without_building_it():
    sweep = Sweep(
        models=("resnet18", "bert_tiny"),
        runners=("torch", "tensorflow", "jax"),
        batch_sizes=(1, 2, 4),
        shapes={"resnet18": ("3x32x32", "3x64x64")},
        devices=("gpu:0", "gpu:0,gpu:1"),
        nodes=(1, 2),
        strategies={"torch": (Strategy.dp, Strategy.ddp), "tensorflow": (Strategy.mirrored,)},
        repetitions=3,
    )
    assert sweep.run_count() == len(sweep.configurations()) == (2 + 1) * 2 * 2 * (2 + 1 + 1) * 3 * 3


def test_a_legitimate_sweep_file_still_loads(tmp_path):
    path = _write(
        tmp_path,
        """\
runners: [torch, tensorflow]
models: &models [resnet18, bert_tiny]   # an anchor with no alias is harmless
modes: [train, infer]
batch_sizes: [16, 32]
shapes: {resnet18: [3x32x32], bert_tiny: [seq=128]}
options: {bert_tiny: {head: mlm}}
repetitions: 2
""",
    )
    sweep = load_sweep(path, framework_names())
    assert sweep.models == ("resnet18", "bert_tiny") and sweep.run_count() == len(sweep.configurations()) == 32


def test_a_fifo_is_no_sweep_file_and_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "sweep.yaml"
    os.mkfifo(fifo)
    outcome = []

    def read() -> None:
        try:
            load_sweep(fifo)
        except SweepError as error:
            outcome.append(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(QUICK_S)
    if reader.is_alive():  # blocked opening it: a writer's open releases the reader, for the test to fail cleanly
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(QUICK_S)
        pytest.fail("reading a FIFO as the sweep file blocked")
    assert outcome and "(file): is not a regular file (a FIFO, device or folder)" in str(outcome[0])
    done = fwbench_in_process("sweep", str(fifo), columns=400)  # safe now: it does not block
    assert done.exit_code == 2 and "is not a regular file" in " ".join(done.output.split())


def test_models_dir_follows_the_rule_of_models_dir_on_the_command_line(tmp_path):
    for folder in ("/etc", str(tmp_path / "missing")):
        path = _write(tmp_path, f"models: [resnet18]\nmodels_dir: {os.path.relpath(folder, tmp_path)}\n")
        with pytest.raises(SweepError) as in_file:
            load_sweep(path)
        on_line = fwbench_in_process("sweep", "--models", "resnet18", "--models-dir", folder, columns=400)
        assert on_line.exit_code == 2
        problem = in_file.value.problem.split(" ", 1)[1]  # the rest, after the path as each was given
        assert problem in " ".join(on_line.output.split()), (problem, on_line.output)


@pytest.mark.parametrize("where", ["file", "command line"])
def test_plugin_folders_with_runners_given_are_refused_before_the_store_is_touched(tmp_path, where):
    (tmp_path / "plugins").mkdir()
    sweep = "models: [resnet18]\nrunners: [first]\n" + ("models_dir: plugins\n" if where == "file" else "")
    path = _write(tmp_path, sweep)
    extra = ["--models-dir", str(tmp_path / "plugins")] if where == "command line" else []
    done = fwbench_in_process(
        "sweep", str(path), "--runner", "first=127.0.0.1:1", "--store", str(tmp_path / "store"), *extra, columns=400
    )
    output = " ".join(done.output.split())
    assert done.exit_code == 2 and "a runner given with --runner loads model plug-ins from its own" in output, output
    assert ("models_dir" if where == "file" else "--models-dir") in output
    assert not (tmp_path / "store").exists()


def _numeric_options():
    import typer

    from fwbench_aggregator.cli import app

    def walk(command, name):
        for sub, child in getattr(command, "commands", {}).items():
            yield from walk(child, f"{name} {sub}")
        for param in getattr(command, "params", []):
            if param.type_descriptor.annotation in (int, float):
                yield f"{name} --{param.name}", param

    return dict(walk(typer.main.get_command(app), "fwbench"))


def test_every_numeric_option_of_the_command_line_is_bounded():
    options = _numeric_options()
    assert "fwbench sweep --time_budget_s" in options and len(options) > 40
    # A callback that checks the range (finite, within bounds) stands for min and max; sweep's --time-budget-s is
    # checked above 0 by the command, in the words a sweep file's time_budget_s gets.
    checked_by_callback = {"parse_power_rate", "parse_target_qps"}
    unbounded = [
        name
        for name, param in options.items()
        if (param.min is None or param.max is None)
        and getattr(param.callback, "__name__", "") not in checked_by_callback
    ]
    assert unbounded == ["fwbench sweep --time_budget_s"] and options[unbounded[0]].max is not None


@pytest.mark.parametrize(
    "args",
    [
        ("sweep", "--models", "resnet18", "--time-budget-s", "1e999"),
        ("sweep", "--models", "resnet18", "--warmup-until-cv", "nan"),
        ("compare", "--model", "resnet18", "--time-budget-s", "inf"),
        ("compare", "--model", "resnet18", "--cooldown-s", "nan"),
        ("serve-capacity", "--model", "resnet18", "--max-qps", "1e999"),
    ],
)
def test_a_number_past_its_bounds_on_the_command_line_is_refused(tmp_path, args):
    done = fwbench_in_process(*args, "--store", str(tmp_path / "store"), columns=400)
    output = " ".join(done.output.split())
    assert done.exit_code == 2 and "Invalid value for" in output and "Traceback" not in output, output
    assert not (tmp_path / "store").exists()

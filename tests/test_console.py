"""Every command's table reads whole in an 80-column terminal: no cell is cut to '…', no line is wider
than the terminal, and every figure that the wide layout shows appears whole in the narrow one."""

from __future__ import annotations

import pandas as pd
import pytest
from support.cli import fwbench, only_run_dir

from fwbench_core.builtin import MODEL_SPECS

# Every test here runs the command line, runners or generated requests end to end: seconds each.
pytestmark = pytest.mark.slow

NARROW, WIDE = "80", "250"
SWEEP = """\
runners: [first, second]
models: [resnet18, bert_base]
modes: [train, infer]
batch_sizes: [1, 2]
warmup: 1
steps: 3
min_measure_s: 0
repetitions: 3
"""


def figures(text: str) -> set[str]:
    """Every word with a digit in it, in the table's cells (the lines drawn with '│')."""
    return {
        word
        for line in text.splitlines()
        if "│" in line
        for cell in line.split("│")
        for word in cell.split()
        if any(character.isdigit() for character in word)
    }


def assert_whole_in_80_columns(narrow: str, wide: str, wide_shows_more: bool = False) -> None:
    """Nothing cut, nothing past 80 columns, and every figure of the wide table in the narrow one (or, where a wide
    terminal shows more columns, every narrow figure in the wide one)."""
    assert "…" not in narrow
    assert max(len(line) for line in narrow.splitlines()) <= int(NARROW)
    shown = figures(wide)
    assert shown, "the wide table shows no figure: nothing was compared"
    if wide_shows_more:
        assert figures(narrow) <= shown, sorted(figures(narrow) - shown)
    else:
        assert shown <= figures(narrow), sorted(shown - figures(narrow))


def both_widths(*args: str) -> tuple[str, str]:
    done = {}
    for columns in (NARROW, WIDE):
        result = fwbench(*args, env={"COLUMNS": columns})
        assert result.returncode == 0, result.stderr
        done[columns] = result.stdout
    return done[NARROW], done[WIDE]


@pytest.mark.parametrize(
    "command",
    [
        ["models"],
        ["describe"],
        ["max-batch", "--mode", "infer", "--shape", "3x4096x4096", "--limit", "1024"],
    ],
)
def test_runner_tables(fake_runner, command, tmp_path):
    store = ["--store", str(tmp_path / "store")] if command[0] == "max-batch" else []  # not the user's results/store
    # A wide terminal's models table adds each model's shape range.
    assert_whole_in_80_columns(
        *both_widths(*command, "--runner", f"fake={fake_runner}", *store), wide_shows_more=command == ["models"]
    )


def test_models_is_one_row_per_model_naming_the_runners_that_build_it(fake_runner):
    narrow, _ = both_widths("models", "--runner", f"fake={fake_runner}", "--runner", f"other={fake_runner}")
    rows = [line for line in narrow.splitlines() if line.startswith("│") and line.split("│")[1].strip()]
    assert len(rows) == len(MODEL_SPECS) and all(line.rstrip("│ ").endswith("all") for line in rows)
    assert len(narrow.splitlines()) < 40


def test_parity_table(fake_runner, tmp_path):
    narrow, wide = both_widths(
        "parity",
        "--models",
        "resnet18,bert_base",
        "--runner",
        f"torch={fake_runner}",
        "--runner",
        f"tensorflow={fake_runner}",
        "--out",
        str(tmp_path),
    )
    assert_whole_in_80_columns(narrow, wide)
    assert "762,000" in narrow


def test_compare_table(fake_runner, tmp_path):
    done = fwbench(
        "compare",
        "--batch-size",
        "2",
        "--shape",
        "3x32x32",
        "--warmup",
        "1",
        "--steps",
        "3",
        "--min-measure-s",
        "0",
        "--repetitions",
        "3",
        "--runner",
        f"first={fake_runner}",
        "--runner",
        f"second={fake_runner}",
        "--out",
        str(tmp_path),
        env={"COLUMNS": NARROW},
    )
    assert done.returncode == 0, done.stderr
    table = pd.read_parquet(only_run_dir(tmp_path) / "comparison.parquet")
    wide = (
        {f"{row.median_step_ms:.2f}" for row in table.itertuples()}
        | {f"{row.throughput_samples_per_s:.1f}" for row in table.itertuples()}
        | {f"{row.ratio_to_fastest:.3f}" for row in table.itertuples()}
    )
    assert "…" not in done.stdout and max(len(line) for line in done.stdout.splitlines()) <= int(NARROW)
    assert wide <= figures(done.stdout), sorted(wide - figures(done.stdout))


def test_sweep_and_report_tables(fake_runner, tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP)
    store = str(tmp_path / "store")
    swept = fwbench(
        "sweep",
        str(sweep),
        "--store",
        store,
        "--runner",
        f"first={fake_runner}",
        "--runner",
        f"second={fake_runner}",
        env={"COLUMNS": NARROW},
    )
    assert swept.returncode == 0, swept.stderr
    narrow, wide = both_widths("report", "--store", store, "--out", str(tmp_path / "report"))
    assert_whole_in_80_columns(swept.stdout, wide)
    assert_whole_in_80_columns(narrow, wide)


def test_parity_of_a_decoder_shows_its_greedy_tokens(fake_runner, tmp_path):
    narrow, wide = both_widths(
        "parity",
        "--models",
        "gpt2_small",
        "--runner",
        f"torch={fake_runner}",
        "--runner",
        f"tensorflow={fake_runner}",
        "--out",
        str(tmp_path),
    )
    assert max(len(line) for line in narrow.splitlines()) <= int(NARROW) and "…" not in narrow
    for table in (narrow, wide):
        assert "greedy tokens" in " ".join(table.split()) and "identical (16)" in table

"""Settings profiles through the command line and the analysis: each run records its profile, a comparison's title
and verdict name it, runs under two profiles are never pooled, and the findings say where the faster runner
depends on the profile."""

from __future__ import annotations

import pandas as pd
import pytest
from support.cli import fwbench, only_run_dir

from fwbench_aggregator.analyse.comparison import comparison_rows
from fwbench_aggregator.analyse.findings import profile_disagreements
from fwbench_aggregator.plan.command_line_sweep import sweep_from_options
from fwbench_aggregator.plan.field_checks import SweepError
from fwbench_aggregator.plan.spec import StartupSettings
from fwbench_aggregator.plan.study_file import load_sweep

QUICK = (
    "--batch-size",
    "2",
    "--shape",
    "3x32x32",
    "--warmup",
    "0",
    "--steps",
    "2",
    "--min-measure-s",
    "0",
    "--repetitions",
    "3",
)


@pytest.mark.slow
def test_compare_under_the_native_profile_takes_each_runners_own_layout_and_says_so(tmp_path, fake_runner):
    done = fwbench(
        "compare",
        "--model",
        "resnet18",
        "--profile",
        "native",
        *QUICK,
        "--runner",
        f"fake={fake_runner}",
        "--runner",
        f"twin={fake_runner}",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The fake runner's own layout is PyTorch's: channels_first, where the equal profile gives channels_last.
    assert "resnet18 · train · batch 2 · 3x32x32 · fp32 · cpu:0 · native profile" in done.stdout
    assert "layout channels_first" in done.stdout and "verdict (native profile): " in done.stdout
    table = pd.read_csv(only_run_dir(tmp_path) / "comparison.csv")
    assert set(table["profile"]) == {"native"} and set(table["layout"]) == {"channels_first"}


def test_a_sweep_file_lists_profiles_and_each_is_a_run_of_its_own():
    sweep = sweep_from_options("resnet18", batch_sizes="2", profiles="equal,native", runners="torch,tensorflow")
    configurations = sweep.configurations()
    assert {c.profile.value for c in configurations} == {"equal", "native"}
    assert len(configurations) == 2 * 2 * sweep.planned_repetitions
    equal, native = (
        next(c for c in configurations if c.profile.value == p and c.runner == "torch") for p in ("equal", "native")
    )
    assert equal.config_key(StartupSettings()) != native.config_key(StartupSettings())
    # A sweep without profiles keeps the keys it always had (the equal profile, unnamed).
    plain = next(c for c in sweep_from_options("resnet18", batch_sizes="2").configurations() if c.runner == "torch")
    assert plain.profile is None and "profile" not in plain.key_fields()


def test_a_misspelt_profile_is_refused_with_the_accepted_ones(tmp_path):
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text("models: [resnet18]\nprofiles: [nativ]\n")
    with pytest.raises(
        SweepError, match=r"unknown profile 'nativ' \(did you mean native\?\); accepted values: equal, native, best"
    ):
        load_sweep(sweep_file)


def _rows(profile: str, torch_ms: float, tensorflow_ms: float) -> list[dict]:
    common = dict(
        model="resnet50",
        model_options="",
        mode="train",
        batch_size=8,
        input_shape="3x64x64",
        precision="fp32",
        device="cpu:0",
        world_size=1,
        nodes=1,
        profile=profile,
        status="ok",
    )
    return [
        {
            **common,
            "runner": runner,
            "framework": runner,
            "repetition": repetition,
            "run_id": f"{profile}{runner}{repetition}",
            "median_step_time_s": ms / 1e3 * (1 + 0.001 * repetition),
        }
        for runner, ms in (("torch", torch_ms), ("tensorflow", tensorflow_ms))
        for repetition in range(6)
    ]


def test_runs_under_two_profiles_are_never_pooled_and_a_verdict_that_flips_is_a_finding():
    summary = pd.DataFrame(_rows("equal", 130.0, 100.0) + _rows("native", 90.0, 100.0))
    rows = comparison_rows(summary, pd.DataFrame())
    assert len(rows) == 4 and set(rows.groupby("profile")["runs"].sum()) == {12}
    fastest = rows[rows["verdict"] == "fastest"].set_index("profile")["runner"].to_dict()
    assert fastest == {"equal": "tensorflow", "native": "torch"}
    assert profile_disagreements(rows) == ["resnet50 train batch 8 3x64x64: tensorflow under equal, torch under native"]
    same = comparison_rows(pd.DataFrame(_rows("equal", 130.0, 100.0) + _rows("native", 120.0, 100.0)), pd.DataFrame())
    assert profile_disagreements(same) == []

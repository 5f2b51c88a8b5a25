"""A verdict pools only runs that are alike (comparability_columns.COMPARABILITY_COLUMNS): each run known by its own id, runs of
other versions, settings, machines, plug-in versions or protocols in rows of their own, judged apart.

Synthetic stores: runs of planted step times, as the store holds them. Each of the store's ways to mix runs
(issue 39's six) is a case here; tests/test_alike_cli.py does the same through fwbench itself."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fwbench_aggregator.analyse.comparison import comparison_rows, per_run
from fwbench_aggregator.analyse.efficiency import hardware_efficiency
from fwbench_aggregator.analyse.judging import NO_BLOCKS_IN_COMMON
from fwbench_aggregator.analyse.optimal import optimal_batches
from fwbench_aggregator.analyse.results import analysed
from fwbench_aggregator.analyse.run_values import run_values
from fwbench_aggregator.analyse.scaling import scaling_rows
from fwbench_aggregator.analyse.serving import load_curve, serving_rows
from fwbench_aggregator.analyse.trends import batch_trends
from fwbench_aggregator.analyse.versions import version_changes
from fwbench_aggregator.present.display import native_display, verdict_table
from fwbench_aggregator.store.migrations import migrated

STEPS_PER_RUN = 5
_ids = itertools.count()

CONFIG = dict(
    model="resnet18",
    model_options="",
    mode="infer",
    batch_size=2,
    input_shape="3x32x32",
    precision="fp32",
    device="cpu:0",
    world_size=1,
    nodes=1,
    profile="equal",
    serving="",
    strategy="single",
)
FACTS = dict(
    device_name="AMD EPYC (2 logical cores)",
    warmup_steps=1,
    measured_steps_asked=STEPS_PER_RUN,
    min_measure_s=0.0,
    seed=0,
    image_digest="",
    environment_lock="",
    layout="channels_last",
    compilation="eager",
    cudnn_autotune="off",
    tf32="",
    intra_op_threads=2,
    inter_op_threads=2,
    model_hash="",
    run_isolation="thread",
    malloc="glibc 2.36 mmap_threshold=33554432 trim_threshold=67108864",
)
VERSIONS = {"torch": "2.15.0", "tensorflow": "2.21.0"}


def compare(
    runner_times: dict[str, list[float]], run_id: str | None = None, **facts
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One compare's frames as the store holds them: each run its own run_id, repetitions numbered from 0, every step
    of a run at its planted time (seconds) times a small spread so that runs differ."""
    summary, steps = [], []
    for runner, times in runner_times.items():
        for repetition, step_s in enumerate(times):
            identity = dict(
                CONFIG,
                runner=runner,
                run_id=run_id or f"run{next(_ids)}",
                repetition=repetition,
                framework=runner,
                framework_version=VERSIONS.get(runner, "0.0"),
            )
            own = {**FACTS, **{k: v for k, v in facts.items() if k != "framework_version"}}
            if "framework_version" in facts:
                identity["framework_version"] = facts["framework_version"]
            summary.append(
                {
                    **identity,
                    **own,
                    "status": "ok",
                    "median_step_time_s": step_s,
                    "measured_steps": STEPS_PER_RUN,
                    "max_repetitions": 0,
                }
            )
            steps += [
                {**identity, "step_index": i, "warmup": False, "step_time_s": step_s * (1 + 0.001 * (i - 2))}
                for i in range(STEPS_PER_RUN)
            ]
    return pd.DataFrame(summary), pd.DataFrame(steps)


def in_blocks(frames: tuple[pd.DataFrame, pd.DataFrame], windows: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A compare's runs as windows of process blocks (the CPU default): repetition k of every runner is window
    k % windows of the compare's block k // windows, so that its runners pair block by block and another compare's
    runners pair with none of them."""
    summary, steps = frames
    compare_id, design = f"compare{next(_ids)}", f"blocks of {windows} windows"
    block = summary["repetition"].map(lambda k: f"{compare_id}-block{k // windows}")
    return (
        summary.assign(process_block=block, block_window=summary["repetition"] % windows, design=design),
        steps.assign(design=design),
    )


def store(*compares: tuple[pd.DataFrame, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (
        pd.concat([c[0] for c in compares], ignore_index=True),
        pd.concat([c[1] for c in compares], ignore_index=True),
    )


def rows(*compares) -> pd.DataFrame:
    return comparison_rows(*store(*compares)).set_index("runner")


def near(ms: float, n: int = 3, step: float = 0.002) -> list[float]:
    """n run medians about `ms` milliseconds, each a little apart (seconds)."""
    return [ms / 1e3 * (1 + step * (i - (n - 1) / 2)) for i in range(n)]


def test_two_compares_of_one_configuration_keep_every_run_apart():
    first = compare({"torch": near(10.0), "tensorflow": near(14.0)})
    second = compare({"torch": near(14.0), "tensorflow": near(10.0)})
    runs = run_values(*store(first, second))
    # Six runs per runner, none merged with another of its repetition number.
    assert runs.groupby("runner").size().to_dict() == {"tensorflow": 6, "torch": 6}
    torch = sorted(runs[runs["runner"] == "torch"]["median_step_time_s"].round(6))
    assert torch == sorted(np.round(near(10.0) + near(14.0), 6))


def test_an_identical_rerun_adds_runs_and_changes_no_runs_value():
    once = compare({"torch": near(10.0), "tensorflow": near(14.0)})
    again = compare({"torch": near(10.0), "tensorflow": near(14.0)})
    alone, both = rows(once), rows(once, again)
    assert both.loc["torch", "runs"] == 2 * alone.loc["torch", "runs"] == 6
    assert both.loc["torch", "median_step_ms"] == pytest.approx(alone.loc["torch", "median_step_ms"])


def test_framework_versions_are_rows_of_their_own_each_judged():
    old = compare({"torch": near(10.0), "tensorflow": near(12.0)}, framework_version="2.14.0")
    new = compare({"torch": near(14.0)}, framework_version="2.15.0")
    # tensorflow's own version is the same in both; torch's differ.
    old[0].loc[old[0]["runner"] == "tensorflow", "framework_version"] = "2.21.0"
    table = rows(old, new)
    assert set(table.index) == {"torch (version 2.14.0)", "torch (version 2.15.0)", "tensorflow"}
    assert table.loc["torch (version 2.14.0)", "median_step_ms"] == pytest.approx(10.0, rel=1e-3)
    assert table.loc["torch (version 2.15.0)", "median_step_ms"] == pytest.approx(14.0, rel=1e-3)
    assert table.loc["torch (version 2.14.0)", "verdict"] == "fastest"
    assert table.loc["torch (version 2.15.0)", "significant"] and table.loc["tensorflow", "significant"]
    assert (table["runs"] == 3).all()


@pytest.mark.parametrize(
    "setting, values, label",
    [
        ("layout", ("channels_first", "channels_last"), "layout"),
        ("intra_op_threads", (1, 2), "intra-op threads"),
        ("compilation", ("eager", "xla"), "compilation"),
        ("cudnn_autotune", ("off", "on"), "cuDNN autotuning"),
        ("tf32", ("off", "on"), "TF32"),
        ("run_isolation", ("process", "thread"), "run isolation"),
        ("malloc", ("glibc 2.36: unchanged", "glibc 2.36 mmap_threshold=33554432 trim_threshold=67108864"), "malloc"),
    ],
)
def test_runs_under_other_settings_are_rows_of_their_own(setting, values, label):
    a = compare({"torch": near(10.0), "tensorflow": near(10.1)}, **{setting: values[0]})
    b = compare({"torch": near(14.0)}, **{setting: values[1]})
    table = rows(a, b)
    first, second = (f"torch ({label} {v})" for v in values)
    assert set(table.index) == {first, second, "tensorflow"}
    assert table.loc[first, "median_step_ms"] == pytest.approx(10.0, rel=1e-3)
    assert table.loc[second, "median_step_ms"] == pytest.approx(14.0, rel=1e-3)
    assert table.loc[second, "significant"]  # 14 ms against the fastest: never averaged into "no difference"
    assert table.loc[first, "variant"] == f"{label} {values[0]}"


def test_machines_are_blocks_each_judged_within_itself():
    here = compare({"torch": near(10.0), "tensorflow": near(14.0)}, device_name="AMD EPYC (2 logical cores)")
    there = compare({"torch": near(20.0), "tensorflow": near(15.0)}, device_name="Intel Xeon (8 logical cores)")
    table = comparison_rows(*store(here, there))
    assert sorted(table["group"].unique()) == [
        "device AMD EPYC (2 logical cores)",
        "device Intel Xeon (8 logical cores)",
    ]
    for group, own in table.groupby("group"):
        assert len(own) == 2 and (own["runs"] == 3).all()
        fastest = own[own["verdict"] == "fastest"]["runner_name"].item()
        assert fastest == ("torch" if "AMD" in group else "tensorflow")
    assert "torch [device AMD EPYC (2 logical cores)]" in set(table["runner"])
    # Each row names the device its runs ran on, and so does the hardware-efficiency table made from the rows.
    efficiency = hardware_efficiency(table, None).set_index("runner")
    for row in table.itertuples():
        assert row.group == f"device {row.device_name}" and efficiency.loc[row.runner, "device_name"] == row.device_name


def test_runs_from_another_environment_lock_are_rows_of_their_own_named_by_the_locks_short_hash():
    a = compare({"torch": near(10.0), "tensorflow": near(12.0)}, environment_lock="a" * 64)
    b = compare({"torch": near(14.0), "tensorflow": near(12.0)}, environment_lock="b" * 64)
    table = rows(a, b)
    assert {"torch (environment aaaaaaaaaaaa)", "torch (environment bbbbbbbbbbbb)"} <= set(table.index)


def test_plugin_versions_are_rows_of_their_own():
    a = compare({"torch": near(10.0), "tensorflow": near(10.0)}, model_hash="aaaa")
    b = compare({"torch": near(14.0), "tensorflow": near(14.0)}, model_hash="bbbb")
    table = rows(a, b)
    assert set(table.index) == {
        "torch (model aaaa)",
        "torch (model bbbb)",
        "tensorflow (model aaaa)",
        "tensorflow (model bbbb)",
    }
    assert table.loc["torch (model bbbb)", "model_hash"] == "bbbb"


@pytest.mark.parametrize(
    "fact, values, label",
    [
        ("warmup_steps", (1, 10), "warm-up"),
        ("measured_steps_asked", (5, 50), "steps"),
        ("min_measure_s", (0.0, 1.0), "window"),
        ("seed", (0, 7), "seed"),
    ],
)
def test_runs_of_another_protocol_are_a_block_of_their_own(fact, values, label):
    a = compare({"torch": near(10.0), "tensorflow": near(14.0)}, **{fact: values[0]})
    b = compare({"torch": near(14.0), "tensorflow": near(10.0)}, **{fact: values[1]})
    table = comparison_rows(*store(a, b))
    assert len(table) == 4 and (table["runs"] == 3).all()
    assert set(table["group"]) == {
        f"{label} {pd.Series([v]).map(lambda x: int(x) if float(x).is_integer() else x).item()}" for v in values
    }
    assert (table["verdict"] == "fastest").sum() == 2


def test_a_run_that_does_not_record_a_part_of_the_key_pools_only_with_runs_unknown_for_it():
    new = compare({"torch": near(10.0), "tensorflow": near(14.0)})
    old = compare({"torch": near(12.0), "tensorflow": near(12.0)})
    old = (old[0].drop(columns=["measured_steps_asked"]), old[1])
    table = comparison_rows(*store(new, old))
    assert set(table["group"]) == {"steps 5", "steps unknown"}


def test_an_old_summary_without_the_steps_asked_learns_them_where_no_window_could_add_steps():
    old = pd.DataFrame({"measured_steps": [5, 40], "min_measure_s": [0.0, 1.0]})
    summary = migrated("summary", old, {"store_format": 4})
    assert summary["measured_steps_asked"].iloc[0] == 5 and pd.isna(summary["measured_steps_asked"].iloc[1])


def test_an_old_summary_learns_its_run_isolation_from_the_runners_options():
    old = pd.DataFrame(
        {"runner_options": ["cudnn_autotune=off;run_isolation=process", "run_isolation=thread", "", None]}
    )
    summary = migrated("summary", old, {"store_format": 5})
    assert summary["run_isolation"].tolist() == ["process", "thread", "", ""]


def test_a_failed_run_joins_its_runners_row():
    ok = compare({"torch": near(10.0), "tensorflow": near(14.0)})
    failed = pd.DataFrame(
        [
            dict(
                CONFIG,
                run_id="failed-1",
                runner="torch",
                repetition=3,
                status="failed",
                error="RESOURCE_EXHAUSTED: out of memory",
            )
        ]
    )
    table = comparison_rows(pd.concat([ok[0], failed], ignore_index=True), ok[1]).set_index("runner")
    assert set(table.index) == {"torch", "tensorflow"} and table.loc["torch", "failed_runs"] == 1


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["2.14.0", "2.15.0"]),
            st.sampled_from([1, 2]),
            st.sampled_from(["AMD EPYC (2 logical cores)", "Intel Xeon (8 logical cores)"]),
            st.floats(5.0, 20.0),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_merging_stores_never_changes_a_groups_per_run_values(compares):
    """Whatever compares one store holds, every row is exactly the runs of one key: its run count and figure are
    those of the runs of that key, and no run's value changes."""
    made = [
        compare(
            {"torch": near(ms), "tensorflow": near(ms * 1.1)},
            framework_version=version,
            intra_op_threads=threads,
            device_name=device,
        )
        for version, threads, device, ms in compares
    ]
    expected: dict[tuple, list[float]] = {}
    for version, threads, device, ms in compares:
        for runner, factor in (("torch", 1.0), ("tensorflow", 1.1)):
            expected.setdefault((runner, version, threads, device), []).extend(near(ms * factor))
    merged = comparison_rows(*store(*made))
    assert sorted((len(v), round(float(np.exp(np.mean(np.log(v)))) * 1e3, 6)) for v in expected.values()) == sorted(
        (int(r.runs), round(r.median_step_ms, 6)) for r in merged.itertuples()
    )
    runs = run_values(*store(*made)).set_index("run_id")["median_step_time_s"]
    for one in made:
        alone = run_values(*one).set_index("run_id")["median_step_time_s"]
        assert np.allclose(runs.loc[alone.index], alone)


def test_two_versions_compared_in_blocks_of_their_own_compares_are_said_to_share_no_block():
    old = in_blocks(compare({"torch": near(10.0, 6), "tensorflow": near(12.0, 6)}, framework_version="2.14.0"), 2)
    new = in_blocks(compare({"torch": near(14.0, 6), "tensorflow": near(12.0, 6)}, framework_version="2.15.0"), 2)
    for frames in (old, new):
        frames[0].loc[frames[0]["runner"] == "tensorflow", "framework_version"] = "2.21.0"
    table = rows(old, new)
    assert table.loc["torch (version 2.14.0)", "verdict"] == "fastest"
    # tensorflow ran in both compares' blocks, so it pairs with the fastest in the first compare's three.
    assert table.loc["tensorflow", "significant"] and table.loc["tensorflow", "blocks"] == 6
    newer = table.loc["torch (version 2.15.0)"]
    assert newer["verdict"] == NO_BLOCKS_IN_COMMON and newer["outcome"] == "unresolved" and not newer["significant"]
    assert newer["ratio_to_fastest"] == pytest.approx(1.4, rel=0.01)
    # The version report judges each version's blocks (two windows each) as its units, unpaired across compares.
    change = version_changes(*store(old, new)).iloc[0]
    assert (change["runs_from"], change["runs_to"], change["change"]) == (3, 3, "regression")


# Every case of the store's identity (what keeps runs apart), each as two compares of one store, in blocks, in rounds,
# and one of each: the whole analysis a report makes completes over every one.
IDENTITY_CASES = {
    "versions": ({"framework_version": "2.14.0"}, {"framework_version": "2.15.0"}),
    "layouts": ({"layout": "channels_first"}, {"layout": "channels_last"}),
    "threads": ({"intra_op_threads": 1}, {"intra_op_threads": 2}),
    "hosts": ({"device_name": "AMD EPYC (2 logical cores)"}, {"device_name": "Intel Xeon (8 logical cores)"}),
    "plug-in hashes": ({"model_hash": "aaaa"}, {"model_hash": "bbbb"}),
    "protocols": ({"warmup_steps": 1}, {"warmup_steps": 10}),
    "reruns": ({}, {}),
}


@pytest.mark.parametrize(
    "designs", [(in_blocks, in_blocks), (None, None), (in_blocks, None)], ids=["blocks", "rounds", "blocks and rounds"]
)
@pytest.mark.parametrize("case", list(IDENTITY_CASES))
def test_the_whole_analysis_completes_over_every_identity_case(case, designs):
    made = []
    # Two compares of both runners, then one of torch alone (a rerun of one side, as `--frameworks torch` makes).
    for facts, design, runners in zip(
        (*IDENTITY_CASES[case], IDENTITY_CASES[case][1]),
        (*designs, designs[1]),
        ({"torch": near(10.0), "tensorflow": near(12.0)},) * 2 + ({"torch": near(14.0)},),
    ):
        frames = compare(runners, **facts)
        made.append(design(frames) if design else frames)
    summary, steps = store(*made)
    analysis = analysed(summary, steps)
    assert (analysis.rows["runs"] > 0).all() and analysis.rows["verdict"].map(bool).all()
    version_changes(summary, steps)


# Every other table pools by the same rule (alike.labelled): serving, series across batch sizes, scaling.


def serving(frames: tuple[pd.DataFrame, pd.DataFrame], p99_ms: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A compare's runs as server-scenario runs at 50 queries per second with these p99 latencies about p99_ms."""
    summary = frames[0].assign(
        serving="server 50 qps",
        scenario="server",
        target_qps=50.0,
        batch_timeout_ms=2.0,
        query_count=500,
        duration_s=10.0,
        achieved_qps=50.0,
        serving_unavailable="",
    )
    for figure, share in (("p50", 0.5), ("p90", 0.8), ("p99", 1.0)):
        summary[f"{figure}_latency_s"] = [p99_ms * share / 1e3 * (1 + 0.002 * i) for i in range(len(summary))]
    return summary, frames[1].assign(serving="server 50 qps")


def test_serving_rows_and_the_load_curve_keep_versions_apart():
    old = serving(compare({"torch": near(10.0), "tensorflow": near(10.0)}, framework_version="2.14.0"), p99_ms=10.0)
    new = serving(compare({"torch": near(10.0)}, framework_version="2.15.0"), p99_ms=20.0)
    old[0].loc[old[0]["runner"] == "tensorflow", "framework_version"] = "2.21.0"
    summary = store(old, new)[0]
    p99 = serving_rows(summary).query("figure == 'p99'").set_index("runner")
    assert set(p99.index) == {"torch (version 2.14.0)", "torch (version 2.15.0)", "tensorflow"}
    assert (p99["runs"] == 3).all()
    assert p99.loc["torch (version 2.15.0)", "latency_ms"] == pytest.approx(20.0, rel=0.01)
    assert p99.loc["torch (version 2.14.0)", "latency_ms"] == pytest.approx(10.0, rel=0.01)
    assert p99.loc["torch (version 2.15.0)", "significant"]
    curve = load_curve(summary).set_index("runner")
    assert curve.loc["torch (version 2.15.0)", "p99_latency_s"] == pytest.approx(0.020, rel=0.01)
    assert (curve["runs"] == 3).all()


def test_serving_runners_are_judged_within_their_machine():
    here = serving(compare({"torch": near(10.0), "tensorflow": near(10.0)}), p99_ms=10.0)
    there = serving(
        compare({"torch": near(10.0), "tensorflow": near(10.0)}, device_name="Intel Xeon (8 logical cores)"),
        p99_ms=30.0,
    )
    p99 = serving_rows(store(here, there)[0]).query("figure == 'p99'")
    assert len(p99) == 4 and (p99["runs"] == 3).all()
    # Had the two machines pooled, or been judged against each other, a 3x latency would make a verdict.
    assert not p99["significant"].any()
    assert set(p99["verdict"]) - {"best"} and "best" in set(p99["verdict"])


def batches(times_ms: dict[int, float], **facts) -> tuple[pd.DataFrame, pd.DataFrame]:
    """torch at each batch size: 3 runs at about that step time."""
    frames = [compare({"torch": near(ms)}, **facts) for ms in times_ms.values()]
    for (summary, steps), batch in zip(frames, times_ms):
        summary["batch_size"], steps["batch_size"] = batch, batch
    return store(*frames)


def test_a_series_across_batch_sizes_keeps_versions_apart():
    # Version 2.14.0's time per sample falls with the batch; 2.15.0's rises: pooled, the two would blur into one.
    old = batches({2: 10.0, 4: 12.0, 8: 14.0}, framework_version="2.14.0")
    new = batches({2: 10.0, 4: 40.0, 8: 160.0}, framework_version="2.15.0")
    summary, steps = store(old, new)
    optimal = optimal_batches(per_run(summary, steps), summary).set_index("runner")
    assert set(optimal.index) == {"torch (version 2.14.0)", "torch (version 2.15.0)"}
    assert optimal.loc["torch (version 2.14.0)", "best_batch"] == 8
    assert optimal.loc["torch (version 2.15.0)", "best_batch"] == 2
    assert (optimal["runs_per_batch"] == 3).all()
    trends = batch_trends(per_run(summary, steps)).set_index("runner")
    assert trends.loc["torch (version 2.14.0)", "trend"] != trends.loc["torch (version 2.15.0)", "trend"]
    assert (trends["runs"] == 9).all()


def test_scaling_takes_its_one_device_baseline_from_alike_runs():
    def ranks(world_size: int, ms: float, device_name: str):
        summary, steps = compare({"torch": near(ms)}, device_name=device_name)
        return summary.assign(world_size=world_size), steps.assign(world_size=world_size)

    summary = store(ranks(1, 10.0, "GPU A"), ranks(2, 10.0, "GPU A"), ranks(1, 40.0, "GPU B"), ranks(2, 40.0, "GPU B"))[
        0
    ]
    table = scaling_rows(summary)
    two = table[table["world_size"] == 2].set_index("runner")
    # Each machine's two devices against its own one: perfect scaling on both, never 4x or 0.25x across machines.
    assert set(two.index) == {"torch [device GPU A]", "torch [device GPU B]"}
    assert two["scaling_efficiency"].tolist() == pytest.approx([1.0, 1.0], rel=0.01)
    assert (table["runs"] == 3).all()


def test_a_keras_runner_is_judged_against_its_backend_used_natively_in_the_same_block():
    judged = rows(in_blocks(compare({"torch": near(40, 5), "keras-torch": near(120, 5), "keras-jax": near(100, 5)})))
    keras_torch = judged.loc["keras-torch"]
    assert keras_torch["native_runner"] == "torch"
    assert keras_torch["native_ratio"] == pytest.approx(3.0, rel=0.01)
    assert keras_torch["native_ratio_ci_low"] <= keras_torch["native_ratio"] <= keras_torch["native_ratio_ci_high"]
    assert keras_torch["native_verdict"].startswith("torch ") and "faster" in keras_torch["native_verdict"]
    # No native JAX runner in the block: nothing to judge keras-jax against; a native runner has no such verdict.
    assert judged.loc["keras-jax", "native_verdict"] == judged.loc["torch", "native_verdict"] == ""
    assert judged.loc["keras-jax", "native_runner"] == ""
    # The report's verdict table says it beside the verdicts against the fastest.
    (verdicts,) = verdict_table(judged.reset_index())["verdicts"]
    assert f"keras-torch against torch used natively: {keras_torch['native_verdict']}" in verdicts
    # And its table of Keras against the native frameworks: one row per judged Keras runner, both medians.
    (shown,) = native_display(judged.reset_index()).to_dict("records")
    assert (shown["runner"], shown["native runner"], shown["verdict"]) == (
        "keras-torch",
        "torch",
        keras_torch["native_verdict"],
    )
    assert float(shown["median ms"]) == pytest.approx(3 * float(shown["its median ms"]), rel=0.01)
    assert shown["ratio"].startswith("3.00 [")


def test_a_keras_runner_faster_than_its_backend_used_natively_has_its_ratio_below_one():
    judged = rows(compare({"tensorflow": near(90, 5), "keras-tensorflow": near(45, 5)}))
    row = judged.loc["keras-tensorflow"]
    assert row["native_runner"] == "tensorflow" and row["native_ratio"] == pytest.approx(0.5, rel=0.01)
    assert row["native_ratio_ci_high"] < 1 and row["native_verdict"].startswith("keras-tensorflow ")

"""Serving scenarios on the aggregator's side: the per-run percentile comparison (the same statistics as step times),
an unsupported percentile said so instead of compared, the per-query latencies kept in the store, the report's Serving
section, `serve-capacity`'s search, sweep fields, and bad options refused before anything runs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from support.cli import fwbench_in_process
from support.fakes import Fake
from support.results import run_result

from fwbench_aggregator.analyse.serving import budget_status, load_curve, serving_rows
from fwbench_aggregator.base.vocabulary import Mode, Scenario, serving_text
from fwbench_aggregator.plan.serving_fields import Load, load_problem
from fwbench_aggregator.plan.spec import RunSpec
from fwbench_aggregator.run import wire
from fwbench_aggregator.store import records
from fwbench_aggregator.store.run_columns import SUMMARY_COLUMNS
from fwbench_aggregator.store.schema import QUERIES_COLUMNS

P99_REASON = "needs at least 299 queries, got 120"


def serving_summary(
    runner: str,
    p50_s: float,
    runs: int = 4,
    target_qps: float = 100.0,
    p99: bool = False,
    spread: float = 0.01,
    seed: int = 0,
) -> pd.DataFrame:
    """A runner's runs of one configuration under server at `target_qps`: each run's p50 about `p50_s` (log-normal run
    offsets of `spread`), p90 1.5x it, and p99 only with `p99` (else unset with the runner's reason)."""
    rng = np.random.default_rng(seed)
    rows = []
    for repetition in range(runs):
        offset = math.exp(rng.normal(0, spread))
        rows.append(
            {
                "runner": runner,
                "model": "resnet18",
                "mode": "infer",
                "batch_size": 1,
                "input_shape": "3x32x32",
                "precision": "fp32",
                "device": "cpu:0",
                "model_options": "",
                "repetition": repetition,
                "status": "ok",
                "serving": f"server {target_qps:g} qps",
                "scenario": "server",
                "target_qps": target_qps,
                "query_count": 300 if p99 else 120,
                "achieved_qps": target_qps * 0.98,
                "p50_latency_s": p50_s * offset,
                "p90_latency_s": 1.5 * p50_s * offset,
                "p99_latency_s": 2 * p50_s * offset if p99 else None,
                "serving_unavailable": "" if p99 else f"p99_latency_s: {P99_REASON}",
            }
        )
    return pd.DataFrame(rows)


def rows_of(frame: pd.DataFrame) -> dict[tuple[str, str], pd.Series]:
    return {(r.figure, r.runner): r for r in frame.itertuples()}


def test_a_runner_twice_as_slow_at_p50_is_called_and_an_unsupported_p99_is_said_so_not_compared():
    summary = pd.concat([serving_summary("fast", 0.010, seed=1), serving_summary("slow", 0.020, seed=2)])
    rows = rows_of(serving_rows(summary))
    for figure in ("p50", "p90"):
        slow, fast = rows[(figure, "slow")], rows[(figure, "fast")]
        assert fast.verdict == "best" and slow.significant
        assert slow.verdict.startswith("fast faster by") or slow.verdict.startswith("fast 2.0x faster")
        assert 1.9 < slow.ratio_to_best < 2.1 and slow.ratio_ci_low < slow.ratio_to_best < slow.ratio_ci_high
    assert rows[("p50", "fast")].latency_ms == pytest.approx(10.0, rel=0.02)
    for runner in ("fast", "slow"):
        p99 = rows[("p99", runner)]
        assert math.isnan(p99.latency_ms) and math.isnan(p99.ratio_to_best) and not p99.significant
        assert p99.verdict == f"not supported by 4 of 4 runs ({P99_REASON}): not compared"


def test_equal_runners_are_not_called_different_and_too_few_runs_give_no_verdict():
    summary = pd.concat([serving_summary("a", 0.010, seed=3, p99=True), serving_summary("b", 0.010, seed=4, p99=True)])
    rows = serving_rows(summary)
    assert not rows["significant"].any()
    assert rows[rows["verdict"] != "best"]["verdict"].str.startswith("no significant difference").all()
    few = pd.concat([serving_summary("a", 0.010, runs=2), serving_summary("b", 0.030, runs=2)])
    judged = serving_rows(few).set_index(["figure", "runner"])["verdict"]
    assert judged[("p50", "b")].startswith("too few repetitions to call (ratio 3.0")
    assert judged[("p99", "b")].startswith("not supported by 2 of 2 runs")


def test_runs_at_different_loads_are_never_pooled_and_the_load_curve_has_one_point_per_load():
    summary = pd.concat(
        [
            serving_summary("a", 0.010, target_qps=50, p99=True),
            serving_summary("a", 0.020, target_qps=200, p99=True),
            serving_summary("b", 0.015, target_qps=50, p99=True),
        ]
    )
    rows = serving_rows(summary)
    assert set(rows["serving"]) == {"server 50 qps", "server 200 qps"}
    assert set(rows[rows["serving"] == "server 200 qps"]["verdict"]) == {"only runner"}
    curve = load_curve(summary)
    assert list(curve[curve["runner"] == "a"]["target_qps"]) == [50.0, 200.0]
    point = curve.set_index(["runner", "target_qps"]).loc[("a", 200.0)]
    assert point["p50_latency_s"] == pytest.approx(0.020, rel=0.02)
    # Each percentile's interval over the load's runs, drawn as a band around its line.
    assert point["p50_latency_low_s"] < point["p50_latency_s"] < point["p50_latency_high_s"]
    assert point["p99_latency_low_s"] < point["p99_latency_s"] < point["p99_latency_high_s"]


def test_offline_compares_throughput():
    summary = pd.concat([serving_summary("a", 0.01), serving_summary("b", 0.01)]).assign(
        scenario="offline", serving="offline", target_qps=None
    )
    summary["serving_throughput_samples_per_s"] = [100.0, 101.0, 99.0, 100.5, 50.0, 50.5, 49.5, 50.2]
    rows = serving_rows(summary)
    assert list(rows["figure"].unique()) == ["throughput"]
    b = rows.set_index("runner").loc["b"]
    assert b.significant and b.ratio_to_best == pytest.approx(2.0, rel=0.02) and b.verdict.startswith("a ")


def test_a_latency_budget_is_judged_on_the_p99_interval_over_runs():
    assert budget_status(np.array([0.010, 0.0102, 0.0099, 0.0101]), 20.0) == "meets"
    assert budget_status(np.array([0.030, 0.031, 0.0305, 0.0302]), 20.0) == "misses"
    assert budget_status(np.array([0.015, 0.025, 0.019, 0.022]), 20.0) == "within noise"
    assert budget_status(np.array([]), 20.0).startswith("p99 not supported")
    assert budget_status(np.array([0.01, 0.01]), 20.0).startswith("too few runs")
    summary = pd.concat([serving_summary("a", 0.005, p99=True), serving_summary("b", 0.050, p99=True)])
    rows = serving_rows(summary, latency_budget_ms=20.0)
    p99 = rows[rows["figure"] == "p99"].set_index("runner")["budget_status"]
    assert p99.to_dict() == {"a": "meets", "b": "misses"}
    assert (rows[rows["figure"] != "p99"]["budget_status"] == "").all()


def test_a_run_spec_puts_the_load_on_the_request_and_the_store_keeps_every_query():
    spec = RunSpec(
        "resnet18",
        Mode.infer,
        1,
        scenario=Scenario.server,
        target_qps=200.0,
        query_count=400,
        batch_timeout_ms=5.0,
        arrival_seed=7,
    )
    serving = wire.to_request(spec).serving
    assert (
        serving.scenario,
        serving.target_qps,
        serving.query_count,
        serving.batch_timeout_ms,
        serving.arrival_seed,
    ) == (pb.SCENARIO_SERVER, 200.0, 400, 5.0, 7)
    assert not wire.to_request(RunSpec("resnet18", Mode.infer)).HasField("serving")
    assert serving_text(serving) == "server 200 qps, batch timeout 5 ms"

    config = pb.ResolvedConfig(model="resnet18", mode=pb.MODE_INFER, batch_size=1, serving=serving)
    summary = pb.Summary(
        serving=pb.ServingSummary(
            scenario=pb.SCENARIO_SERVER,
            query_count=4,
            duration_s=0.02,
            achieved_qps=200.0,
            p50_latency_s=0.003,
            target_qps=200.0,
            reasons={
                "p90_latency_s": "needs at least 29 queries, got 4",
                "p99_latency_s": "needs at least 299 queries, got 4",
            },
        )
    )
    queries = [
        pb.QueryLatencies(latency_s=[0.003, 0.004], queue_s=[0.0, 0.001], first_index=0),
        pb.QueryLatencies(latency_s=[0.002, 0.005], queue_s=[0.0, 0.002], first_index=2),
    ]
    result = run_result(pb.DescribeResponse(framework="torch"), config, summary, queries=queries)
    frame = records.queries_frame("r", [result])
    assert tuple(frame.columns) == QUERIES_COLUMNS and list(frame["query_index"]) == [0, 1, 2, 3]
    assert list(frame["latency_s"]) == [0.003, 0.004, 0.002, 0.005] and set(frame["serving"]) == {serving_text(serving)}
    row = records.summary_frame("r", [result], []).iloc[0]
    assert tuple(records.summary_frame("r", [result], []).columns) == SUMMARY_COLUMNS
    assert (row["scenario"], row["target_qps"], row["p50_latency_s"]) == ("server", 200.0, 0.003)
    assert pd.isna(row["p99_latency_s"]) and "p99_latency_s: needs at least 299 queries" in row["serving_unavailable"]
    # Any percentile can be recomputed from the stored latencies.
    assert np.percentile(frame["latency_s"], 50) == pytest.approx(0.0035)


@pytest.mark.parametrize(
    "load, problem",
    [
        (Load(Scenario.server), "--scenario server needs --target-qps"),
        (
            Load(Scenario.offline, target_qps=10.0),
            "--target-qps sets the arrival rate of --scenario server, not offline",
        ),
        (Load(Scenario.single_stream, batch_timeout_ms=2.0), "--batch-timeout-ms sets how --scenario server batches"),
    ],
)
def test_a_load_that_cannot_run_is_named(load, problem):
    names = {
        "scenario": "--scenario",
        "target_qps": "--target-qps",
        "queries": "--queries",
        "batch_timeout_ms": "--batch-timeout-ms",
    }
    assert load_problem(Mode.infer, load, names).startswith(problem)
    assert "use it with mode infer or generate, not train" in load_problem(
        Mode.train, Load(Scenario.single_stream), names
    )
    assert load_problem(Mode.infer, Load(Scenario.server, 100.0), names) is None


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("--scenario", "serverr"),
            "'serverr' is not a scenario (did you mean server?); accepted values: single_stream, server, offline",
        ),
        (
            ("--mode", "infer", "--scenario", "server", "--target-qps", "0"),
            "accepted: a number above 0 and at most 1e+06",
        ),
        (("--mode", "infer", "--scenario", "server", "--target-qps", "nan"), "accepted: a number above 0"),
        (("--mode", "infer", "--scenario", "server"), "--scenario server needs --target-qps"),
        (("--mode", "train", "--scenario", "single_stream"), "use it with mode infer or generate, not train"),
        (("--mode", "infer", "--queries", "0"), "--queries"),
        (
            ("--mode", "infer", "--scenario", "server", "--target-qps", "10", "--batch-timeout-ms", "-1"),
            "--batch-timeout-ms",
        ),
        (("--mode", "infer", "--target-qps", "10"), "--target-qps applies to a serving scenario"),
        (("--mode", "infer", "--latency-budget-ms", "20"), "--latency-budget-ms applies to a serving scenario"),
    ],
)
def test_bad_serving_options_are_refused_before_anything_runs(args, message):
    done = fwbench_in_process("compare", "--runner", "a=127.0.0.1:1", *args, columns=400)
    assert done.exit_code == 2, done.output
    assert message in " ".join(done.output.split())


SWEEP = """
runners: [a, b]
models: [resnet18]
modes: [infer]
batch_sizes: [1, 2]
shapes: [3x32x32]
repetitions: 2
scenarios: [server, single_stream]
target_qps: [50, 100]
queries: 60
batch_timeout_ms: 2
"""


def test_a_sweep_file_gains_a_load_axis_each_load_its_own_runs_and_chains(tmp_path):
    from fwbench_aggregator.plan.study_file import load_sweep

    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP)
    sweep = load_sweep(path)
    configurations = sweep.configurations()
    assert len(configurations) == sweep.run_count() == 2 * 2 * 2 * 3  # runners x batches x repetitions x loads
    loads = [(c.load.scenario.value, c.load.target_qps) for c in configurations]
    assert set(loads) == {("server", 50.0), ("server", 100.0), ("single_stream", None)}
    first = configurations[:6]  # runner a's first turn: every load's batch sizes, in order
    assert [(c.runner, c.batch_size) for c in first] == [("a", 1), ("a", 2)] * 3
    assert len({c.reuse_chain for c in first}) == 3 and first[0].reuse_chain == first[1].reuse_chain
    startup = __import__("fwbench_aggregator.plan.spec", fromlist=["StartupSettings"]).StartupSettings()
    assert len({c.config_key(startup) for c in configurations}) == len(configurations)
    serving = wire.to_request(first[0].run_spec(startup)).serving
    assert (serving.scenario, serving.target_qps, serving.query_count, serving.batch_timeout_ms) == (
        pb.SCENARIO_SERVER,
        50.0,
        60,
        2.0,
    )
    assert not wire.to_request(first[4].run_spec(startup)).serving.batch_timeout_ms


@pytest.mark.parametrize(
    "extra, problem",
    [
        (
            "modes: [train]\nscenarios: [server]\ntarget_qps: [10]\n",
            "scenarios: a scenario serves inference or generation: give modes: [infer], [generate] or both",
        ),
        ("modes: [infer]\ntarget_qps: [10]\n", "target_qps: applies to a serving scenario: add scenarios"),
        ("modes: [infer]\nscenarios: [server]\n", "target_qps: scenarios: server needs the offered loads"),
        (
            "modes: [infer]\nscenarios: [server]\ntarget_qps: [0]\n",
            "target_qps[0]: 0 is not a rate; accepted: a number above 0",
        ),
        (
            "modes: [infer]\nscenarios: [offline]\nbatch_timeout_ms: 3\n",
            "batch_timeout_ms: applies to the server scenario only",
        ),
        ("modes: [infer]\nscenarios: [sever]\n", "unknown scenario 'sever' (did you mean server?)"),
    ],
)
def test_a_bad_serving_field_in_a_sweep_file_is_named(tmp_path, extra, problem):
    from fwbench_aggregator.plan.field_checks import SweepError
    from fwbench_aggregator.plan.study_file import load_sweep

    path = tmp_path / "sweep.yaml"
    path.write_text("models: [resnet18]\n" + extra)
    with pytest.raises(SweepError) as refused:
        load_sweep(path)
    assert problem in str(refused.value)


# End to end: fake runners whose steps take planted times, over real gRPC, the CLI as a subprocess.


@pytest.fixture(scope="module")
def fake_pair(module_fakes):
    """Two pairs of fake runners: fast (10 ms a step) and slow (20 ms) for comparisons, at a light load so that the
    host's wake-up delays (milliseconds on a busy CI machine) stay small beside a step; and quick (5 ms) and sluggish
    (10 ms) for capacities, whose saturating loads are 200 and 100 queries per second."""
    times = {"fast": 0.010, "slow": 0.020, "quick": 0.005, "sluggish": 0.010}
    return module_fakes(*(Fake(name, step_s=step_s) for name, step_s in times.items())).addresses


@pytest.mark.slow
def test_compare_under_server_stores_every_query_names_the_faster_runner_and_reports_serving(tmp_path, fake_pair):
    from support.cli import fwbench, only_run_dir

    from fwbench_aggregator.store.results_store import ResultStore

    done = fwbench(
        "compare",
        "--model",
        "resnet18",
        "--mode",
        "infer",
        "--batch-size",
        "1",
        "--shape",
        "3x32x32",
        "--warmup",
        "0",
        "--min-measure-s",
        "0",
        "--scenario",
        "server",
        "--target-qps",
        "5",
        "--queries",
        "30",
        "--repetitions",
        "4",
        "--latency-budget-ms",
        "20",
        "--runner",
        f"fast={fake_pair['fast']}",
        "--runner",
        f"slow={fake_pair['slow']}",
        "--out",
        str(tmp_path),
        columns=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "serving: server 5 qps" in done.stdout
    store = ResultStore(tmp_path / "store")
    queries = store.load("queries")
    assert queries.groupby(["runner", "repetition"]).size().to_dict() == {
        (r, i): 30 for r in ("fast", "slow") for i in range(4)
    }
    summary = store.load("summary")
    assert set(summary["serving"]) == {"server 5 qps"} and set(summary["query_count"]) == {30}
    # The stored latencies recompute the runner's percentile (the run's p50 from its 30 queries).
    one = queries[(queries["runner"] == "fast") & (queries["repetition"] == 0)]["latency_s"]
    p50 = summary[(summary["runner"] == "fast") & (summary["repetition"] == 0)]["p50_latency_s"].iloc[0]
    assert one.min() <= p50 <= one.max() and abs(np.percentile(one, 50) - p50) <= np.ptp(one) / 10
    rows = pd.read_csv(only_run_dir(tmp_path) / "serving.csv").set_index(["figure", "runner"])
    for figure in ("p50", "p90"):
        assert rows.loc[(figure, "fast"), "verdict"] == "best"
        slow = rows.loc[(figure, "slow")]
        assert slow["significant"] and slow["verdict"].startswith("fast "), slow[
            "verdict"
        ]  # "faster by 95%" or "2.1x faster"
        assert 1.5 < slow["ratio_to_best"] < 3.0
    assert rows.loc[("p99", "slow"), "verdict"].startswith("not supported by 4 of 4 runs (30 queries")
    assert rows.loc[("p99", "fast"), "budget_status"].startswith("p99 not supported")
    report = fwbench("report", "--store", str(tmp_path / "store"), columns=240)
    assert report.returncode == 0, report.stdout + report.stderr
    assert "serving: server 5 qps" in report.stdout, "the terminal's report prints the serving table too"
    page = (tmp_path / "store" / "report" / "report.html").read_text()
    assert ">Serving</h2>" in page and "Serving: latency percentiles against offered load" in page
    assert (tmp_path / "store" / "report" / "plots" / "serving-latency-vs-load.png").exists()


@pytest.mark.slow
def test_serve_capacity_finds_each_runners_capacity_in_order_near_saturation_and_stores_every_probe(
    tmp_path, fake_pair
):
    from support.cli import fwbench

    from fwbench_aggregator.store.results_store import ResultStore

    done = fwbench(
        "serve-capacity",
        "--latency-budget-ms",
        "40",
        "--percentile",
        "p90",
        "--model",
        "resnet18",
        "--shape",
        "3x32x32",
        "--start-qps",
        "20",
        "--queries",
        "100",
        "--warmup",
        "0",
        "--runner",
        f"quick={fake_pair['quick']}",
        "--runner",
        f"sluggish={fake_pair['sluggish']}",
        "--store",
        str(tmp_path / "store"),
        columns=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    store = ResultStore(tmp_path / "store")
    capacity = store.load("serve_capacity").set_index("runner")["capacity_qps"]
    # One query at a time through a 5 ms (10 ms) step saturates at 200 (100) queries per second: a p90 budget of 8
    # (4) steps is met below that, and 100 queries cannot hide much more than 10% overload in their p90.
    assert 0.4 * 200 <= capacity["quick"] <= 1.15 * 200, done.stdout
    assert 0.2 * 100 <= capacity["sluggish"] <= 1.15 * 100, done.stdout
    assert capacity["quick"] > capacity["sluggish"]
    summary = store.load("summary")
    probes = summary.groupby("runner")["target_qps"].apply(set)
    assert capacity["quick"] in probes["quick"] and {20.0, 40.0} <= probes["sluggish"]
    assert "serve-capacity: the highest offered load whose p90 stays under 40 ms" in done.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        ((), "--latency-budget-ms: missing"),
        (
            ("--latency-budget-ms", "20", "--percentile", "p95"),
            "'p95' is not a percentile; accepted values: p50, p90, p99",
        ),
        (
            ("--latency-budget-ms", "20", "--start-qps", "100", "--max-qps", "50"),
            "--start-qps (100) must be below --max-qps (50)",
        ),
        (("--latency-budget-ms", "20", "--resolution", "0"), "--resolution"),
    ],
)
def test_serve_capacity_refuses_bad_options_before_anything_runs(args, message):
    done = fwbench_in_process("serve-capacity", "--runner", "a=127.0.0.1:1", *args, columns=400)
    assert done.exit_code == 2, done.output
    assert message in " ".join(done.output.split())


def test_the_rate_search_brackets_then_bisects_to_the_resolution():
    from fwbench_aggregator.plan.bracket_search import RateSearch

    search = RateSearch(lambda qps: qps <= 370.0, start=10.0, limit=10_000.0, resolution=0.1)
    found = search.highest()
    assert 370.0 / 1.1 <= found <= 370.0 and search.tried[320.0] and not search.tried[640.0]
    assert RateSearch(lambda qps: False, 10.0, 100.0).highest() is None
    assert RateSearch(lambda qps: True, 10.0, 100.0).highest() == 100.0  # the limit met: capped there

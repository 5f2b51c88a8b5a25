"""Serving with generation through the aggregator, with fake runners: `fwbench compare --mode generate --scenario
server` stores each query's first token latency, compares the runners' TTFT+queue (from arrival) and TPOT at each
percentile the queries support beside latency's, shows the tokens served per second, and writes them to serving.csv
and the report; the generation table keeps its prefill-only time to first token. A sweep file serves generation
under its loads."""

from __future__ import annotations

import pandas as pd
import pytest
from support.cli import fwbench, only_run_dir
from support.fakes import Fake, started_fakes

from fwbench_aggregator.store.results_store import ResultStore

QUERIES = 30
SERVE_GENERATION = (
    "--model",
    "gpt2_small",
    "--mode",
    "generate",
    "--shape",
    "seq=8",
    "--new-tokens",
    "4",
    "--batch-size",
    "1",
    "--warmup",
    "1",
    "--min-measure-s",
    "0",
    "--scenario",
    "server",
    "--target-qps",
    "30",
    "--queries",
    str(QUERIES),
    "--design",
    "rounds",
    "--repetitions",
    "3",
)


@pytest.mark.slow
def test_compare_under_server_judges_first_token_and_per_token_percentiles_and_shows_tokens_served(tmp_path):
    # A fake's prefill sleeps its step time and each decode step a quarter of it: slow is twice quick at both.
    with started_fakes(tmp_path, Fake("quick", step_s=0.004), Fake("slow", step_s=0.008)) as fakes:
        runners = [f"--runner={r.name}={r.address}" for r in fakes.runners]
        done = fwbench("compare", *SERVE_GENERATION, *runners, "--out", str(tmp_path), columns=240)
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout
    assert "serving: server 30 qps" in said and "tokens/s" in said
    assert "TTFT+queue p50" in said and "TPOT p90" in said
    assert "generation: 4 new tokens" in said, "the generation table is printed beside the serving one"
    assert "time to first token: the prefill alone, the queue excluded" in " ".join(said.split())
    rows = pd.read_csv(only_run_dir(tmp_path) / "serving.csv").set_index(["figure", "runner"])
    # Latencies under Poisson arrivals vary with the queue from run to run on a busy host: slow's are higher, and its
    # decode time per token, which no queue touches, is called slower.
    for figure in ("p50", "p90", "TTFT+queue p50", "TTFT+queue p90", "TPOT p50", "TPOT p90"):
        assert rows.loc[(figure, "quick"), "verdict"] == "best", figure
        assert rows.loc[(figure, "slow"), "ratio_to_best"] > 1.3, figure
    slow = rows.loc[("TPOT p50", "slow")]
    assert slow["significant"] and slow["verdict"].startswith("quick "), slow["verdict"]
    for figure in ("p99", "TTFT+queue p99", "TPOT p99"):
        assert rows.loc[(figure, "slow"), "verdict"].startswith(f"not supported by 3 of 3 runs ({QUERIES} queries")
    # 30 queries a second of 4 tokens each: about 120 tokens served per second, whichever runner.
    assert rows["generated_tokens_per_s"].between(75, 150).all(), rows["generated_tokens_per_s"]
    store = ResultStore(tmp_path / "store")
    queries = store.load("queries")
    assert len(queries) == 2 * 3 * QUERIES and queries["first_token_latency_s"].notna().all()
    # A query's first token comes after its wait and before its last token.
    assert (queries["queue_s"] <= queries["first_token_latency_s"]).all()
    assert (queries["first_token_latency_s"] < queries["latency_s"]).all()
    summary = store.load("summary")
    # From arrival, the wait included: never below the prefill alone (the generation columns' time to first token).
    assert (summary["p50_first_token_latency_s"] >= summary["median_time_to_first_token_s"] * 0.99).all()
    page = (only_run_dir(tmp_path) / "report" / "report.html").read_text()
    assert ">Serving</h2>" in page and "TTFT+queue p90" in page and ">Generation</h2>" in page


def test_a_sweep_file_serves_generation_under_its_loads(tmp_path):
    from fwbench.runner.v1 import runner_pb2 as pb

    from fwbench_aggregator.plan.spec import StartupSettings
    from fwbench_aggregator.plan.study_file import load_sweep
    from fwbench_aggregator.run import wire

    path = tmp_path / "sweep.yaml"
    path.write_text(
        "runners: [a]\nmodels: [gpt2_small]\nmodes: [generate]\nbatch_sizes: [1]\nshapes: [seq=8]\nnew_tokens: 4\n"
        "repetitions: 1\nscenarios: [server, offline]\ntarget_qps: [5]\nqueries: 30\n"
    )
    requests = [wire.to_request(c.run_spec(StartupSettings())) for c in load_sweep(path).configurations()]
    assert [(r.mode, r.new_tokens, r.serving.scenario) for r in requests] == [
        (pb.MODE_GENERATE, 4, pb.SCENARIO_SERVER),
        (pb.MODE_GENERATE, 4, pb.SCENARIO_OFFLINE),
    ]

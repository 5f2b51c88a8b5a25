"""Sweep efficiency: a small CPU sweep's wall time against the step time it measured, and where the rest goes.

Runs `fwbench sweep` (2 models x 2 modes x 3 batch sizes x 2 frameworks, embedded runners) into a fresh
store, then splits the wall time using what every run recorded: measured steps, warm-up steps, model
build (time to first step less the first step), the rest inside runs (timing loop, streaming, idle
baseline), and everything outside runs (runner start-up, connections, store writes, the report); then the
parts of those: first steps (tracing), reused builds, and outside runs before the first, between runs
(by the framework of the run that follows) and after the last.

    .venvs/aggregator/bin/python benchmarks/sweep_efficiency.py [--steps 10] [--warmup 2] [--min-measure-s 0]
    .venvs/aggregator/bin/python benchmarks/sweep_efficiency.py --no-reuse-builds   # every run builds afresh

By default every run has the sweep's own default window (warm-up until stable, at least 20 steps and
1 s measured); one repetition per point keeps the number of runs the same as before those defaults.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from fwbench_aggregator.plan import spec as plan
from fwbench_aggregator.store.results_store import ResultStore


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--batch-sizes", default="2,4,8")
    parser.add_argument("--shape", default="3x64x64")
    parser.add_argument("--warmup", type=int, default=plan.DEFAULT_WARMUP)
    parser.add_argument("--steps", type=int, default=plan.DEFAULT_STEPS)
    parser.add_argument("--min-measure-s", type=float, default=plan.DEFAULT_MIN_MEASURE_S)
    parser.add_argument("--repetitions", type=int, default=1)
    parser.add_argument(
        "--reuse-builds",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a runner's batch sizes of one repetition share one build (the sweep's default)",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        store_path, sweep_path = Path(folder) / "store", Path(folder) / "sweep.yaml"
        sweep_path.write_text(
            yaml.safe_dump(
                {
                    "models": args.models.split(","),
                    "modes": ["train", "infer"],
                    "batch_sizes": [int(b) for b in args.batch_sizes.split(",")],
                    "shapes": [args.shape],
                    "warmup": args.warmup,
                    "steps": args.steps,
                    "min_measure_s": args.min_measure_s,
                    "repetitions": args.repetitions,
                    "reuse_builds": args.reuse_builds,
                }
            )
        )
        command = [
            sys.executable,
            "-m",
            "fwbench_aggregator",
            "sweep",
            str(sweep_path),
            "--store",
            str(store_path),
            "--no-report",
        ]
        started_unix_s = time.time()
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        wall_s = time.perf_counter() - started
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return done.returncode
        store = ResultStore(store_path)
        steps, summary = store.load("steps"), store.load("summary")

    ok = summary[summary["status"] == "ok"].sort_values("started_at_unix_s")
    measured_s = steps.loc[~steps["warmup"], "step_time_s"].sum()
    warmup_s = steps.loc[steps["warmup"], "step_time_s"].sum()
    first_steps = steps[steps["step_index"] == 0].set_index("run_key")["step_time_s"]
    build_s = (ok.set_index("run_key")["time_to_first_step_s"] - first_steps).sum()
    in_runs_s = (ok["finished_at_unix_s"] - ok["started_at_unix_s"]).sum()
    parts = {
        "measured steps": measured_s,
        "warm-up steps (incl. tracing, first-step compilation)": warmup_s,
        "model build and inputs": build_s,
        "rest inside runs (timing loop, streaming, idle baseline)": in_runs_s - measured_s - warmup_s - build_s,
        "outside runs (runner start-up, connections, store writes)": wall_s - in_runs_s,
    }
    print(
        f"sweep: {len(ok)} runs ({len(summary) - len(ok)} failed), {args.models} x train,infer x b{args.batch_sizes} x torch,tensorflow, {args.shape}; "
        f"warm-up at most {args.warmup}, at least {args.steps} steps and {args.min_measure_s} s measured, "
        f"{args.repetitions} repetition(s), builds {'reused within a chain' if args.reuse_builds else 'fresh'}"
    )
    print(f"wall time {wall_s:.1f} s; measured step time {measured_s:.1f} s; efficiency {measured_s / wall_s:.1%}")
    for name, seconds in parts.items():
        print(f"  {name:<60} {seconds:8.1f} s  {seconds / wall_s:6.1%}")

    traced = ok[ok["first_step_traced"]]["run_key"]
    reused = ok[ok["build_reused"]]
    print("of which:")
    print(
        f"  first steps {first_steps.sum():.1f} s, {first_steps[first_steps.index.isin(traced)].sum():.1f} s of them in "
        f"the {len(traced)} runs whose first step traced the step function"
    )
    print(
        f"  model build {build_s:.1f} s: {len(reused)} runs reused a build "
        f"({(reused['time_to_first_step_s'] - first_steps[reused['run_key']].to_numpy()).sum():.1f} s restarting it)"
    )
    gaps = ok["started_at_unix_s"].to_numpy()[1:] - ok["finished_at_unix_s"].to_numpy()[:-1]
    before = ok["started_at_unix_s"].iloc[0] - started_unix_s
    after = started_unix_s + wall_s - ok["finished_at_unix_s"].iloc[-1]
    print(
        f"  outside runs: {before:.1f} s before the first (runner start-up), {gaps.sum():.1f} s between runs, "
        f"{after:.1f} s after the last (runner shut-down)"
    )
    by_next = {name: gaps[(ok["framework"].iloc[1:] == name).to_numpy()] for name in sorted(set(ok["framework"]))}
    for name, values in by_next.items():
        if len(values):
            print(
                f"    before a {name} run: median {sorted(values)[len(values) // 2]:.2f} s, range {values.min():.2f} to {values.max():.2f} s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sweep efficiency: a small CPU sweep's wall time against the step time it measured, and where the rest goes.

Runs `fwbench sweep` (2 models x 2 modes x 3 batch sizes x 2 frameworks, embedded runners) into a fresh
store, then splits the wall time using what every run recorded: measured steps, warm-up steps, model
build (time to first step less the first step), the rest inside runs (timing loop, streaming, idle
baseline), and everything outside runs (runner start-up, connections, store writes, the report).

    .venvs/aggregator/bin/python benchmarks/sweep_efficiency.py [--steps 10] [--warmup 2] [--min-measure-s 0]

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

from fwbench_aggregator import plan
from fwbench_aggregator.store import ResultStore


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--batch-sizes", default="2,4,8")
    parser.add_argument("--shape", default="3x64x64")
    parser.add_argument("--warmup", type=int, default=plan.DEFAULT_WARMUP)
    parser.add_argument("--steps", type=int, default=plan.DEFAULT_STEPS)
    parser.add_argument("--min-measure-s", type=float, default=plan.DEFAULT_MIN_MEASURE_S)
    parser.add_argument("--repetitions", type=int, default=1)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        store_path = Path(folder) / "store"
        command = [
            sys.executable, "-m", "fwbench_aggregator", "sweep", "--models", args.models, "--modes", "train,infer",
            "--batch-sizes", args.batch_sizes, "--shapes", args.shape, "--warmup", str(args.warmup),
            "--steps", str(args.steps), "--min-measure-s", str(args.min_measure_s), "--repetitions", str(args.repetitions),
            "--store", str(store_path), "--no-report",
        ]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        wall_s = time.perf_counter() - started
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return done.returncode
        store = ResultStore(store_path)
        steps, summary = store.load("steps"), store.load("summary")

    ok = summary[summary["status"] == "ok"]
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
    print(f"sweep: {len(ok)} runs ({len(summary) - len(ok)} failed), {args.models} x train,infer x b{args.batch_sizes} x torch,tensorflow, {args.shape}; "
          f"warm-up at most {args.warmup}, at least {args.steps} steps and {args.min_measure_s} s measured")
    print(f"wall time {wall_s:.1f} s; measured step time {measured_s:.1f} s; efficiency {measured_s / wall_s:.1%}")
    for name, seconds in parts.items():
        print(f"  {name:<60} {seconds:8.1f} s  {seconds / wall_s:6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

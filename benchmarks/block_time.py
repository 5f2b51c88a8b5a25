"""Where a process block's time goes: one compare in blocks (a fixed number of them), its wall time split by what
every window stored (its start and end, its time to first step, its measured steps).

Per block and runner: the gap before the block's first window (the last block's workers ending, and this block's
workers spawned: OpenBlock), each runner's first window (build, trace, warm-up and its
measure), its later windows (warm-up refill and measure), and the gaps between windows (the next window's request,
its answer, the store). Before the first block: runner start-up and the preflight; after the last: the analysis and
the report. The measured step time over the wall time is the block design's efficiency.

    .venvs/aggregator/bin/python benchmarks/block_time.py                          # torch against tensorflow
    .venvs/aggregator/bin/python benchmarks/block_time.py --aa torch --blocks 4    # two torch runners
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from tempfile import TemporaryDirectory

import pandas as pd

from fwbench_aggregator.app.compare import CompareRequest, compare
from fwbench_aggregator.app.rounds import Repetitions
from fwbench_aggregator.app.runners import RunnerChoice
from fwbench_aggregator.base.vocabulary import Mode, Precision
from fwbench_aggregator.plan.design import BlockDesign, DesignChoice
from fwbench_aggregator.plan.spec import RunSpec
from fwbench_aggregator.run.connection import EMBEDDED
from fwbench_aggregator.run.launch import default_venvs
from fwbench_aggregator.run.runners import start_embedded
from fwbench_aggregator.store.results_store import ResultStore


def parts(windows: pd.DataFrame, steps: pd.DataFrame) -> dict[str, float]:
    """The seconds of each part of the blocks, from the stored windows (summary rows) and their steps."""
    windows = windows.sort_values("started_at_unix_s")
    start, end = windows["started_at_unix_s"], windows["finished_at_unix_s"]
    first = windows["block_window"] == 0
    gap = start - end.shift()
    new_block = windows["process_block"] != windows["process_block"].shift()
    measured = steps[~steps["warmup"]]["step_time_s"].sum()
    return {
        "between blocks (workers end, spawn, start)": float(gap[new_block].sum()),
        "first windows: to the first step (build, trace)": float(windows.loc[first, "time_to_first_step_s"].sum()),
        "first windows: the rest (warm-up, measure)": float(
            ((end - start) - windows["time_to_first_step_s"])[first].sum()
        ),
        "later windows (refill, measure)": float((end - start)[~first].sum()),
        "between windows (requests, answers, the store)": float(gap[~new_block].sum()),
        "of which measured steps": float(measured),
        "blocks in all": float(end.max() - start.min()),
    }


def first_windows(windows: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per runner, the median over blocks of its first window's parts: to the first step, and its warm-up and
    measured steps (how many, and their seconds)."""
    key = ["runner", "repetition"]
    first = windows[windows["block_window"] == 0].set_index(key)[["time_to_first_step_s"]]
    counted = steps.groupby([*key, "warmup"])["step_time_s"].agg(["count", "sum"]).unstack("warmup", fill_value=0)
    counted.columns = [
        f"{'warm-up' if warmup else 'measured'} {'steps' if what == 'count' else 's'}"
        for what, warmup in counted.columns
    ]
    table = first.join(counted, how="left").rename(columns={"time_to_first_step_s": "to first step s"})
    return table.groupby(level="runner").median().round(3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="torch,tensorflow", help="the two embedded runners to compare")
    parser.add_argument("--aa", metavar="FRAMEWORK", help="compare two instances of this framework instead (A/A)")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--mode", default="infer", choices=[m.value for m in Mode])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--shape", default="3x64x64")
    parser.add_argument("--blocks", type=int, default=3)
    args = parser.parse_args()
    with ExitStack() as stack, TemporaryDirectory() as scratch:
        started = time.monotonic()
        if args.aa:
            first, failed = start_embedded([args.aa], default_venvs(), Path(scratch) / "logs-a", stack)
            second, more = start_embedded([args.aa], default_venvs(), Path(scratch) / "logs-b", stack)
            given, failed = (f"{args.aa}-a={first.get(args.aa)}", f"{args.aa}-b={second.get(args.aa)}"), failed + more
        else:
            addresses, failed = start_embedded(
                args.frameworks.split(","), default_venvs(), Path(scratch) / "logs", stack
            )
            given = tuple(f"{name}={address}" for name, address in addresses.items())
        if failed:
            print("; ".join(f.message for f in failed), file=sys.stderr)
            return 1
        runners_up_s = time.monotonic() - started
        spec = RunSpec(args.model, Mode(args.mode), args.batch_size, args.shape, Precision.fp32)
        out = Path(scratch) / "out"
        asked, asked_unix_s = time.monotonic(), time.time()
        result = compare(
            CompareRequest(
                spec=spec,
                runners=RunnerChoice(given, transport=EMBEDDED),
                repetitions=Repetitions(args.blocks),
                design=DesignChoice(BlockDesign()),
                out=out,
                store=out / "store",
            )
        )
        compare_s = time.monotonic() - asked
        if result.rows.empty:
            print("failed: " + "; ".join(f.message for f in result.failures), file=sys.stderr)
            return 1
        store = ResultStore(out / "store")
        summary, steps = store.load("summary"), store.load("steps")
        windows = summary[summary["status"] == "ok"]
        split = parts(windows, steps)  # a fresh store: this compare's windows only
        before = windows["started_at_unix_s"].min() - asked_unix_s
        print(
            f"{args.model} {args.mode} b{args.batch_size} {args.shape}, {args.blocks} {BlockDesign().label}, "
            f"runners {', '.join(name.split('=')[0] for name in given)}"
        )
        print(f"  runner start-up (before compare)                    {runners_up_s:6.1f} s")
        print(f"  compare, before the first window (preflight, open)  {before:6.1f} s")
        for name, seconds in split.items():
            share = f"{seconds / split['blocks in all']:6.1%}" if name != "blocks in all" else ""
            print(f"  {name:<52}{seconds:6.1f} s {share}")
        print(
            f"  compare, after the last block (analysis, report)    "
            f"{compare_s - before - split['blocks in all']:6.1f} s"
        )
        print(
            f"  a block: {split['blocks in all'] / args.blocks:.1f} s; the blocks' efficiency (measured steps over "
            f"their wall time) {split['of which measured steps'] / split['blocks in all']:.1%}"
        )
        print(first_windows(windows, steps).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())

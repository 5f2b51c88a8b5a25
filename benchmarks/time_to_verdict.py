"""Time to a verdict: each configuration of a grid compared under each design, side by side in one run: a fixed number
of runs (6 per runner, the old default), `--repetitions auto` (rounds until the verdict is settled) and, with
`--designs fixed,auto,blocks,blocks6`, interleaved process blocks under auto (compare's --design blocks) and 6 fixed
blocks; prints each one's verdict with each runner's median step, outcome, runs (blocks for the block designs) and
wall time, then the totals against the fixed design. `--keep DIR` keeps every comparison's results and store.

With --aa, the two runners are two instances of one framework (A/A): any "different" outcome is a false verdict,
and the runs used and the smallest difference resolved say what auto costs where there is nothing to find.

    .venvs/aggregator/bin/python benchmarks/time_to_verdict.py                  # torch against tensorflow, CPU grid
    .venvs/aggregator/bin/python benchmarks/time_to_verdict.py --aa torch       # torch against itself
    # GPU: two runners already running (../shared/gpu/on_gpu.sh starts a and b)
    python benchmarks/time_to_verdict.py --grid gpu --runner a=127.0.0.1:50051 --runner b=127.0.0.1:50052
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from tempfile import TemporaryDirectory

from fwbench_aggregator.analyse.sequential import DEFAULT_MAX_BLOCKS
from fwbench_aggregator.app.compare import CompareRequest, compare
from fwbench_aggregator.app.rounds import Repetitions
from fwbench_aggregator.app.runners import RunnerChoice
from fwbench_aggregator.base.vocabulary import Mode, Precision
from fwbench_aggregator.plan.design import BlockDesign, DesignChoice
from fwbench_aggregator.plan.spec import RunSpec
from fwbench_aggregator.run.connection import EMBEDDED, Transport
from fwbench_aggregator.run.launch import default_venvs
from fwbench_aggregator.run.runners import start_embedded

GRIDS = {
    # Small CPU configurations: differences from a few percent to several-fold between torch and TensorFlow.
    "cpu": [
        ("resnet18", "train", 4, "3x64x64"),
        ("resnet18", "infer", 8, "3x64x64"),
        ("mobilenet_v2", "train", 8, "3x64x64"),
        ("mobilenet_v2", "infer", 8, "3x64x64"),
        ("lstm_lm", "train", 8, "seq=32"),
        ("lstm_lm", "infer", 8, "seq=32"),
    ],
    "gpu": [
        ("resnet50", "train", 64, None),
        ("resnet50", "infer", 1, None),
        ("bert_base", "infer", 16, "seq=128"),
        ("resnet50", "infer", 256, None),
    ],
}
FIXED = 6


def verdict_of(rows) -> tuple[str, str, int]:
    """The non-fastest row's verdict and outcome (the first, with more than two runners), each runner's median step
    (so that designs which disagree show which runner moved), and the runs per runner (the blocks, under the block
    design)."""
    ran = rows[rows["status"] == "ok"]
    units = ran["blocks"] if (ran["blocks"] > 0).all() else ran["runs"]
    medians = ", ".join(f"{row.runner} {row.median_step_ms:.1f} ms" for row in ran.itertuples())
    judged = ran[ran["outcome"] != ""]
    if judged.empty:
        return f"no verdict ({medians})", "", int(units.min()) if len(ran) else 0
    row = judged.iloc[0]
    return f"{row['verdict']} ({medians})", str(row["outcome"]), int(units.min())


def one(
    spec: RunSpec, choice: RunnerChoice, repetitions: Repetitions, design: BlockDesign | None, out: Path
) -> tuple[str, str, int, float]:
    started = time.monotonic()
    result = compare(
        CompareRequest(
            spec=spec,
            runners=choice,
            repetitions=repetitions,
            design=DesignChoice(design),
            out=out,
            store=out / "store",
        )
    )
    elapsed = time.monotonic() - started
    if result.rows.empty:
        return "failed: " + "; ".join(f.message for f in result.failures), "", 0, elapsed
    return (*verdict_of(result.rows), elapsed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=GRIDS, default="cpu")
    parser.add_argument("--frameworks", default="torch,tensorflow", help="the two embedded runners to compare")
    parser.add_argument("--aa", metavar="FRAMEWORK", help="compare two instances of this framework instead (A/A)")
    parser.add_argument("--runner", action="append", default=[], help="NAME=HOST:PORT, twice: runners already running")
    parser.add_argument("--max-repetitions", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--min-measure-s", type=float, default=1.0)
    parser.add_argument("--configurations", type=int, help="only the grid's first N")
    parser.add_argument(
        "--designs",
        default="fixed,auto",
        help=f"of fixed, auto, blocks and blocks{FIXED} ({FIXED} fixed blocks), comma-separated",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep each comparison's results and store under DIR (by default they go with the run)",
    )
    parser.add_argument(
        "--max-blocks",
        type=int,
        default=None,
        help=f"the block design's budget (default: compare's, {DEFAULT_MAX_BLOCKS})",
    )
    args = parser.parse_args()
    grid = GRIDS[args.grid][: args.configurations]
    every = {
        "fixed": (Repetitions(FIXED), None),
        "auto": (Repetitions(None, args.max_repetitions), None),
        "blocks": (Repetitions(None, args.max_blocks), BlockDesign()),
        f"blocks{FIXED}": (Repetitions(FIXED), BlockDesign()),
    }
    chosen = args.designs.split(",")
    totals = {name: [0.0, 0, 0, 0] for name in chosen}  # seconds, settled, runs, false verdicts
    with ExitStack() as stack, TemporaryDirectory() as scratch:
        kept = args.keep or Path(scratch)
        transport: Transport = EMBEDDED
        if args.runner:
            given = tuple(args.runner)
        elif args.aa:
            first, _ = start_embedded([args.aa], default_venvs(), Path(scratch) / "logs-a", stack)
            second, _ = start_embedded([args.aa], default_venvs(), Path(scratch) / "logs-b", stack)
            given = (f"{args.aa}-a={first[args.aa]}", f"{args.aa}-b={second[args.aa]}")
        else:
            started, failures = start_embedded(
                args.frameworks.split(","), default_venvs(), Path(scratch) / "logs", stack
            )
            if failures:
                print("; ".join(f.message for f in failures), file=sys.stderr)
                return 1
            given = tuple(f"{name}={address}" for name, address in started.items())
        choice = RunnerChoice(given, transport=transport)
        print(f"{'configuration':<30} {'design':<6} {'runs':>4} {'time s':>7}  outcome     verdict")
        for number, (model, mode, batch, shape) in enumerate(grid):
            spec = RunSpec(
                model,
                Mode(mode),
                batch,
                shape,
                Precision.fp32,
                warmup=args.warmup,
                steps=args.steps,
                min_measure_s=args.min_measure_s,
            )
            designs = [(name, *every[name]) for name in chosen]
            # Alternated, so that a host drifting over the study favours no design.
            for name, repetitions, design in designs if number % 2 == 0 else designs[::-1]:
                verdict, outcome, runs, seconds = one(spec, choice, repetitions, design, kept / f"{number}-{name}")
                total = totals[name]
                total[0] += seconds
                total[1] += outcome in ("different", "equivalent")
                total[2] += runs
                total[3] += bool(args.aa) and outcome == "different"
                label = f"{model} {mode} b{batch}" + (f" {shape}" if shape else "")
                print(f"{label:<30} {name:<6} {runs:>4} {seconds:>7.1f}  {outcome or '-':<11} {verdict}", flush=True)
    print()
    for name, (seconds, settled, runs, false) in totals.items():
        line = f"{name:<6} total {seconds:7.1f} s, {settled} of {len(grid)} settled, {runs} runs per runner in all"
        print(line + (f", {false} false verdicts (A/A)" if args.aa else ""))
    fixed_s = totals.get("fixed", [0.0])[0]
    for name in (n for n in totals if n != "fixed" and fixed_s > 0):
        ratio = totals[name][0] / fixed_s
        print(f"{name} / fixed time: {ratio:.2f} ({1 - ratio:.0%} of the fixed design's time saved)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

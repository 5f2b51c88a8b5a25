"""How many windows a process block holds and how long each is (plan.design's defaults), chosen on window-level data:
for each configuration one fresh A/A pair of runner instances measures blocks under each design in turn, in one sitting;
`judge` says what each design resolves in 8 blocks and within a fixed time of blocks, and how much of that time was
measured steps.

    .venvs/aggregator/bin/python studies/block_windows.py collect --designs 8x0.1,16x0.1,8x0.25 \
        --out results/windows.csv
    .venvs/aggregator/bin/python studies/block_windows.py judge studies/data/design-aa-2026-12-01/windows.csv

A design is WINDOWSxSECONDS: windows per runner in a block, and each window's shortest measurement. The CSV holds one
row per window (its block, place, median and times); a block's value per instance is the geometric mean of its
windows' medians, and an A/A comparison's blocks are judged by the paired test, as compare --design blocks judges them.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np
import pandas as pd
from design_aa import FRAMEWORKS, GRID
from scipy import stats as scipy_stats

from fwbench_aggregator.analyse import stats
from fwbench_aggregator.app.blocks import run_blocks
from fwbench_aggregator.app.rounds import Repetitions
from fwbench_aggregator.base.vocabulary import Mode
from fwbench_aggregator.plan import spec as plan
from fwbench_aggregator.plan.design import BlockDesign
from fwbench_aggregator.run import wire
from fwbench_aggregator.run.connection import EMBEDDED
from fwbench_aggregator.run.launch import default_venvs
from fwbench_aggregator.run.runners import start_embedded


def designs_of(text: str) -> list[BlockDesign]:
    return [BlockDesign(int(windows), float(seconds)) for windows, seconds in (d.split("x") for d in text.split(","))]


def collect(out: Path, designs: list[BlockDesign], blocks: int, frameworks: list[str]) -> int:
    rows = []
    for framework in frameworks:
        for model, mode, batch, shape in GRID:
            request = wire.to_request(plan.RunSpec(model, Mode(mode), batch, shape, device="cpu"))
            for design in designs:
                with ExitStack() as stack, TemporaryDirectory() as logs:
                    first, failed = start_embedded([framework], default_venvs(), Path(logs) / "a", stack)
                    second, more = start_embedded([framework], default_venvs(), Path(logs) / "b", stack)
                    if failed or more:
                        print(*(f.message for f in failed + more), sep="\n", file=sys.stderr)
                        return 1
                    twins = {"a": first[framework], "b": second[framework]}
                    began = time.perf_counter()
                    done = run_blocks(
                        twins,
                        {name: request for name in twins},
                        EMBEDDED,
                        design,
                        Repetitions(fixed=blocks),
                        f"{framework}-{model}",
                        None,
                        stats.MIN_EFFECT,
                    )
                for r in done.results:
                    rows.append(
                        dict(
                            framework=framework,
                            design=f"W{design.windows} w{design.window_s:g}",
                            configuration=f"{model} {mode} b{batch}",
                            runner=r.runner,
                            block=r.block.block,
                            window=r.block.window,
                            repetition=r.repetition,
                            median_s=r.summary.median_step_time_s,
                            process_id=r.summary.process_id,
                            started_at_unix_s=r.summary.started_at_unix_s,
                            finished_at_unix_s=r.summary.finished_at_unix_s,
                            warmup_steps_run=r.summary.warmup_steps_run,
                            build_continued=r.summary.build_continued,
                            measured_steps=r.summary.measured_steps,
                            measured_s=sum(s.step_time_s for s in r.steps if not s.warmup),
                        )
                    )
                pd.DataFrame(rows).to_csv(out, index=False)
                print(
                    f"{framework} {model} {mode} b{batch} {design.label} of {design.window_s:g} s: "
                    f"{time.perf_counter() - began:.0f} s",
                    flush=True,
                )
    return 0


def judge(paths: list[Path], budget_s: float) -> int:
    windows = pd.concat([pd.read_csv(path) for path in paths], ignore_index=True)
    print(
        f"{'framework':<11}{'configuration':<26}{'design':<10}{'block s':>8}{'block sd':>9}{'res 8':>7}"
        f"{f'res {budget_s:g} s':>9}{'measured':>9}"
    )
    results = []
    for (framework, configuration, design), mine in windows.groupby(["framework", "configuration", "design"]):
        mine = mine.sort_values("started_at_unix_s")
        order = list(dict.fromkeys(mine["block"]))
        by_block = mine.groupby("block")
        values = np.log(mine["median_s"]).groupby([mine["block"], mine["runner"]]).mean().unstack("runner").loc[order]
        ratios = (values["b"] - values["a"]).to_numpy()
        spread, count = ratios.std(ddof=1), ratios.size
        # The block's period, the first block left out: in windows.csv (forked workers) it started each runner's fork
        # server, its framework's import.
        period_s = (mine["finished_at_unix_s"].iloc[-1] - by_block["started_at_unix_s"].min()[order[1]]) / (count - 1)
        within_budget = max(budget_s / period_s, 3.0)
        at_8 = math.expm1(scipy_stats.t.ppf(1 - stats.ALPHA / 2, count - 1) * spread / math.sqrt(count))
        at_budget = math.expm1(
            scipy_stats.t.ppf(1 - stats.ALPHA / 2, within_budget - 1) * spread / math.sqrt(within_budget)
        )
        measured = (mine["measured_s"].sum() if "measured_s" in mine else np.nan) / (
            mine["finished_at_unix_s"].max() - mine["started_at_unix_s"].min()
        )
        results.append((design, at_8, at_budget, period_s, measured))
        print(
            f"{framework:<11}{configuration:<26}{design:<10}{period_s:>8.1f}{spread:>9.1%}{at_8:>7.1%}"
            f"{at_budget:>9.1%}{measured:>9.0%}"
        )
    table = pd.DataFrame(results, columns=["design", "at_8", "at_budget", "period_s", "measured"])
    print()
    for design, mine in table.groupby("design"):
        print(
            f"{design:<10} median: resolves {mine['at_8'].median():.1%} in 8 blocks, {mine['at_budget'].median():.1%} "
            f"in {budget_s:g} s of blocks; a block {mine['period_s'].median():.1f} s, "
            f"{mine['measured'].median():.0%} of it measured steps"
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    gather = commands.add_parser("collect", help="measure blocks under each design and write their windows")
    gather.add_argument("--out", type=Path, default=Path("results/windows.csv"))
    gather.add_argument("--designs", default="8x0.1,16x0.1,8x0.25", help="WINDOWSxSECONDS, comma-separated")
    gather.add_argument("--blocks", type=int, default=8, help="blocks per configuration and design")
    gather.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    read = commands.add_parser("judge", help="what each design resolves")
    read.add_argument("csv", type=Path, nargs="+")
    read.add_argument("--budget-s", type=float, default=40.0, help="the time of blocks to judge each design within")
    args = parser.parse_args()
    if args.command == "collect":
        return collect(args.out, designs_of(args.designs), args.blocks, args.frameworks.split(","))
    return judge(args.csv, args.budget_s)


if __name__ == "__main__":
    sys.exit(main())

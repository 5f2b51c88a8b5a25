"""Verdict designs side by side on the same real A/A runs: each comparison starts two fresh instances of one runner,
runs them in counterbalanced rounds (A B, B A, ...) or side by side, and every analysis judges those runs: today's
unpaired Welch test and the paired test by round, each with a fixed number of runs and under the sequential design
(replayed look by look over the runs in the order they ran). A planted difference (b's run medians times --plant, the
same real noise with a known ratio) shows each design's power.

    # collect: 5 CPU configurations per framework, 3 fresh pairs each, 8 rounds (30 A/A comparisons)
    .venvs/aggregator/bin/python studies/design_aa.py collect --out results/design-aa.csv
    # the same, side by side (duet: both runs of a round at once, each instance on half the cores), swapping cores
    .venvs/aggregator/bin/python studies/design_aa.py collect --duet --swap-cores --out results/duet.csv
    # short windows on builds kept warm
    .venvs/aggregator/bin/python studies/design_aa.py collect --min-measure-s 0.25 --reuse-builds --out results/w.csv
    # on a shared host: another tenant busy in random bursts on one core beside the runs
    .venvs/aggregator/bin/python studies/design_aa.py collect --neighbour --out results/neighbour.csv
    # interleaved process blocks (plan.design, compare's --design blocks): one row per block, its values per instance
    .venvs/aggregator/bin/python studies/design_aa.py collect --blocks --out results/blocks.csv
    # judge what was collected (reads the CSVs only; no runner needed), each collection design apart
    .venvs/aggregator/bin/python studies/design_aa.py judge results/*.csv
    # the runs studies/evidence.md's first table was measured on
    .venvs/aggregator/bin/python studies/design_aa.py judge studies/data/design-aa-2026-11-28/*.csv

The CSV holds one row per round: the configuration, the framework, the pair (fresh instances), the round, both
instances' run medians and the CPU other processes kept busy over each run (a covariate, judged by CUPED where a
collection recorded it), so that a new design can be judged later on the same runs. A block design's row is a block:
each instance's value there (the geometric mean of its windows' medians), its covariate the mean over its windows, and
the processes it sampled.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np
from design_judge import judge

from fwbench_aggregator.analyse import stats
from fwbench_aggregator.analyse.sequential import DEFAULT_MAX_BLOCKS, DEFAULT_MAX_RUNS
from fwbench_aggregator.app.blocks import block_values, run_blocks
from fwbench_aggregator.app.calibrate import run_medians_by_runner
from fwbench_aggregator.app.medians import medians_by_runner
from fwbench_aggregator.app.rounds import Repetitions
from fwbench_aggregator.base.vocabulary import Mode
from fwbench_aggregator.plan import spec as plan
from fwbench_aggregator.plan.design import BlockDesign
from fwbench_aggregator.plan.spec import StartupSettings
from fwbench_aggregator.run import jobs, wire
from fwbench_aggregator.run.connection import EMBEDDED
from fwbench_aggregator.run.launch import default_venvs
from fwbench_aggregator.run.runners import start_embedded

# Small CPU configurations of different kinds (convolutional and recurrent, inference and training), each on both
# frameworks: (model, mode, batch size, shape).
GRID = (
    ("resnet18", "infer", 8, "3x64x64"),
    ("mobilenet_v2", "infer", 2, "3x64x64"),
    ("resnet18", "train", 2, "3x32x32"),
    ("lstm_lm", "infer", 8, None),
    ("efficientnet_b0", "infer", 1, "3x64x64"),
)
FRAMEWORKS = ("torch", "tensorflow")
COLUMNS = (
    "framework",
    "run_isolation",
    "design",
    "model",
    "mode",
    "batch_size",
    "shape",
    "pair",
    "round",
    "a_s",
    "b_s",
    "pair_wall_s",
    "rounds_wall_s",
    "a_other_cpu_cores",
    "b_other_cpu_cores",
)


NEIGHBOUR = """
import random, time
rng = random.Random(0)
while True:
    busy_until = time.perf_counter() + rng.uniform(0.2, 3.0)
    while time.perf_counter() < busy_until:
        pass
    time.sleep(rng.uniform(0.2, 4.0))
"""


def neighbour() -> subprocess.Popen:
    """Another tenant: one core busy in bursts of 0.2-3 s with idle gaps of 0.2-4 s (seeded), the kind of load a
    shared host gives and the runner's device state reads as other processes' CPU."""
    return subprocess.Popen([sys.executable, "-c", NEIGHBOUR])


def listening_pid(address: str) -> int:
    """The process listening on a loopback address (an embedded runner), from `ss`."""
    port = address.rpartition(":")[2]
    listing = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"pid=(\d+)", listing).group(1))


def pin(pid: int, core: int) -> None:
    """Every thread of a process onto one core; threads it starts later inherit it from their creator."""
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(thread), {core})
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


def side_by_side(
    twins: dict[str, str], request, rounds: int, swap_cores: bool
) -> tuple[list, dict[str, list[float]], list]:
    """Each round's two runs at the same time, one per instance (duet): the host's moment is common to both. With
    `swap_cores` each instance is pinned to one core, and the two swap cores every round, so that a core's own offset
    (another tenant on its hyperthread) is counterbalanced like the order of runs in rounds."""
    medians: dict[str, list[float]] = {name: [] for name in twins}
    runs = []
    pids = {name: listening_pid(address) for name, address in twins.items()} if swap_cores else {}
    with ThreadPoolExecutor(len(twins)) as pool:
        for number in range(rounds):
            for place, name in enumerate(pids):
                pin(pids[name], (place + number) % 2)
            done = list(
                pool.map(
                    lambda name, number=number: jobs.run_job(name, twins[name], EMBEDDED, request, repetition=number),
                    twins,
                )
            )
            runs += done
            for name, values in medians_by_runner(done).items():
                medians[name] += values
    return runs, medians, []


def in_blocks(
    twins: dict[str, str], request, design: BlockDesign, count: int, prefix: str
) -> tuple[list, dict[str, list[float]], list, dict[str, list[float]]]:
    """`count` interleaved process blocks, as compare --design blocks runs them (app.blocks): each instance's value per
    block (the geometric mean of its windows' medians) and its covariate there (the mean over its windows)."""
    done = run_blocks(
        twins,
        {name: request for name in twins},
        EMBEDDED,
        design,
        Repetitions(fixed=count),
        prefix,
        None,
        stats.MIN_EFFECT,
    )
    other: dict[str, list[float]] = {name: [] for name in twins}
    for name in twins:
        windows = [r for r in done.results if r.runner == name]
        for block in dict.fromkeys(r.block.block for r in windows):
            mine = [r for r in windows if r.block.block == block]
            other[name].append(float(np.mean(other_cpu_by_runner(mine)[name])))
    return done.results, {name: [] for name in twins} | block_values(done.results), done.failures, other


def collect(
    out: Path,
    pairs: int,
    rounds: int,
    frameworks: list[str],
    run_isolation: str,
    duet: bool,
    min_measure_s: float,
    reuse_builds: bool,
    swap_cores: bool,
    first_pair: int,
    with_neighbour: bool,
    blocks: BlockDesign | None,
    grid=GRID,
) -> int:
    cores = os.cpu_count() or 1
    # Side by side, each instance gets half the cores; one after the other, all of them (the runners' default).
    threads = max(cores // 2, 1) if duet else cores
    startup = StartupSettings(run_isolation=run_isolation, intra_op_threads=threads, inter_op_threads=threads)
    if blocks:
        design = f"{blocks.label} of {blocks.window_s:g}s"
    else:
        design = (
            f"{'duet' if duet else 'rounds'}{' swapping cores' if swap_cores else ''} {min_measure_s:g}s"
            f"{' reused' if reuse_builds else ''}"
        )
    design += " neighbour" if with_neighbour else ""

    def measure(twins: dict[str, str], request, prefix: str):
        if blocks:
            return in_blocks(twins, request, blocks, rounds, prefix)
        results, medians, failures = (
            side_by_side(twins, request, rounds, swap_cores)
            if duet
            else run_medians_by_runner(twins, EMBEDDED, request, rounds)
        )
        return results, medians, failures, other_cpu_by_runner(results)

    out.parent.mkdir(parents=True, exist_ok=True)
    tenant = neighbour() if with_neighbour else None
    try:
        return _collect(
            out,
            pairs,
            frameworks,
            run_isolation,
            reuse_builds,
            first_pair,
            startup,
            design,
            min_measure_s,
            measure,
            grid,
        )
    finally:
        if tenant is not None:
            tenant.kill()


def _collect(
    out: Path,
    pairs: int,
    frameworks: list[str],
    run_isolation: str,
    reuse_builds: bool,
    first_pair: int,
    startup: StartupSettings,
    design: str,
    min_measure_s: float,
    measure,
    grid,
) -> int:
    fresh = not out.exists()
    with out.open("a", newline="") as handle:
        writer = csv.writer(handle)
        if fresh:
            writer.writerow(COLUMNS)
        for pair in range(first_pair, first_pair + pairs):
            for framework in frameworks:
                for model, mode, batch, shape in grid:
                    # Reused: every run of an instance steps the one build its first run made, warm.
                    request = wire.to_request(
                        plan.RunSpec(
                            model,
                            Mode(mode),
                            batch,
                            shape,
                            device="cpu",
                            startup=startup,
                            min_measure_s=min_measure_s,
                            reuse_key="design-aa" if reuse_builds else "",
                        )
                    )
                    began = time.perf_counter()
                    with ExitStack() as stack, TemporaryDirectory() as logs:
                        first, failed = start_embedded([framework], default_venvs(), Path(logs) / "a", stack, startup)
                        second, more = start_embedded([framework], default_venvs(), Path(logs) / "b", stack, startup)
                        if failed or more:
                            print(*(f.message for f in failed + more), sep="\n", file=sys.stderr)
                            return 1
                        twins = {"a": first[framework], "b": second[framework]}
                        measuring = time.perf_counter()
                        results, medians, failures, other = measure(
                            twins, request, f"aa-{pair}-{framework}-{model}-{mode}"
                        )
                    if failures:
                        print(f"{framework} {model} {mode}: {failures[0].message[:120]}", file=sys.stderr)
                        continue
                    wall_s, rounds_wall_s = time.perf_counter() - began, time.perf_counter() - measuring
                    for number, (a_s, b_s) in enumerate(zip(medians["a"], medians["b"])):
                        writer.writerow(
                            (
                                framework,
                                run_isolation,
                                design,
                                model,
                                mode,
                                batch,
                                shape or "",
                                pair,
                                number,
                                a_s,
                                b_s,
                                f"{wall_s:.1f}",
                                f"{rounds_wall_s:.1f}",
                                other["a"][number],
                                other["b"][number],
                            )
                        )
                    handle.flush()
                    print(
                        f"{design} pair {pair} {framework:<10} {model:<15} {mode:<5} b{batch}: {wall_s:5.0f} s "
                        f"({rounds_wall_s:.0f} s of rounds), a/b "
                        + " ".join(f"{a / b:.3f}" for a, b in zip(medians["a"], medians["b"])),
                        flush=True,
                    )
    return 0


def other_cpu_by_runner(results) -> dict[str, list[float]]:
    """Each instance's covariate per run, in repetition order: the CPU other processes kept busy over the run (in
    cores; on a VM the hypervisor's steal time counts), as the runner's device state read it; NaN where unread."""
    by_runner: dict[str, list[float]] = {}
    for result in sorted(results, key=lambda r: r.repetition):
        after = result.summary.device_after
        by_runner.setdefault(result.runner, []).append(
            after.other_cpu_busy_cores if after.HasField("other_cpu_busy_cores") else math.nan
        )
    return by_runner


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    gather = commands.add_parser("collect", help="run the A/A comparisons and append their rounds to a CSV")
    gather.add_argument("--out", type=Path, default=Path("results/design-aa.csv"))
    gather.add_argument("--pairs", type=int, default=3, help="fresh pairs of instances per configuration")
    gather.add_argument("--rounds", type=int, default=8)
    gather.add_argument("--first-pair", type=int, default=0, help="the first pair's number, to add pairs to a CSV")
    gather.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    gather.add_argument(
        "--configurations", default="", help="MODEL:MODE,... of the grid to collect (default: all five)"
    )
    gather.add_argument(
        "--run-isolation",
        default="",
        choices=("", *(i.value for i in plan.RunIsolation)),
        help="each runner's --run-isolation: 'process' runs every run in a fresh worker process, so "
        "that a process's offset is sampled by every run, 'process-per-2-runs' every 2 runs; "
        "default: the runner's own",
    )
    gather.add_argument(
        "--duet",
        action="store_true",
        help="run each round's two runs at the same time, each instance on half the cores",
    )
    gather.add_argument(
        "--swap-cores",
        action="store_true",
        help="with --duet: pin each instance to one core, swapping cores every round (needs 2 cores)",
    )
    gather.add_argument(
        "--min-measure-s", type=float, default=plan.DEFAULT_MIN_MEASURE_S, help="each run's shortest measured window"
    )
    gather.add_argument(
        "--reuse-builds", action="store_true", help="every run of an instance steps one build, kept warm between runs"
    )
    gather.add_argument(
        "--neighbour",
        action="store_true",
        help="another tenant beside the runs: one core busy in random bursts (a shared host)",
    )
    gather.add_argument(
        "--blocks",
        action="store_true",
        help="interleaved process blocks (compare --design blocks): --rounds blocks per comparison",
    )
    gather.add_argument("--block-windows", type=int, default=BlockDesign().windows, help="windows per runner a block")
    gather.add_argument("--window-s", type=float, default=BlockDesign().window_s, help="each window's shortest")
    read = commands.add_parser("judge", help="judge collected runs under every design")
    read.add_argument("csv", type=Path, nargs="+")
    read.add_argument("--plant", type=float, default=1.10, help="b's run medians times this: a known difference")
    read.add_argument("--fixed-runs", default="6,8", help="the fixed designs' runs per instance, comma-separated")
    read.add_argument(
        "--max-repetitions",
        type=int,
        default=None,
        help="the sequential design's budget (its looks and their levels); default: compare's, "
        f"{DEFAULT_MAX_RUNS} runs in rounds, {DEFAULT_MAX_BLOCKS} blocks",
    )
    args = parser.parse_args()
    if args.command == "collect" and args.swap_cores and not args.duet:
        parser.error("--swap-cores pins the two instances of a duet: give --duet too")
    if args.command == "collect":
        blocks = BlockDesign(args.block_windows, args.window_s) if args.blocks else None
        chosen = set(args.configurations.split(",")) if args.configurations else None
        grid = [row for row in GRID if chosen is None or f"{row[0]}:{row[1]}" in chosen]
        if not grid:
            parser.error(
                f"--configurations: none of {args.configurations!r} is in the grid; accepted: "
                + ", ".join(f"{model}:{mode}" for model, mode, *_ in GRID)
            )
        return collect(
            args.out,
            args.pairs,
            args.rounds,
            args.frameworks.split(","),
            args.run_isolation,
            args.duet,
            args.min_measure_s,
            args.reuse_builds,
            args.swap_cores,
            args.first_pair,
            args.neighbour,
            blocks,
            grid,
        )
    return judge(args.csv, args.plant, [int(n) for n in args.fixed_runs.split(",")], args.max_repetitions)


if __name__ == "__main__":
    sys.exit(main())

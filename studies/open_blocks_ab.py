"""OpenBlock against workers started in their first window, side by side in one sitting: for each configuration and
pair, two fresh A/A instances of one runner measure 8 blocks with every runner's block worker opened at once
(app.blocks.open_blocks) and, in turn (ABBA by pair), with each worker started in its runner's first window as before;
prints each comparison's spread of block log ratios, its order effect (the first-built runner's excess) and its wall
time, then their medians by variant.

    .venvs/aggregator/bin/python studies/open_blocks_ab.py --pairs 2 --out results/open_ab.csv
    .venvs/aggregator/bin/python studies/open_blocks_ab.py --judge studies/data/design-aa-2026-12-01-evening/open_ab.csv
"""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np
import pandas as pd

from fwbench_aggregator.analyse import stats
from fwbench_aggregator.app import blocks
from fwbench_aggregator.app.rounds import Repetitions
from fwbench_aggregator.base.vocabulary import Mode
from fwbench_aggregator.plan import spec as plan
from fwbench_aggregator.plan.design import BlockDesign
from fwbench_aggregator.run import wire
from fwbench_aggregator.run.connection import EMBEDDED
from fwbench_aggregator.run.launch import default_venvs
from fwbench_aggregator.run.runners import start_embedded

GRID = [
    ("torch", "mobilenet_v2", "infer", 2, "3x64x64"),
    ("tensorflow", "efficientnet_b0", "infer", 1, "3x64x64"),
    ("torch", "resnet18", "infer", 8, "3x64x64"),
    ("tensorflow", "resnet18", "infer", 8, "3x64x64"),
]
BLOCKS = 8
OPENING = {"open": blocks.open_blocks, "first window": lambda endpoints, transport, block: []}


def collect(pairs: int, out: Path) -> None:
    rows = []
    for pair in range(pairs):
        for framework, model, mode, batch, shape in GRID:
            request = wire.to_request(plan.RunSpec(model, Mode(mode), batch, shape, device="cpu"))
            for variant in list(OPENING) if pair % 2 == 0 else list(reversed(OPENING)):
                blocks.open_blocks = OPENING[variant]
                with ExitStack() as stack, TemporaryDirectory() as logs:
                    first, _ = start_embedded([framework], default_venvs(), Path(logs) / "a", stack)
                    second, _ = start_embedded([framework], default_venvs(), Path(logs) / "b", stack)
                    twins = {"a": first[framework], "b": second[framework]}
                    began = time.perf_counter()
                    done = blocks.run_blocks(
                        twins,
                        {name: request for name in twins},
                        EMBEDDED,
                        BlockDesign(),
                        Repetitions(fixed=BLOCKS),
                        f"{framework}-{model}",
                        None,
                        stats.MIN_EFFECT,
                    )
                    wall_s = time.perf_counter() - began
                values = blocks.block_values(done.results)
                for block, (a_s, b_s) in enumerate(zip(values["a"], values["b"])):
                    rows.append(
                        dict(
                            variant=variant,
                            framework=framework,
                            model=model,
                            pair=pair,
                            block=block,
                            a_s=a_s,
                            b_s=b_s,
                            wall_s=round(wall_s, 1),
                        )
                    )
                pd.DataFrame(rows).to_csv(out, index=False)
                print(variant, framework, model, pair, f"{wall_s:.1f} s", flush=True)
    blocks.open_blocks = OPENING["open"]


def judge(path: Path) -> None:
    frame = pd.read_csv(path)
    frame["log_ratio"] = np.log(frame["a_s"] / frame["b_s"])
    # a builds first in even blocks (app.blocks.window_order): its excess there, b's in odd ones.
    frame["first_slower"] = np.where(frame["block"] % 2 == 0, frame["log_ratio"], -frame["log_ratio"])
    by = frame.groupby(["variant", "framework", "model", "pair"])
    table = pd.DataFrame(
        {
            "block spread %": by["log_ratio"].std() * 100,
            "order effect %": by["first_slower"].mean() * 100,
            "wall s": by["wall_s"].first(),
        }
    )
    print(table.round(2).to_string())
    print("\nmedians by variant")
    print(table.groupby("variant").median().round(2).to_string())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("results/open_ab.csv"))
    parser.add_argument("--judge", type=Path, help="judge a collected CSV instead of collecting")
    args = parser.parse_args()
    if args.judge:
        judge(args.judge)
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    collect(args.pairs, args.out)
    judge(args.out)


if __name__ == "__main__":
    main()

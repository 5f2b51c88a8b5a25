"""Which sequential design spends its looks best on this host's noise: each variant (where it looks, how it spends the
1%, its run budget) simulated over A/A and planted-difference comparisons resampled from stored real A/A runs.

The noise comes from real runs, not a formula: studies/data/design-aa-2026-11-28/rounds.csv holds 30 A/A
comparisons of freshly started runner pairs made in rounds on a 2-core VM (10 configurations, 3 pairs each, 8 rounds).
A simulated comparison takes one stored pair's rounds, each instance's log run medians less their median (its own
level removed, the host's moments kept, both runs of a round together, either of them a's at random), and strings
blocks of two consecutive rounds drawn at random into as many rounds as the budget needs, so that drift slower than a
round and outlier runs come along as they were measured. It then gives the two instances an offset of their own,
drawn from the spread that fresh pairs of that configuration showed beyond their rounds' noise
(design_judge.process_offsets): a process's offset is what an A/A comparison of one pair of processes cannot tell from a
difference: once per instance, afresh every few rounds (a worker process kept for a block), or afresh every run. A
difference is planted by multiplying b's runs. `--paired` judges every comparison with the paired test, column by
column (a round's two runs, or a block's two values: design_aa.py collect --blocks), as compare --design blocks does.

    .venvs/aggregator/bin/python studies/spending_study.py [--procedures 20000] [--seed 1]
    .venvs/aggregator/bin/python studies/spending_study.py --runs studies/data/design-aa-2026-11-29/rounds-thread-afternoon.csv \
        --offsets none,"per 2 rounds" --planted 1.1,1.5
    .venvs/aggregator/bin/python studies/spending_study.py --runs studies/data/design-aa-2026-12-01/blocks.csv \
        --paired --offsets none,"per instance"
    .venvs/aggregator/bin/python studies/spending_study.py --paired --offsets none \
        --runs studies/data/design-aa-2026-12-01*/blocks.csv

--control replaces every stored value by an independent log-normal one of its configuration's spread, keeping its pairs
and blocks: on such values a t-test holds its level exactly, so what a variant calls beyond that there is what
resampling so few stored pairs does by itself (each configuration's few stored blocks are one small sample, and the
worst of 30 such worlds lies above the level by chance).

Several --runs files are several sittings: each sitting's configurations are noise models of their own (a
configuration's pairs are strung only from its own sitting's blocks), and every variant is judged over all of them,
so a schedule is chosen on every host state measured, not on the one that happened to be last.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from design_judge import process_offsets, read_sittings

from fwbench_aggregator.analyse import sequential

STORED_RUNS = Path(__file__).resolve().parent / "data" / "design-aa-2026-11-28" / "rounds.csv"
CONFIG_KEYS = ["framework", "model", "mode", "batch_size", "shape"]
BLOCK_ROUNDS = 2
PLANTED = (1.05, 1.10)


@dataclass(frozen=True)
class ConfigNoise:
    """One configuration's stored noise: each pair's rounds as (round, instance) log residuals, and the spread of a
    fresh pair's offset."""

    name: str
    pairs: list[np.ndarray]
    offset_sd: float


def noise_model(frame: pd.DataFrame, keys: list[str] = CONFIG_KEYS) -> list[ConfigNoise]:
    offsets = dict(process_offsets(frame, keys))
    model = []
    for key, runs in frame.groupby(keys, sort=False):
        name = " ".join(str(k) for k in key)
        pairs = []
        for _, pair in runs.groupby("pair"):
            logs = np.log(pair.sort_values("round")[["a_s", "b_s"]].to_numpy(float))
            # Less its median, not its mean: a mean moved by one outlier run would leave every other run of that
            # instance off centre, a difference between the two that a resample without the outlier calls real.
            pairs.append(logs - np.median(logs, axis=0))
        model.append(ConfigNoise(name, pairs, offsets.get(name, 0.0)))
    return model


def independent_control(frame: pd.DataFrame, keys: list[str], seed: int) -> pd.DataFrame:
    """The stored frame with every a_s and b_s replaced by independent log-normal values of its configuration's
    spread (each instance's: the spread of its blocks' log ratios over sqrt 2), its pairs and rounds kept."""
    rng = np.random.default_rng(seed)
    parts = []
    for _, runs in frame.groupby(keys, sort=False):
        spread = float(np.std(np.log(runs["b_s"] / runs["a_s"]), ddof=1)) / math.sqrt(2)
        parts.append(runs.assign(**dict(zip(["a_s", "b_s"], np.exp(rng.normal(0.0, spread, (2, len(runs))))))))
    return pd.concat(parts, ignore_index=True)


# Where a process's offset falls: nowhere (the runs' own noise only), once per instance for all its runs (today's
# runners keep one process: thread isolation), afresh for every block of a few rounds (a worker process kept for a
# block), or afresh for every run (a fresh worker process per run).
PER_BLOCK = {"per 4 rounds": 4, "per 2 rounds": 2, "per run": 1}
OFFSETS = ("none", "per instance", *PER_BLOCK)


def draw(
    config: ConfigNoise, rng: np.random.Generator, procedures: int, rounds: int, offsets: str
) -> tuple[np.ndarray, np.ndarray]:
    """`procedures` comparisons of `rounds` rounds on this configuration's noise, as log run medians of a and b."""
    blocks = math.ceil(rounds / BLOCK_ROUNDS)
    a, b = np.empty((procedures, rounds)), np.empty((procedures, rounds))
    which = rng.integers(len(config.pairs), size=procedures)
    for index, pair in enumerate(config.pairs):
        mine = np.flatnonzero(which == index)
        starts = rng.integers(pair.shape[0] - BLOCK_ROUNDS + 1, size=(mine.size, blocks))
        picked = (starts[:, :, None] + np.arange(BLOCK_ROUNDS)).reshape(mine.size, -1)[:, :rounds]
        # Either instance's run of a round may be a's: the two are the same code, so a run's luck (an outlier, an
        # instance's own drift) may fall on either. What an instance keeps for all its runs is the offset below.
        columns = (rng.random(picked.shape) < 0.5).astype(int)
        a[mine] = pair[picked, columns]
        b[mine] = pair[picked, 1 - columns]
    if offsets == "per instance":
        b += rng.normal(0.0, config.offset_sd, size=(procedures, 1))
    elif offsets in PER_BLOCK:
        # offset_sd is the spread of two processes' difference: each process's own is 1/sqrt(2) of it. A process
        # serves PER_BLOCK[offsets] rounds, then a fresh one takes over with an offset of its own.
        length = PER_BLOCK[offsets]
        for runs in (a, b):
            drawn = rng.normal(0.0, config.offset_sd / math.sqrt(2), size=(procedures, math.ceil(rounds / length)))
            runs += np.repeat(drawn, length, axis=1)[:, :rounds]
    return a, b


@dataclass(frozen=True)
class Variant:
    name: str
    plan: sequential.SequentialPlan


def variants() -> list[Variant]:
    plan = sequential.SequentialPlan
    found = [Variant(f"fixed {n}", plan(max_runs=n, looks=(n,))) for n in (6, 8, 10)]
    # A first look at 4 or 5 runs a side: three runs cannot show a slow mode they did not sample.
    found += [Variant(f"max 20, looks every round from {first}, Pocock type", plan(min_runs=first)) for first in (4, 5)]
    schedules = {
        20: [(), (3, 6, 10, 20)],
        12: [(), (3, 6, 12), (4, 8, 12), (6, 12)],
        10: [(), (3, 6, 10), (4, 10), (5, 10)],
        8: [(), (3, 5, 8), (4, 8)],
        6: [(3, 6)],
    }
    for budget, looks_list in schedules.items():
        for looks in looks_list:
            for gamma in (None, -4.0):
                spending = "Pocock type" if gamma is None else f"HSD {gamma:+g}"
                where = "every round" if not looks else ",".join(map(str, looks))
                found.append(
                    Variant(
                        f"max {budget}, looks {where}, {spending}",
                        plan(max_runs=budget, looks=looks, spending_gamma=gamma),
                    )
                )
    return found


def study(
    model: list[ConfigNoise],
    variant: Variant,
    procedures: int,
    seed: int,
    offsets: str,
    planted: tuple[float, ...] = PLANTED,
    paired: bool = False,
) -> dict:
    """One variant over every configuration alike: A/A and each planted ratio on the same draws, judged by Welch's
    test or, `paired`, by the paired test on each column's two values."""
    rounds = variant.plan.max_runs
    row: dict = {"offsets": offsets, "variant": variant.name}
    per_config = procedures // len(model)
    wrong_by_config, aa_runs, aa_resolves, aa_equivalent = [], [], [], []
    found = {ratio: [] for ratio in planted}
    found_runs = {ratio: [] for ratio in planted}
    for index, config in enumerate(model):
        rng = np.random.default_rng([seed, index])
        log_a, log_b = draw(config, rng, per_config, rounds, offsets)
        a, b = np.exp(log_a), np.exp(log_b)
        outcome, runs, _, resolvable = sequential.simulate(variant.plan, a, b, paired)
        wrong_by_config.append(float(np.mean(outcome == "different")))
        aa_runs.append(runs)
        aa_resolves.append(resolvable)
        aa_equivalent.append(outcome == "equivalent")
        for ratio in planted:
            outcome, runs, seen, _ = sequential.simulate(variant.plan, a, b * ratio, paired)
            found[ratio].append((outcome == "different") & (seen > 1.0))
            found_runs[ratio].append(runs)
    row["A/A wrong"] = float(np.mean(wrong_by_config))
    row["worst config"] = max(wrong_by_config)
    row["A/A equivalent"] = float(np.mean(np.concatenate(aa_equivalent)))
    row["A/A resolves (median)"] = float(np.median(np.concatenate(aa_resolves)))
    row["A/A runs (mean)"] = float(np.mean(np.concatenate(aa_runs)))
    for ratio in planted:
        row[f"{ratio - 1:.0%} found"] = float(np.mean(np.concatenate(found[ratio])))
        row[f"{ratio - 1:.0%} runs (mean)"] = float(np.mean(np.concatenate(found_runs[ratio])))
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs",
        type=Path,
        nargs="+",
        default=[STORED_RUNS],
        help="stored A/A rounds or blocks (design_aa.py collect); several files are several sittings",
    )
    parser.add_argument("--procedures", type=int, default=20_000, help="simulated comparisons per variant")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--offsets",
        default=",".join(OFFSETS),
        help=f"where processes' offsets fall, comma-separated: {', '.join(OFFSETS)}",
    )
    parser.add_argument(
        "--planted",
        default=",".join(f"{p:g}" for p in PLANTED),
        help="b's runs times each of these, comma-separated ratios above 1: the differences each "
        "variant should find, and how many runs it takes",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="independent log-normal values of each configuration's spread instead of the stored ones: "
        "what the resampling does by itself",
    )
    parser.add_argument(
        "--paired",
        action="store_true",
        help="judge by the paired test on each round's (or block's) two values, not Welch's",
    )
    args = parser.parse_args()
    planted = tuple(float(p) for p in args.planted.split(",") if re.fullmatch(r"\d+(\.\d*)?", p) and float(p) > 1)
    if len(planted) != len(args.planted.split(",")):
        parser.error(f"--planted {args.planted!r}: accepted: comma-separated ratios above 1, e.g. 1.05,1.5")
    offsets = args.offsets.split(",")
    unknown = sorted(set(offsets) - set(OFFSETS))
    if unknown:
        parser.error(f"--offsets: unknown {', '.join(unknown)}; accepted: {', '.join(OFFSETS)}")
    frame = read_sittings(args.runs)
    keys = ["sitting", *CONFIG_KEYS] if frame["sitting"].nunique() > 1 else CONFIG_KEYS
    if args.control:
        frame = independent_control(frame, keys, args.seed)
    model = noise_model(frame, keys)
    print(
        f"noise: {len(model)} configurations from {', '.join(str(path) for path in args.runs)}"
        f"{' (control: independent log-normal values of their spreads)' if args.control else ''}; process offsets' spread (two processes' "
        f"difference) median {np.median([c.offset_sd for c in model]):.1%}, largest "
        f"{max(c.offset_sd for c in model):.1%}; {args.procedures} procedures per variant, planted "
        + ", ".join(f"{p - 1:.0%}" for p in planted)
        + f"; judged {'paired' if args.paired else 'by Welch'}"
    )
    table = pd.DataFrame(
        [
            study(model, v, args.procedures, args.seed, where, planted, args.paired)
            for where in offsets
            for v in variants()
        ]
    )
    percent = [c for c in table if c.endswith(("wrong", "config", "equivalent", "found", "(median)"))]
    shown = table.copy()
    for column in percent:
        shown[column] = shown[column].map(
            lambda v, column=column: f"{v:.2%}" if "wrong" in column or "config" in column else f"{v:.1%}"
        )
    for column in [c for c in table if c.endswith("(mean)")]:
        shown[column] = shown[column].map(lambda v: f"{v:.1f}")
    with pd.option_context("display.width", 250, "display.max_columns", None, "display.max_rows", None):
        print(shown.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

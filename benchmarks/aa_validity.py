"""A/A validity: two instances of ONE runner, compared over a grid, where the right verdict is always
"no significant difference". Prints, per configuration, both instances' times, the ratio and its interval,
the smallest difference the runs resolve, the noise floor a calibration round measured, and whether the
verdict was wrong; then the share of wrong verdicts, with and without the noise floor.

Each configuration runs two rounds, each in counterbalanced order (A B B A ...): a calibration round
gives the noise floor as `fwbench calibrate` does, and a second, independent round gives the verdict as
`fwbench compare` would with that floor stored: a fixed number of runs (--repetitions N), or under
--repetitions auto as many as the sequential design needs (analyse.sequential: a look after every round, within
--max-repetitions; its calibration round takes the fixed design's default number). --compare-designs runs both
verdict rounds on every configuration and prints, for each design, the wrong verdicts, the median runs used and
the smallest difference resolved, side by side.

    # CPU (the embedded runners; starts two instances of --framework):
    .venvs/aggregator/bin/python benchmarks/aa_validity.py --grid cpu
    # As a sweep runs them: each instance's batch sizes of one repetition one after the other, sharing one build
    .venvs/aggregator/bin/python benchmarks/aa_validity.py --grid cpu --sweep-order --reuse-builds
    # Under the native profile (each framework's own layout: PyTorch channels_first)
    .venvs/aggregator/bin/python benchmarks/aa_validity.py --grid cpu --profile native
    # Another execution mode: TorchScript, or ONNX Runtime (inference)
    .venvs/aggregator/bin/python benchmarks/aa_validity.py --grid cpu --compilation onnxruntime
    # A model of your own (a plug-in folder, docs/your-model.md), at its default shape unless --shape says
    .venvs/aggregator/bin/python benchmarks/aa_validity.py --grid cpu --models-dir examples/models --models tiny_cnn
    # A distributed run against itself: two DDP workers per instance
    .venvs/aggregator/bin/python benchmarks/aa_validity.py --grid cpu --devices cpu:0,cpu:1 --strategy ddp
    # The sequential design against the fixed one, on the same configurations
    .venvs/aggregator/bin/python benchmarks/aa_validity.py --grid cpu --compare-designs --repetitions 6
    # GPU (two runners already running, e.g. ../shared/gpu/on_gpu.sh starts a and b):
    python benchmarks/aa_validity.py --grid gpu --runner a=127.0.0.1:50051 --runner b=127.0.0.1:50052
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import NamedTuple

import numpy as np
from fwbench.runner.v1 import runner_pb2 as pb
from scipy.stats import mannwhitneyu

from fwbench_aggregator.analyse import stats
from fwbench_aggregator.analyse.sequential import DEFAULT_MAX_RUNS, Decision, SequentialPlan, look
from fwbench_aggregator.app.calibrate import run_medians_by_runner
from fwbench_aggregator.app.medians import medians_by_runner
from fwbench_aggregator.base.vocabulary import Compilation, Mode, Precision, Profile, Strategy
from fwbench_aggregator.plan import spec as plan
from fwbench_aggregator.plan.spec import DEFAULT_REPETITIONS, StartupSettings
from fwbench_aggregator.plan.study import AUTO, counterbalanced
from fwbench_aggregator.run import jobs, wire
from fwbench_aggregator.run.client import RunnerFailure, RunResult
from fwbench_aggregator.run.connection import EMBEDDED
from fwbench_aggregator.run.execute import run_all
from fwbench_aggregator.run.launch import default_venvs
from fwbench_aggregator.run.runners import start_embedded
from fwbench_aggregator.store import records as results

GRIDS = {
    # The configurations where pooled-step statistics went wrong on an H100 (launch-bound small batches
    # as well as GPU-bound large ones), in both precisions.
    "gpu": {
        "models": "resnet50,bert_base",
        "batch_sizes": "1,4,16,64,256",
        "precisions": "fp32,amp_bf16",
        "shapes": {"resnet50": None, "bert_base": "seq=128"},
        "device": "gpu",
    },
    # Small enough for a 2-core machine: the small CPU configurations that were called different.
    "cpu": {
        "models": "resnet18,mobilenet_v2",
        "batch_sizes": "1,2,8",
        "precisions": "fp32",
        "shapes": {"resnet18": "3x64x64", "mobilenet_v2": "3x64x64"},
        "device": "cpu",
    },
}


def pooled_steps_says_different(steps) -> bool:
    """The statistic this project used before runs became the unit, on the same steps: every measured step of
    every run pooled as independent samples, a Mann-Whitney U test at p < 0.01 and a ratio of medians past 2%."""
    measured = steps[~steps["warmup"]].groupby("runner")["step_time_s"]
    a, b = measured.get_group("a").to_numpy(), measured.get_group("b").to_numpy()
    ratio = max(np.median(a), np.median(b)) / min(np.median(a), np.median(b))
    return bool(mannwhitneyu(a, b).pvalue < 0.01 and ratio > 1 + stats.MIN_EFFECT)


Round = tuple[dict[str, list[float]], list[RunResult]]  # each instance's run medians, and the runs


def sweep_round(
    twins: dict[str, str], requests: dict[int, pb.RunRequest], repetitions: int, reuse_builds: bool
) -> tuple[dict[int, Round], list[RunnerFailure]]:
    """One round in a sweep's order: the instances counterbalanced over repetitions (A B B A ...), each
    repetition's batch sizes one after the other; with `reuse_builds` they share one build (a chain), which no
    other repetition shares. Per batch size: each instance's run medians and the runs."""
    runs: dict[int, list[RunResult]] = {batch: [] for batch in requests}
    session = uuid.uuid4().hex[:8]
    for repetition, name in counterbalanced(list(twins), repetitions):
        for number, (batch, request) in enumerate(requests.items()):
            if reuse_builds:
                request = pb.RunRequest(
                    reuse_key=f"{session}-{name}-{repetition}", end_reuse=number == len(requests) - 1
                )
                request.MergeFrom(requests[batch])
            try:
                runs[batch].append(jobs.run_job(name, twins[name], EMBEDDED, request, repetition=repetition))
            except RunnerFailure as failure:
                return {}, [failure]
    return {batch: (medians_by_runner(done), done) for batch, done in runs.items()}, []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=GRIDS, default="cpu")
    parser.add_argument(
        "--runner", action="append", default=[], help="NAME=HOST:PORT, twice: two instances of one runner"
    )
    parser.add_argument("--framework", default="torch", help="embedded runner to start twice when no --runner is given")
    parser.add_argument("--models", help="comma-separated; default: the grid's")
    parser.add_argument(
        "--models-dir",
        action="append",
        default=[],
        help="a folder of model plug-ins the embedded runners load (repeatable)",
    )
    parser.add_argument(
        "--shape", help="every model's input shape; default: the grid's for its models, else the model's"
    )
    parser.add_argument("--batch-sizes", help="comma-separated; default: the grid's")
    parser.add_argument("--precisions", help="comma-separated; default: the grid's")
    parser.add_argument("--mode", default="infer", choices=("train", "infer"))
    parser.add_argument("--compilation", choices=list(Compilation.__members__), help="default: the runner's own")
    parser.add_argument(
        "--profile",
        choices=list(Profile.__members__),
        default="equal",
        help="how the settings left unset are chosen (docs/usage.md#profiles)",
    )
    parser.add_argument(
        "--repetitions",
        type=repetitions_value,
        default=DEFAULT_REPETITIONS,
        metavar="auto|N",
        help=f"runs per instance per round, or auto: the sequential design (default {DEFAULT_REPETITIONS})",
    )
    parser.add_argument(
        "--max-repetitions",
        type=int,
        default=DEFAULT_MAX_RUNS,
        help="under auto: the most runs per instance of a verdict round",
    )
    parser.add_argument(
        "--compare-designs",
        action="store_true",
        help="both verdict rounds on every configuration: the fixed --repetitions N (default "
        f"{DEFAULT_REPETITIONS}) and auto, side by side",
    )
    parser.add_argument("--min-measure-s", type=float, default=plan.DEFAULT_MIN_MEASURE_S)
    parser.add_argument("--warmup", type=int, default=plan.DEFAULT_WARMUP)
    parser.add_argument("--steps", type=int, default=plan.DEFAULT_STEPS)
    parser.add_argument("--devices", help="several devices of each instance, e.g. cpu:0,cpu:1: a distributed run")
    parser.add_argument("--strategy", choices=[s.value for s in Strategy], help="default: the runner's own")
    parser.add_argument(
        "--sweep-order",
        action="store_true",
        help="run each instance's batch sizes of one repetition one after the other, as a sweep does",
    )
    parser.add_argument(
        "--reuse-builds",
        action="store_true",
        help="with --sweep-order: those runs share one build (RunRequest.reuse_key), as a sweep's do",
    )
    args = parser.parse_args()
    if args.reuse_builds and not args.sweep_order:
        parser.error("--reuse-builds needs --sweep-order: a build is shared by one repetition's batch sizes")
    auto = args.repetitions == AUTO
    fixed = DEFAULT_REPETITIONS if auto else args.repetitions  # the calibration round's, and the fixed design's
    designs = ["fixed", "auto"] if args.compare_designs else ["auto" if auto else "fixed"]
    if "auto" in designs and args.sweep_order:
        parser.error("--repetitions auto looks after every round of one configuration: give --sweep-order a number")
    if not stats.MIN_REPETITIONS <= args.max_repetitions <= plan.MAX_REPETITIONS:
        parser.error(
            f"--max-repetitions {args.max_repetitions}: accepted: {stats.MIN_REPETITIONS} to {plan.MAX_REPETITIONS}"
        )
    grid = GRIDS[args.grid]
    models = (args.models or grid["models"]).split(",")
    batch_sizes = [int(b) for b in (args.batch_sizes or grid["batch_sizes"]).split(",")]
    precisions = (args.precisions or grid["precisions"]).split(",")

    with ExitStack() as stack, TemporaryDirectory() as logs:
        if args.runner:
            addresses = [value.partition("=")[2] for value in args.runner]
            if len(addresses) != 2:
                parser.error("give --runner exactly twice: two instances of one runner")
        else:
            startup = StartupSettings(models_dirs=tuple(str(Path(d).resolve()) for d in args.models_dir))
            first, failures = start_embedded([args.framework], default_venvs(), Path(logs) / "a", stack, startup)
            second, more = start_embedded([args.framework], default_venvs(), Path(logs) / "b", stack, startup)
            if failures or more:
                print(*(f.message for f in failures + more), sep="\n", file=sys.stderr)
                return 1
            addresses = [first[args.framework], second[args.framework]]
        twins = dict(zip(("a", "b"), addresses))
        where = f" on {args.devices} ({args.strategy or 'default strategy'})" if args.devices else ""
        order = (
            f", sweep order with {'reused' if args.reuse_builds else 'fresh'} builds"
            if args.sweep_order
            else ", each batch size on its own with fresh builds"
        )
        compiled = (f", {args.compilation}" if args.compilation else "") + f", {args.profile} profile"
        runs = " and ".join(
            f"{fixed} runs" if d == "fixed" else f"auto (at most {args.max_repetitions})" for d in designs
        )
        print(
            f"A/A {args.grid} grid{where}: {args.mode}{compiled}, {runs} per instance per verdict round, "
            f"{fixed} per calibration round, windows of at least {args.min_measure_s} s and {args.steps} steps{order}"
        )
        header = (
            f"{'configuration':<40} {'a ms':>8} {'b ms':>8} {'ratio':>6} {'99% interval':>15} {'resolves':>8} "
            f"{'floor':>7} {'runs':>4}  verdict"
        )
        print(header)
        outcomes: dict[str, list[Outcome]] = {design: [] for design in designs}
        took_s = {design: 0.0 for design in designs}
        started = time.perf_counter()
        for model, precision in itertools.product(models, precisions):
            requests = {
                batch_size: wire.to_request(
                    plan.RunSpec(
                        model,
                        Mode(args.mode),
                        batch_size,
                        args.shape or grid["shapes"].get(model),
                        Precision(precision),
                        None if args.devices else grid["device"],
                        warmup=args.warmup,
                        steps=args.steps,
                        min_measure_s=args.min_measure_s,
                        devices=args.devices,
                        strategy=Strategy(args.strategy) if args.strategy else None,
                        compilation=Compilation[args.compilation] if args.compilation else None,
                        profile=Profile(args.profile),
                    )
                )
                for batch_size in batch_sizes
            }
            # A sweep's order runs a round of every batch size at once: the calibration round, then the verdict's.
            swept, failed = [], None
            for _ in range(2 if args.sweep_order else 0):
                by_batch, failed = sweep_round(twins, requests, fixed, args.reuse_builds)
                swept.append(by_batch)
            for batch_size, request in requests.items():
                if failed:
                    break
                label = f"{model} b{batch_size} {precision}"
                _, calibration, failed = round_of(twins, request, fixed, swept[0][batch_size] if swept else None)
                if failed:
                    break
                floor = stats.noise_floor(stats.compare("a", calibration["a"], "b", calibration["b"]))
                for design in designs:
                    began = time.perf_counter()
                    if design == "fixed":
                        done, medians, failed = round_of(twins, request, fixed, swept[1][batch_size] if swept else None)
                        if not failed:
                            outcomes[design].append(
                                judge(f"{label} fixed", floor, medians, results.steps_frame("aa", done))
                            )
                    else:
                        plan_ = SequentialPlan(max_runs=args.max_repetitions, noise_floor=floor)
                        decision, medians, failed = sequential_round(twins, request, plan_)
                        if not failed:
                            outcomes[design].append(judge_sequential(f"{label} auto", decision, medians))
                    took_s[design] += time.perf_counter() - began
                    if failed:
                        break
                if failed:
                    break
            if failed:
                print(f"{model} {precision:<28} failed: {failed[0].code}: {failed[0].message[:80]}")
        if not any(outcomes.values()):
            return 1
        for design in designs:
            summarise(design, outcomes[design], took_s[design])
        print(f"wall time {time.perf_counter() - started:.0f} s")
    return 0


class Outcome(NamedTuple):
    wrong: bool  # a difference called between instances of one runner
    runs: int  # per instance
    resolvable: float  # the smallest difference these runs resolve
    floor: float
    wrong_without_floor: bool | None = None  # the fixed design only: the verdict had no floor been stored
    wrong_pooled: bool | None = None  # the fixed design only: the old pooled-steps statistic on the same steps


def repetitions_value(text: str) -> str | int:
    if text == AUTO:
        return AUTO
    if not text.isdigit() or not 1 <= int(text) <= plan.MAX_REPETITIONS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: accepted values: auto, or a number of runs from 1 to {plan.MAX_REPETITIONS}"
        )
    return int(text)


def round_of(
    twins: dict[str, str], request: pb.RunRequest, repetitions: int, swept: Round | None
) -> tuple[list[RunResult], dict[str, list[float]], list[RunnerFailure]]:
    """One round of a fixed number of runs per instance: run now, or this batch size's of a sweep-order round."""
    if swept is None:
        return run_medians_by_runner(twins, EMBEDDED, request, repetitions)
    medians, done = swept
    return done, medians, []


def sequential_round(
    twins: dict[str, str], request: pb.RunRequest, plan_: SequentialPlan
) -> tuple[Decision | None, dict[str, list[float]], list[RunnerFailure]]:
    """Rounds of one run per instance (counterbalanced across rounds) with a look after each, as compare runs
    under --repetitions auto, until the look stops."""
    done: list[RunResult] = []
    for number in range(plan_.max_runs):
        runs, failed = run_all(twins, {twin: request for twin in twins}, EMBEDDED, 1, first_repetition=number)
        if failed:
            return None, {}, failed
        done += runs
        medians = medians_by_runner(done)
        decision = look(plan_, medians["a"], medians["b"], "a", "b")
        if decision.stop:
            break
    return decision, medians, []


def _row(
    label: str, a_ms: float, b_ms: float, c: stats.Comparison, floor: float, runs: int, verdict: str, wrong: bool
) -> None:
    print(
        f"{label:<40} {a_ms:8.3f} {b_ms:8.3f} {c.ratio:6.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}] {c.resolvable:8.1%} "
        f"{floor:7.1%} {runs:4d}  {'WRONG: ' if wrong else ''}{verdict}",
        flush=True,
    )


def judge(label: str, floor: float, verdict_round: dict[str, list[float]], steps) -> Outcome:
    """The fixed design: the verdict of the round with the calibration round's floor and without it, and the old
    pooled-steps statistic on the round's steps; printed as one row."""
    verdict = stats.compare("a", verdict_round["a"], "b", verdict_round["b"], noise_floor=floor)
    without_floor = stats.compare("a", verdict_round["a"], "b", verdict_round["b"])
    a_ms, b_ms = (stats.geometric_mean(verdict_round[twin]) * 1e3 for twin in ("a", "b"))
    runs = min(len(verdict_round["a"]), len(verdict_round["b"]))
    _row(label, a_ms, b_ms, verdict, floor, runs, verdict.verdict, verdict.significant)
    return Outcome(
        verdict.significant,
        runs,
        verdict.resolvable,
        floor,
        without_floor.significant,
        pooled_steps_says_different(steps),
    )


def judge_sequential(label: str, decision: Decision, medians: dict[str, list[float]]) -> Outcome:
    """The sequential design: the verdict its last look gave; printed as one row."""
    c = decision.comparison
    wrong = decision.outcome == "different"
    a_ms, b_ms = (stats.geometric_mean(medians[twin]) * 1e3 for twin in ("a", "b"))
    _row(label, a_ms, b_ms, c, decision.plan.noise_floor, decision.runs, decision.verdict, wrong)
    return Outcome(wrong, decision.runs, c.resolvable, decision.plan.noise_floor)


def summarise(design: str, outcomes: list[Outcome], took_s: float) -> None:
    """A design's wrong verdicts, median runs per instance and smallest difference resolved, and its time."""
    n = len(outcomes)
    wrong = sum(o.wrong for o in outcomes)
    resolved = sorted(o.resolvable for o in outcomes if not math.isnan(o.resolvable))
    resolved_text = (
        f"median {np.median(resolved):.1%}, smallest {resolved[0]:.1%}" if resolved else "none (too few runs)"
    )
    print(
        f"\n{design}: wrong verdicts {wrong} of {n} ({wrong / n:.1%}); runs per instance: median "
        f"{np.median([o.runs for o in outcomes]):g}; difference resolved: {resolved_text}; verdict rounds took "
        f"{took_s:.0f} s"
    )
    if design == "fixed":
        without = sum(bool(o.wrong_without_floor) for o in outcomes)
        pooled = sum(bool(o.wrong_pooled) for o in outcomes)
        print(
            f"  without the noise floor: {without} of {n} ({without / n:.1%}); the old pooled-steps statistic on "
            f"the same runs: {pooled} of {n} ({pooled / n:.1%})"
        )
    floors = sorted(o.floor for o in outcomes if not math.isnan(o.floor))
    print(
        "  noise floor: "
        + (
            f"median {np.median(floors):.1%}, range {floors[0]:.1%} to {floors[-1]:.1%}"
            if floors
            else f"not measured (a floor needs {stats.MIN_REPETITIONS} runs per instance)"
        )
    )


if __name__ == "__main__":
    sys.exit(main())

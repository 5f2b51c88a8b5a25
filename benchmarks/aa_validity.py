"""A/A validity: two instances of ONE runner, compared over a grid, where the right verdict is always
"no significant difference". Prints, per configuration, both instances' times, the ratio and its interval,
the smallest difference the runs resolve, the noise floor a calibration round measured, and whether the
verdict was wrong; then the share of wrong verdicts, with and without the noise floor.

Each configuration runs two rounds, each in counterbalanced order (A B B A ...): a calibration round
gives the noise floor as `fwbench calibrate` does, and a second, independent round gives the verdict as
`fwbench compare` would with that floor stored.

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

import numpy as np
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench_aggregator.run import jobs
from fwbench_aggregator.analyse import stats
from fwbench_aggregator.plan.spec import DEFAULT_REPETITIONS, StartupSettings
from fwbench_aggregator.plan import spec as plan
from fwbench_aggregator.store import records as results
from scipy.stats import mannwhitneyu
from fwbench_aggregator.run.client import RunnerFailure, RunResult
from fwbench_aggregator.run.connection import EMBEDDED
from fwbench_aggregator.app.calibrate import run_medians_by_runner
from fwbench_aggregator.app.medians import medians_by_runner
from fwbench_aggregator.plan.study import counterbalanced
from fwbench_aggregator.run.runners import start_embedded
from fwbench_aggregator.run.launch import default_venvs
from fwbench_aggregator.base.vocabulary import Compilation, Mode, Precision, Profile, Strategy

GRIDS = {
    # The configurations where pooled-step statistics went wrong on an H100 (launch-bound small batches
    # as well as GPU-bound large ones), in both precisions.
    "gpu": {"models": "resnet50,bert_base", "batch_sizes": "1,4,16,64,256", "precisions": "fp32,amp_bf16",
            "shapes": {"resnet50": None, "bert_base": "seq=128"}, "device": "gpu"},
    # Small enough for a 2-core machine: the small CPU configurations that were called different.
    "cpu": {"models": "resnet18,mobilenet_v2", "batch_sizes": "1,2,8", "precisions": "fp32",
            "shapes": {"resnet18": "3x64x64", "mobilenet_v2": "3x64x64"}, "device": "cpu"},
}


def pooled_steps_says_different(steps) -> bool:
    """The statistic this project used before runs became the unit, on the same steps: every measured step of
    every run pooled as independent samples, a Mann-Whitney U test at p < 0.01 and a ratio of medians past 2%."""
    measured = steps[~steps["warmup"]].groupby("runner")["step_time_s"]
    a, b = measured.get_group("a").to_numpy(), measured.get_group("b").to_numpy()
    ratio = max(np.median(a), np.median(b)) / min(np.median(a), np.median(b))
    return bool(mannwhitneyu(a, b).pvalue < 0.01 and ratio > 1 + stats.MIN_EFFECT)


Round = tuple[dict[str, list[float]], list[RunResult]]  # each instance's run medians, and the runs


def sweep_round(twins: dict[str, str], requests: dict[int, pb.RunRequest], repetitions: int, reuse_builds: bool
                ) -> tuple[dict[int, Round], list[RunnerFailure]]:
    """One round in a sweep's order: the instances counterbalanced over repetitions (A B B A ...), each
    repetition's batch sizes one after the other; with `reuse_builds` they share one build (a chain), which no
    other repetition shares. Per batch size: each instance's run medians and the runs."""
    runs: dict[int, list[RunResult]] = {batch: [] for batch in requests}
    session = uuid.uuid4().hex[:8]
    for repetition, name in counterbalanced(list(twins), repetitions):
        for number, (batch, request) in enumerate(requests.items()):
            if reuse_builds:
                request = pb.RunRequest(reuse_key=f"{session}-{name}-{repetition}", end_reuse=number == len(requests) - 1)
                request.MergeFrom(requests[batch])
            try:
                runs[batch].append(jobs.run_job(name, twins[name], EMBEDDED, request, repetition=repetition))
            except RunnerFailure as failure:
                return {}, [failure]
    return {batch: (medians_by_runner(done), done) for batch, done in runs.items()}, []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=GRIDS, default="cpu")
    parser.add_argument("--runner", action="append", default=[], help="NAME=HOST:PORT, twice: two instances of one runner")
    parser.add_argument("--framework", default="torch", help="embedded runner to start twice when no --runner is given")
    parser.add_argument("--models", help="comma-separated; default: the grid's")
    parser.add_argument("--models-dir", action="append", default=[],
                        help="a folder of model plug-ins the embedded runners load (repeatable)")
    parser.add_argument("--shape", help="every model's input shape; default: the grid's for its models, else the model's")
    parser.add_argument("--batch-sizes", help="comma-separated; default: the grid's")
    parser.add_argument("--precisions", help="comma-separated; default: the grid's")
    parser.add_argument("--mode", default="infer", choices=("train", "infer"))
    parser.add_argument("--compilation", choices=list(Compilation.__members__), help="default: the runner's own")
    parser.add_argument("--profile", choices=list(Profile.__members__), default="equal",
                        help="how the settings left unset are chosen (docs/usage.md#profiles)")
    parser.add_argument("--repetitions", type=int, default=DEFAULT_REPETITIONS)
    parser.add_argument("--min-measure-s", type=float, default=plan.DEFAULT_MIN_MEASURE_S)
    parser.add_argument("--warmup", type=int, default=plan.DEFAULT_WARMUP)
    parser.add_argument("--steps", type=int, default=plan.DEFAULT_STEPS)
    parser.add_argument("--devices", help="several devices of each instance, e.g. cpu:0,cpu:1: a distributed run")
    parser.add_argument("--strategy", choices=[s.value for s in Strategy], help="default: the runner's own")
    parser.add_argument("--sweep-order", action="store_true",
                        help="run each instance's batch sizes of one repetition one after the other, as a sweep does")
    parser.add_argument("--reuse-builds", action="store_true",
                        help="with --sweep-order: those runs share one build (RunRequest.reuse_key), as a sweep's do")
    args = parser.parse_args()
    if args.reuse_builds and not args.sweep_order:
        parser.error("--reuse-builds needs --sweep-order: a build is shared by one repetition's batch sizes")
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
        order = (f", sweep order with {'reused' if args.reuse_builds else 'fresh'} builds" if args.sweep_order
                 else ", each batch size on its own with fresh builds")
        compiled = (f", {args.compilation}" if args.compilation else "") + f", {args.profile} profile"
        print(f"A/A {args.grid} grid{where}: {args.mode}{compiled}, {args.repetitions} runs per instance per round, "
              f"windows of at least {args.min_measure_s} s and {args.steps} steps{order}")
        header = f"{'configuration':<34} {'a ms':>8} {'b ms':>8} {'ratio':>6} {'99% interval':>15} {'resolves':>8} {'floor':>7}  verdict"
        print(header)
        outcomes = []
        started = time.perf_counter()
        for model, precision in itertools.product(models, precisions):
            requests = {
                batch_size: plan.RunSpec(
                    model, Mode(args.mode), batch_size, args.shape or grid["shapes"].get(model), Precision(precision),
                    None if args.devices else grid["device"], warmup=args.warmup, steps=args.steps,
                    min_measure_s=args.min_measure_s, devices=args.devices,
                    strategy=Strategy(args.strategy) if args.strategy else None,
                    compilation=Compilation[args.compilation] if args.compilation else None,
                    profile=Profile(args.profile),
                ).to_request()
                for batch_size in batch_sizes
            }
            # Per batch size, both rounds: each instance's run medians, and the runs.
            rounds: dict[int, list[Round]] = {batch_size: [] for batch_size in batch_sizes}
            failed = []
            for _ in range(2):
                if args.sweep_order:
                    by_batch, failed = sweep_round(twins, requests, args.repetitions, args.reuse_builds)
                else:
                    by_batch = {}
                    for batch_size, request in requests.items():
                        done, medians, failed = run_medians_by_runner(twins, EMBEDDED, request, args.repetitions)
                        if failed:
                            break
                        by_batch[batch_size] = (medians, done)
                if failed:
                    break
                for batch_size, outcome in by_batch.items():
                    rounds[batch_size].append(outcome)
            if failed:
                print(f"{model} {precision:<28} failed: {failed[0].code}: {failed[0].message[:80]}")
                continue
            for batch_size in batch_sizes:
                (calibration, _), (verdict_round, done) = rounds[batch_size]
                label = f"{model} b{batch_size} {precision}"
                outcomes.append(judge(label, calibration, verdict_round, results.steps_frame("aa", done)))
        if not outcomes:
            return 1
        wrong = sum(v.significant for v, _, _, _ in outcomes)
        wrong_without_floor = sum(w.significant for _, w, _, _ in outcomes)
        wrong_pooled = sum(p for _, _, _, p in outcomes)
        floors = sorted(f for _, _, f, _ in outcomes if not math.isnan(f))
        resolvable = sorted(v.resolvable for v, _, _, _ in outcomes)
        n = len(outcomes)
        print(f"\nwrong verdicts: {wrong} of {n} ({wrong / n:.1%}); without the noise floor: {wrong_without_floor} of {n} "
              f"({wrong_without_floor / n:.1%}); the old pooled-steps statistic on the same runs: {wrong_pooled} of {n} "
              f"({wrong_pooled / n:.1%})")
        floor_text = (f"median {floors[len(floors) // 2]:.1%}, range {floors[0]:.1%} to {floors[-1]:.1%}" if floors
                      else f"not measured (a floor needs {stats.MIN_REPETITIONS} runs per instance)")
        print(f"noise floor: {floor_text}; "
              f"smallest difference the runs resolve: median {resolvable[len(resolvable) // 2]:.1%}, "
              f"range {resolvable[0]:.1%} to {resolvable[-1]:.1%}")
        print(f"wall time {time.perf_counter() - started:.0f} s")
    return 0


def judge(label: str, calibration: dict[str, list[float]], verdict_round: dict[str, list[float]], steps) -> tuple:
    """The noise floor from the calibration round, the verdict of the second with and without it, and the old
    pooled-steps statistic on the second round's steps; printed as one row."""
    floor = stats.noise_floor(stats.compare("a", calibration["a"], "b", calibration["b"]))
    verdict = stats.compare("a", verdict_round["a"], "b", verdict_round["b"], noise_floor=floor)
    without_floor = stats.compare("a", verdict_round["a"], "b", verdict_round["b"])
    a_ms, b_ms = (stats.geometric_mean(verdict_round[twin]) * 1e3 for twin in ("a", "b"))
    print(f"{label:<34} {a_ms:8.3f} {b_ms:8.3f} {verdict.ratio:6.3f} [{verdict.ci_low:.3f}, {verdict.ci_high:.3f}] "
          f"{verdict.resolvable:8.1%} {floor:7.1%}  {'WRONG: ' if verdict.significant else ''}{verdict.verdict}", flush=True)
    return verdict, without_floor, floor, pooled_steps_says_different(steps)


if __name__ == "__main__":
    sys.exit(main())

"""A run's step time where it executes: on the runner's framework thread, and in a spawned worker process with and
without malloc's thresholds pinned (fwbench_core.allocator), side by side in one sitting.

Every leg runs the very run path of a run (run_path.RunPath): the thread leg through a RunnerService in this process
(which pins, as every runner does), the two worker legs in a fresh spawned process each, which run it on their main
thread as a worker does, one pinning first and one not. Each measured run follows a first run of the same build, kept
under a reuse key, so that its page faults are its steps' (a build's own faults are not counted). Legs alternate
thread, unpinned, pinned, thread ..., each repetition in fresh worker processes, so that drift favours none.
A benchmark, not a test: it prints the figures and exits 0.

    .venvs/torch/bin/python benchmarks/worker_allocator.py --framework torch
    .venvs/tensorflow/bin/python benchmarks/worker_allocator.py --framework tensorflow
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import resource
import statistics
from collections.abc import Callable

from harness_overhead import BACKENDS, make_backend

from fwbench_core.allocator import pin_malloc
from fwbench_core.catalog import load_catalog
from fwbench_core.choices import Mode
from fwbench_core.run_path import RunPath
from fwbench_core.runs import RunRequest
from fwbench_core.service import RunnerService
from fwbench_core.timing import StepBatch, Summary
from fwbench_core.validation import resolve

LEGS = ("thread", "worker, unpinned", "worker, pinned")


def requests(args) -> tuple[RunRequest, RunRequest]:
    """The first run (kept under a reuse key) and the measured run that reuses its build."""
    shape = tuple(int(d) for d in args.input_shape.split("x"))
    base = dict(
        model=args.model,
        mode=Mode(args.mode),
        batch_size=args.batch_size,
        input_shape=shape,
        warmup_steps=args.warmup,
        measured_steps=args.steps,
        min_measure_s=0.0,
        power_sample_rate_hz=0.0,
        idle_baseline_s=0.0,
        reuse_key="allocator",
    )
    return RunRequest(**base), RunRequest(**base, end_reuse=True)


def measured(run: Callable[[RunRequest], object], first: RunRequest, second: RunRequest) -> tuple[float, float, int]:
    """The second run's median measured step (s), its minor page faults per step (warm-up steps included) and its
    process's peak resident set (bytes)."""
    for _ in run(first):
        pass
    faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    times, steps, peak_bytes = [], 0, 0
    for event in run(second):
        if isinstance(event, Summary):
            peak_bytes = event.peak_memory.bytes or 0
        if isinstance(event, StepBatch):
            steps += len(event.steps)
            times += [s.step_time_s for s in event.steps if not s.warmup]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
    return statistics.median(times), faults / max(steps, 1), peak_bytes


def in_worker(framework: str, pin: bool, first: RunRequest, second: RunRequest, queue) -> None:
    """A spawned process's run on its main thread, as a worker's, pinned first or not."""
    if pin:
        pin_malloc()
    backend = make_backend(framework)
    catalog = load_catalog(backend.models)
    path = RunPath(backend)

    def run(request: RunRequest):
        config = resolve(request, backend.runner_info().devices, backend.capabilities, catalog, backend.framework)
        return path.run(config, config.progress_total, lambda: False, keep=True)

    queue.put(measured(run, first, second))


def worker_leg(framework: str, pin: bool, first: RunRequest, second: RunRequest) -> tuple[float, float, int]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=in_worker, args=(framework, pin, first, second, queue))
    process.start()
    try:
        return queue.get(timeout=600)
    finally:
        process.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", required=True, choices=sorted(BACKENDS))
    parser.add_argument("--model", default="mobilenet_v2")
    parser.add_argument("--mode", default="infer", choices=["train", "infer"])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--input-shape", default="3x64x64", help="per sample, CxHxW (default 3x64x64)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repetitions", type=int, default=5, help="fresh worker processes per worker leg")
    args = parser.parse_args(argv)

    first, second = requests(args)
    service = RunnerService(make_backend(args.framework))
    on_thread = lambda request: service.run(request, lambda: False)
    legs: dict[str, Callable[[], tuple[float, float, int]]] = {
        "thread": functools.partial(measured, on_thread, first, second),
        "worker, unpinned": functools.partial(worker_leg, args.framework, False, first, second),
        "worker, pinned": functools.partial(worker_leg, args.framework, True, first, second),
    }
    figures: dict[str, list[tuple[float, float, int]]] = {leg: [] for leg in LEGS}
    print(
        f"{args.framework} {args.model} {args.mode} b{args.batch_size} {args.input_shape}: {args.warmup} warm-up + "
        f"{args.steps} measured steps of a reused build; malloc in the runner's process: {service.info.options['malloc']}"
    )
    print(f"{'rep':>4}  {'leg':<17} {'median step ms':>14} {'faults/step':>11} {'peak RSS MiB':>12}")
    for repetition in range(1, args.repetitions + 1):
        for leg in LEGS:
            step_s, faults, peak_bytes = legs[leg]()
            figures[leg].append((step_s, faults, peak_bytes))
            print(
                f"{repetition:>4}  {leg:<17} {step_s * 1e3:>14.2f} {faults:>11.0f} {peak_bytes / 2**20:>12.0f}",
                flush=True,
            )
    thread_ms = statistics.median(f[0] for f in figures["thread"]) * 1e3
    print()
    print(
        f"{'leg':<17} {'median of reps ms':>17} {'slowest rep ms':>14} {'faults/step':>11} {'peak RSS MiB':>12} "
        f"{'/ thread':>8}"
    )
    for leg in LEGS:
        steps_ms = [f[0] * 1e3 for f in figures[leg]]
        median_ms = statistics.median(steps_ms)
        print(
            f"{leg:<17} {median_ms:>17.2f} {max(steps_ms):>14.2f} {statistics.median(f[1] for f in figures[leg]):>11.0f} "
            f"{statistics.median(f[2] for f in figures[leg]) / 2**20:>12.0f} {median_ms / thread_ms:>8.3f}"
        )
    print("(the thread leg's peak is the benchmark's own process, which has run every thread leg before it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

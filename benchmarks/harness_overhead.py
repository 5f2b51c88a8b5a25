"""Harness overhead: the runner's measured step time over a bare loop's, same model, same process.

Runner side: the real gRPC server (fwbench_core.server.create_server) in this process, driven
through a real client stub on loopback with a Run request; its step times are the ones it streams.
Bare side: backend.build(config) stepped with nothing but perf_counter around step + synchronize.
Repetitions alternate runner, bare, runner, bare... so that drift (thermal, caches, other load)
does not favour one side. A benchmark, not a test: it always exits 0 and says whether the target is met.

    .venvs/torch/bin/python benchmarks/harness_overhead.py --framework torch [--mode infer] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc

from fwbench_core.catalog import load_catalog
from fwbench_core.choices import DeviceKind, Layout, Mode, Precision
from fwbench_core.devices import DeviceRef, RunnerSettings
from fwbench_core.runs import RunRequest
from fwbench_core.server import create_server
from fwbench_core.service import RunnerService
from fwbench_core.validation import resolve
from fwbench_core.wire import enum_to_wire

BACKENDS = {
    "torch": ("fwbench_torch.backend", "TorchBackend"),
    "tensorflow": ("fwbench_tensorflow.backend", "TensorFlowBackend"),
    "fake": ("fwbench_core.fake", "FakeBackend"),
}


def make_backend(framework: str):
    """The framework's backend as its runner makes it, with every core for its threads."""
    if framework == "tensorflow":  # as the runner's __main__ sets them
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    module, name = BACKENDS[framework]
    cores = os.cpu_count() or 1
    return getattr(importlib.import_module(module), name)(RunnerSettings(cores, cores))


def runner_steps(stub, args) -> list[float]:
    """One Run through gRPC; the measured step times exactly as the runner streamed them."""
    request = pb.RunRequest(
        model=args.model,
        mode=pb.MODE_TRAIN if args.mode == "train" else pb.MODE_INFER,
        batch_size=args.batch_size,
        input_shape=args.input_shape,
        device=pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU if args.device == "cpu" else pb.DEVICE_KIND_GPU),
        precision=enum_to_wire(Precision(args.precision)),
        layout=enum_to_wire(Layout(args.layout)) if args.layout else pb.LAYOUT_UNSPECIFIED,
        warmup_steps=args.warmup,
        measured_steps=args.steps,
        min_measure_s=0.0,  # exactly the step count, as the bare loop runs
        seed=args.seed,
        power_sample_rate_hz=args.power_rate_hz,
        idle_baseline_s=0,
    )
    measured = []
    for event in stub.Run(request):
        if event.HasField("steps"):
            measured += [s.step_time_s for s in event.steps.steps if not s.warmup]
    if len(measured) != args.steps:
        raise RuntimeError(f"the runner streamed {len(measured)} measured steps, expected {args.steps}")
    return measured


def bare_steps(backend, config) -> list[float]:
    """The same workload stepped with nothing else; built and torn down as the runner does, so both start alike."""
    workload = backend.build(config)
    try:
        step = workload.train_step if config.mode is Mode.TRAIN else workload.infer_step
        sync = workload.synchronize
        times = []
        for _ in range(config.warmup_steps + config.measured_steps):
            t0 = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - t0)
        return times[config.warmup_steps :]
    finally:
        workload.close()
        del workload
        gc.collect()
        backend.release_memory()


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", required=True, choices=sorted(BACKENDS))
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--mode", default="train", choices=["train", "infer"])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--input-shape", default="3x64x64", help="per sample, CxHxW (default 3x64x64)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    parser.add_argument("--precision", default="fp32", choices=[p.value for p in Precision])
    parser.add_argument(
        "--layout",
        default=None,
        choices=[layout.value for layout in Layout],
        help="vision models only (default: the runner's, channels_last)",
    )
    parser.add_argument("--warmup", type=int, default=5, help="steps excluded on both sides (default 5)")
    parser.add_argument("--steps", type=int, default=30, help="measured steps per repetition (default 30)")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=1.02, help="the runner/bare median ratio to stay under")
    parser.add_argument(
        "--bare-thread",
        default="framework",
        choices=["framework", "main", "worker"],
        help="where the bare loop runs: the runner's own framework thread, where its steps run (default), "
        "the main thread, or a fresh worker thread; glibc gives each thread its own malloc arena and "
        "torch's OpenMP its own thread team, so only 'framework' leaves the harness's cost alone",
    )
    parser.add_argument(
        "--power-rate-hz",
        type=float,
        default=0.0,
        help="power telemetry in the runner's runs (0: off, the default; 20: the product's default), "
        "to measure the sampler's own cost",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the figures and every step time here")
    args = parser.parse_args(argv)
    args.input_shape = [int(d) for d in args.input_shape.lower().split("x")]

    backend = make_backend(args.framework)
    info = backend.runner_info()
    config = resolve(
        RunRequest(
            model=args.model,
            mode=Mode(args.mode),
            batch_size=args.batch_size,
            input_shape=tuple(args.input_shape),
            device=DeviceRef(DeviceKind(args.device)),
            precision=Precision(args.precision),
            layout=Layout(args.layout) if args.layout else None,
            warmup_steps=args.warmup,
            measured_steps=args.steps,
            min_measure_s=0.0,
            seed=args.seed,
        ),
        info.devices,
        backend.capabilities,
        load_catalog(backend.models),
        backend.framework,
    )

    service = RunnerService(backend)
    server, port, _ = create_server(service, "127.0.0.1:0")
    server.start()
    worker = ThreadPoolExecutor(max_workers=1) if args.bare_thread == "worker" else None
    bare_on_thread = {
        "framework": lambda: service.on_cpu(lambda: bare_steps(backend, config)),
        "main": lambda: bare_steps(backend, config),
        "worker": lambda: worker.submit(bare_steps, backend, config).result(),
    }[args.bare_thread]
    # Other processes on the CPU spoil both sides; the load average shows whether there were any.
    load_before = os.getloadavg()[0]
    runner, bare = [], []
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.RunnerStub(channel)
            # Round 0 runs both sides once and is discarded: torch's OpenMP gives every calling thread
            # its own thread team, and libgomp spins less once there are more of its threads than CPUs,
            # so the runner's first run, before the bare side's thread has a team, would be faster
            # than all later ones (likewise one-time tracing and allocator state).
            for rep in range(args.repetitions + 1):
                r = runner_steps(stub, args)
                b = bare_on_thread()
                if rep:
                    runner.append(r)
                    bare.append(b)
                print(f"  round {rep}/{args.repetitions} done", file=sys.stderr, flush=True)
    finally:
        server.stop(None)
        if worker is not None:
            worker.shutdown()
    load_after = os.getloadavg()[0]

    runner_medians = [statistics.median(r) for r in runner]
    bare_medians = [statistics.median(b) for b in bare]
    rep_ratios = [r / b for r, b in zip(runner_medians, bare_medians)]
    runner_pooled = statistics.median([t for r in runner for t in r])
    bare_pooled = statistics.median([t for b in bare for t in b])
    ratio = runner_pooled / bare_pooled
    met = ratio <= args.target

    shape = "x".join(map(str, args.input_shape))
    label = f"{args.framework} {args.model} {args.mode} b{args.batch_size} {shape} {args.device} {args.precision}" + (
        f" {args.layout}" if args.layout else ""
    )
    print(
        f"harness overhead, {label}: {args.warmup} warm-up + {args.steps} measured steps, "
        f"{args.repetitions} repetitions after 1 discarded, bare loop in the {args.bare_thread} thread"
    )
    print(f"{'rep':>6} {'runner ms':>10} {'bare ms':>10} {'ratio':>7}")
    for i, (r, b, q) in enumerate(zip(runner_medians, bare_medians, rep_ratios), 1):
        print(f"{i:>6} {r * 1e3:>10.3f} {b * 1e3:>10.3f} {q:>7.3f}")
    print(f"{'pooled':>6} {runner_pooled * 1e3:>10.3f} {bare_pooled * 1e3:>10.3f} {ratio:>7.3f}")
    print(f"{'cv':>6} {cv(runner_medians):>10.2%} {cv(bare_medians):>10.2%}   (of per-repetition medians)")
    print(f"median of per-repetition ratios = {statistics.median(rep_ratios):.3f}")
    print(f"load average (1 min) before/after: {load_before:.2f}/{load_after:.2f} on {os.cpu_count()} CPUs")
    print(
        f"overhead {label}: runner/bare median = {ratio:.3f} (target <= {args.target:g}: {'met' if met else 'NOT MET'})"
    )

    if args.json:
        result = {
            "framework": args.framework,
            "framework_version": info.framework_version,
            "model": args.model,
            "mode": args.mode,
            "batch_size": args.batch_size,
            "input_shape": args.input_shape,
            "device": args.device,
            "precision": args.precision,
            "layout": args.layout or "",
            "warmup_steps": args.warmup,
            "measured_steps": args.steps,
            "repetitions": args.repetitions,
            "bare_thread": args.bare_thread,
            "ratio_of_pooled_medians": ratio,
            "median_of_repetition_ratios": statistics.median(rep_ratios),
            "runner_median_s": runner_pooled,
            "bare_median_s": bare_pooled,
            "runner_repetition_medians_s": runner_medians,
            "bare_repetition_medians_s": bare_medians,
            "runner_cv": cv(runner_medians),
            "bare_cv": cv(bare_medians),
            "load_average_1m_before_after": [load_before, load_after],
            "target": args.target,
            "target_met": met,
            "runner_step_times_s": runner,
            "bare_step_times_s": bare,
        }
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

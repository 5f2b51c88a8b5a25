"""A plug-in's runs in the worker its runner keeps for it against a fresh worker per run, side by side.

Two runners of one framework serve the same plug-in (examples/models/tiny_cnn by default): one as runners start
by default, whose plug-in runs share a worker kept for the plug-in (--run-isolation thread), one with every run in
a fresh worker (--run-isolation process, as every plug-in run was before the worker was kept). They take turns
(A B B A ...), so that drift favours neither. Each run is a small CPU inference, timed from request to summary
(what a sweep or compare waits for); its median step time says whether the kept worker measures the same steps. A
benchmark, not a test: it prints figures and always exits 0.

    .venvs/aggregator/bin/python studies/plugin_runs.py --framework tensorflow --runs 8
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import grpc
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc

from fwbench_aggregator.run import launch
from fwbench_core.plugins import MODELS_DIR_ENV, MODELS_DIR_FLAG

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "models"
ISOLATIONS = {"kept worker": "thread", "fresh worker per run": "process"}
CPU = pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU, index=0)


def one_run(stub, model: str, shape: list[int]) -> tuple[float, float]:
    """(seconds from request to summary, median step time in seconds) of one small run."""
    request = pb.RunRequest(
        model=model,
        mode=pb.MODE_INFER,
        batch_size=2,
        input_shape=shape,
        device=CPU,
        warmup_steps=2,
        measured_steps=10,
        min_measure_s=0.0,
        power_sample_rate_hz=0.0,
        seed=1,
    )
    started = time.perf_counter()
    events = list(stub.Run(request, timeout=600))
    took_s = time.perf_counter() - started
    (summary,) = [e.summary for e in events if e.WhichOneof("event") == "summary"]
    return took_s, summary.median_step_time_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--framework",
        default="tensorflow",
        choices=["torch", "tensorflow", "jax"],
        help="the framework of both runners (default tensorflow)",
    )
    parser.add_argument("--model", default="tiny_cnn", help="a plug-in folder's name under --models-dir")
    parser.add_argument("--models-dir", type=Path, default=EXAMPLES)
    parser.add_argument("--shape", default="3x32x32", help="each sample's input shape (default 3x32x32)")
    parser.add_argument("--runs", type=int, default=8, help="runs per runner (default 8)")
    args = parser.parse_args()
    shape = [int(d) for d in args.shape.split("x")]
    venvs = launch.default_venvs()
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in ISOLATIONS}
    with tempfile.TemporaryDirectory() as logs:
        runners = {}
        for name, isolation in ISOLATIONS.items():
            command = [
                *launch.embedded_command(args.framework, venvs),
                MODELS_DIR_FLAG,
                str(args.models_dir),
                "--run-isolation",
                isolation,
            ]
            runners[name] = launch.LocalRunner(
                f"{args.framework}-{isolation}", command, Path(logs) / f"{isolation}.log", {MODELS_DIR_ENV: ""}
            )
            runners[name].start()
        try:
            stubs = {name: pb_grpc.RunnerStub(grpc.insecure_channel(local.address)) for name, local in runners.items()}
            order = list(ISOLATIONS)
            for turn in range(args.runs):
                for name in order if turn % 2 == 0 else order[::-1]:
                    times[name].append(one_run(stubs[name], args.model, shape))
        finally:
            for local in runners.values():
                local.stop()
    print(
        f"{args.framework}, plug-in {args.model} infer b2 {args.shape} on the CPU, {args.runs} runs each, "
        "turns A B B A; the first run of each (which starts its worker either way) apart"
    )
    print(f"{'':22} {'first run s':>12} {'later runs, median s':>21} {'median step ms':>15}")
    medians = {}
    for name, runs in times.items():
        later = [took for took, _ in runs[1:]]
        medians[name] = statistics.median(later)
        steps_ms = statistics.median(step for _, step in runs) * 1e3
        print(f"{name:22} {runs[0][0]:12.2f} {medians[name]:21.2f} {steps_ms:15.2f}")
    fresh, kept = medians["fresh worker per run"], medians["kept worker"]
    print(f"a later run takes {kept / fresh:.2f} times as long in the kept worker ({fresh - kept:.2f} s less a run)")


if __name__ == "__main__":
    main()

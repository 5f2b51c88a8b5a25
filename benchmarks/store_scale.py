"""The results store at the scale users reach: what a compare, a report and a sweep's appends cost in a store of N runs.

Builds one store, growing it through ResultStore.append (the store's own API: every file checksummed, flushed and
renamed into place) with synthetic runs shaped like a fake runner's (a summary row of every column, 20 steps, 5
power samples, a manifest with a sweep's configuration key), 120 runs a batch as a sweep stores them, plus a few noise
floors and FLOP counts. At each size it measures, each in a fresh process (so that each peak RSS is its own):

    open      ResultStore(root) and its runs listed: what every command pays first (on a store of the previous format:
              its catalog built, the migration)
    compare   what a compare reads from the store: its noise floors (twice, as its rounds and its analysis read them),
              parity, max-batch searches, FLOP counts, and the scaling rows of its configurations
    report    what `fwbench report` reads: every run's frames (summary, steps, ...), the damaged files, the manifests
    report1k  the same over a 1,000-run selection (--where seed=0: the first 1,000 runs)
    analyse   report's reads and the analysis of them (app.report.store_report but writing the pages)
    append    a 120-run sweep: the resume check (which of its configurations are done), then 120 appends

    .venvs/aggregator/bin/python benchmarks/store_scale.py --sizes 124,1000,10000 --keep /tmp/store_scale
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import resource
import subprocess
import sys
import time
import unittest.mock
from pathlib import Path

import pandas as pd

from fwbench_aggregator.app import report
from fwbench_aggregator.app.compare import scaling_of
from fwbench_aggregator.app.report import selected_frames
from fwbench_aggregator.store import store_files
from fwbench_aggregator.store.config_keys import runs_by_config
from fwbench_aggregator.store.results_store import ResultStore
from fwbench_aggregator.store.run_columns import POWER_COLUMNS, STEPS_COLUMNS, SUMMARY_COLUMNS
from fwbench_aggregator.store.schema import (
    CALIBRATION_COLUMNS,
    MODEL_FACTS_COLUMNS,
    MODEL_FACTS_FRAME,
    PARITY_FRAME,
    SERVE_CAPACITY_FRAME,
)
from fwbench_aggregator.store.selection import Selection

BATCH_RUNS = 120  # one sweep's runs: 4 versions x 5 batch sizes x 3 repetitions x 2 runners
MODELS = ("resnet18", "mlp", "gpt2_small", "llama_small")
VERSIONS = ("2.3.0", "2.4.0", "2.5.0", "2.6.0")
BATCHES = (1, 2, 4, 8, 16)
STEPS = 20
POWER_SAMPLES = 5
MEASURES = ("open", "compare", "report", "report1k", "analyse", "append")
REPORT_FRAMES = ("summary", "steps", "calibration", "max_batch", "model_facts", PARITY_FRAME, SERVE_CAPACITY_FRAME)


def _default(column: str) -> object:
    return math.nan if column.endswith(("_s", "_w", "_j", "_bytes", "_hz", "_mhz", "_pct", "_c")) else ""


def _identity(index: int) -> dict[str, object]:
    """The configuration of the index-th run: a sweep's grid, repeated night after night."""
    point = index % BATCH_RUNS
    return {
        "runner": ("torch", "fake")[point % 2],
        "framework": ("torch", "fake")[point % 2],
        "framework_version": VERSIONS[point // 2 % len(VERSIONS)],
        "model": MODELS[index // BATCH_RUNS % len(MODELS)],
        "mode": "train",
        "batch_size": BATCHES[point // 8 % len(BATCHES)],
        "input_shape": "3x32x32",
        "precision": "fp32",
        "device": "cpu:0",
        "repetition": point // 40,
        "world_size": 1,
        "nodes": 1,
        "devices": 1,
    }


def _run(key: str, index: int, rng: random.Random) -> tuple[dict, dict[str, pd.DataFrame], dict]:
    """The index-th run: its frames are one sweep point's, built once (building them is most of a build's time),
    with this run's id, seed and step time."""
    config, frames, manifest = _point(index % (BATCH_RUNS * len(MODELS)))
    sweep = f"night-{index // BATCH_RUNS:05d}"
    step_s = frames["summary"]["median_step_time_s"].iloc[0] * rng.uniform(0.95, 1.05)
    frames = {
        "summary": frames["summary"].assign(
            run_id=key, seed=index // 1000, started_at_unix_s=float(index), median_step_time_s=step_s
        ),
        "steps": frames["steps"].assign(run_id=key, step_time_s=step_s),
        "power": frames["power"].assign(run_id=key),
    }
    return (
        {**config, "compare": sweep},
        frames,
        {**manifest, "run_id": key, "config_key": f"{sweep}-{index % BATCH_RUNS}"},
    )


@functools.cache
def _point(index: int) -> tuple[dict, dict[str, pd.DataFrame], dict]:
    identity = _identity(index)
    step_s = 0.001 * (1 + identity["batch_size"] / 16)
    summary = {column: _default(column) for column in SUMMARY_COLUMNS}
    summary.update(identity, status="ok", measured_steps=STEPS - 1, warmup_steps=1)
    summary.update(median_step_time_s=step_s, mean_step_time_s=step_s, p95_step_time_s=step_s * 1.1)
    summary.update(throughput_samples_per_s=identity["batch_size"] / step_s, started_at_unix_s=float(index))
    shared = {column: summary[column] for column in STEPS_COLUMNS if column in summary}
    steps = pd.DataFrame(
        [
            {**shared, "step_index": i, "warmup": i == 0, "start_s": i * step_s, "step_time_s": step_s}
            for i in range(STEPS)
        ],
        columns=list(STEPS_COLUMNS),
    )
    power = pd.DataFrame(
        [{**shared, "time_s": i * 0.1, "phase": "measure", "power_w": 10.0} for i in range(POWER_SAMPLES)],
        columns=list(POWER_COLUMNS),
    )
    manifest = {"versions": {"python": "3.12"}, "host": {"node": "bench"}}
    return identity, {"summary": pd.DataFrame([summary]), "steps": steps, "power": power}, manifest


def _facts(store: ResultStore) -> None:
    """A few noise floors and FLOP counts, as a user's calibrate and compares leave them."""
    for i, model in enumerate(MODELS):
        floor = {column: _default(column) for column in CALIBRATION_COLUMNS}
        floor.update(_identity(i * BATCH_RUNS), framework="torch", runs=6, noise_floor=0.02, flagged="")
        facts = {column: _default(column) for column in MODEL_FACTS_COLUMNS}
        facts.update(_identity(i * BATCH_RUNS), forward_flops=1e9, parameter_count=1e6, flops_method="counted")
        store.append(f"calibration-{model}", {"model": model}, {"calibration": pd.DataFrame([floor])}, {})
        store.append(f"facts-{model}", {"model": model}, {MODEL_FACTS_FRAME: pd.DataFrame([facts])}, {})


def _unsynced(path: Path, write) -> None:
    with open(path, "wb") as file:
        write(file)


def grow(root: Path, runs: int) -> float:
    """Append runs until the store holds `runs` of them; the seconds it took. Building skips the store's fsyncs (a
    third of an append's time on this VM): what is measured keeps them."""
    store_files.fsync_dir, store_files.write_synced = lambda path: None, _unsynced
    store = ResultStore(root)
    have = len([p for p in store.runs_dir.iterdir() if p.name.startswith("r")]) if store.runs_dir.is_dir() else 0
    started = time.perf_counter()
    if not have:
        _facts(store)
    rng = random.Random(have)
    for index in range(have, runs):
        key = f"r{index:07d}"
        store.append(key, *_run(key, index, rng))
    return time.perf_counter() - started


def measure(root: Path, what: str, runs: int) -> dict:
    # A sweep's runs made first: what is timed is the store's part, as a study opens, resumes and stores (app.study)
    rng = random.Random(runs)
    sweep = (
        [(f"r{i:07d}", _run(f"r{i:07d}", i, rng)) for i in range(runs, runs + BATCH_RUNS)] if what == "append" else []
    )
    started = time.perf_counter()
    store = ResultStore(root)
    store.run_keys()  # the catalog checked against runs/ (on a store of the previous format: built)
    if what == "compare":
        for name in ("calibration", "calibration", PARITY_FRAME, "max_batch", MODEL_FACTS_FRAME):
            store.load(name)
        _, frames, _ = _run("mine", runs, random.Random(0))
        scaling_of(frames["summary"], store)
    elif what in ("report", "report1k"):
        # report1k: the first 1,000 runs, whose seed is 0 (a study's runs)
        selection = Selection.parse(where=["seed=0"]) if what == "report1k" else Selection()
        frames = selected_frames(store, REPORT_FRAMES, selection)
        store.known_damage()  # what app.report.store_report reads beside the frames, as it reads it
        shown = set(frames["summary"]["run_key"]) | (store.keys() - store.run_keys())
        store.manifests(sorted(store.keys() if selection.everything else shown))
        selected = len(frames["summary"])
    elif what == "analyse":
        with unittest.mock.patch.object(
            report, "write_report", lambda *_, **__: root
        ):  # no pages: what the store costs
            selected = len(report.store_report(store, root / "report").summary)
    elif what == "append":
        runs_by_config(store, [manifest["config_key"] for _, (_, _, manifest) in sweep])
        for key, run in sweep:
            store.append(key, *run)
    seconds = time.perf_counter() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "what": what,
        "s": seconds,
        "peak_mib": peak_mib,
        **({"selected": selected} if what[:6] == "report" or what == "analyse" else {}),
    }


def _in_process(root: Path, what: str, runs: int) -> dict:
    command = [sys.executable, __file__, "--measure", what, "--keep", str(root), "--sizes", str(runs)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="124,1000,10000", help="runs in the store at each measurement, ascending")
    parser.add_argument("--keep", type=Path, default=Path("results/store_scale"), help="where the store grows")
    parser.add_argument("--measure", default="", help=argparse.SUPPRESS)  # one measurement, in its own process
    parser.add_argument("--skip", default="", help="measurements to leave out, e.g. report")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.measure:
        print(json.dumps(measure(args.keep, args.measure, sizes[0])))
        return
    args.keep.mkdir(parents=True, exist_ok=True)
    header = " | ".join(f"{what:>8} s    MiB" for what in MEASURES)
    print(f"{'runs':>7} {'grow s':>8} | {header}")
    for size in sizes:
        grown = grow(args.keep, size)
        cells = []
        for what in MEASURES:
            if what in args.skip.split(","):
                cells.append(f"{'-':>10} {'-':>6}")
                continue
            figure = _in_process(args.keep, what, size)
            cells.append(f"{figure['s']:8.2f} {figure['peak_mib']:6.0f}")
        print(f"{size:>7} {grown:8.1f} | " + " | ".join(cells), flush=True)  # an appended sweep stays


if __name__ == "__main__":
    main()

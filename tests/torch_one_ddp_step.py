"""Run from the torch environment by test_distributed_torch.py: two ranks, each built by the torch backend as a
runner's worker would build it, take one training step from identical weights on different inputs; prints
(as JSON) how far apart the ranks' weights are before and after, with DDP and without.

Usage: python torch_one_ddp_step.py ddp|single PORT"""

from __future__ import annotations

import json
import multiprocessing
import sys

from fwbench_core.catalog import load_catalog
from fwbench_core.choices import DeviceKind, Mode, Strategy
from fwbench_core.devices import DeviceRef, RunnerSettings
from fwbench_core.runs import RunRequest, WorkerPlace
from fwbench_core.validation import resolve

WORLD_SIZE = 2


def flat_weights(workload):
    import torch

    return torch.cat([p.detach().reshape(-1).clone() for p in workload.model.parameters()])


def rank_main(strategy: str, port: int, rank: int, results) -> None:
    from dataclasses import replace

    from fwbench_torch.backend import TorchBackend

    backend = TorchBackend(RunnerSettings(1, 1))
    request = RunRequest(
        model="mobilenet_v2",
        mode=Mode.TRAIN,
        batch_size=2,
        input_shape=(3, 32, 32),
        devices=(DeviceRef(DeviceKind.CPU, 0), DeviceRef(DeviceKind.CPU, 1)),
        strategy=Strategy.DDP,
        distributed_timeout_s=30.0,
    )
    config = resolve(
        request, backend.runner_info().devices, backend.capabilities, load_catalog(backend.models), "torch"
    )
    # Without DDP: the same per-rank seeds and inputs, each rank on its own.
    place = WorkerPlace(rank, rank, WORLD_SIZE, f"127.0.0.1:{port}")
    if strategy == "single":
        config = replace(config, strategy=Strategy.SINGLE, devices=(), place=place)
    else:
        config = replace(config, place=place)
    backend.prepare_worker(config)
    workload = backend.build(config)
    before = flat_weights(workload).numpy()
    workload.train_step()
    workload.synchronize()
    results.put((rank, before, flat_weights(workload).numpy(), workload.inputs.numpy()))
    workload.close()


def main() -> None:
    strategy, port = sys.argv[1], int(sys.argv[2])
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    ranks = [context.Process(target=rank_main, args=(strategy, port, rank, results)) for rank in range(WORLD_SIZE)]
    for process in ranks:
        process.start()
    got = dict((rank, rest) for rank, *rest in (results.get(timeout=120) for _ in ranks))
    for process in ranks:
        process.join()
    (before0, after0, inputs0), (before1, after1, inputs1) = got[0], got[1]
    print(
        json.dumps(
            {
                "before": float(abs(before0 - before1).max()),
                "after": float(abs(after0 - after1).max()),
                "moved": float(abs(after0 - before0).max()),
                "inputs_differ": bool((inputs0 != inputs1).any()),
            }
        )
    )


if __name__ == "__main__":
    main()

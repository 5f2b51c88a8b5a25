"""Run from a framework's environment by test_reuse.py: a workload built under a reuse key at batch size 2 takes
two training steps, then is reused at batch size 3; a second workload is built afresh at batch size 3. Prints
(as JSON) whether the reuse happened and how far apart the two are: their state (weights and optimizer), inputs
and targets, and the weights after one more training step of each.

Usage: python reuse_equals_fresh.py torch|tensorflow|jax"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from fwbench_core.catalog import load_catalog
from fwbench_core.choices import Mode
from fwbench_core.devices import RunnerSettings
from fwbench_core.runs import RunRequest
from fwbench_core.validation import resolve

SHAPE = (3, 32, 32)


def torch_arrays(workload) -> dict[str, list[np.ndarray]]:
    state = [value.detach().numpy() for value in workload.module.state_dict().values()]
    momentum = [
        workload.optimizer.state[p]["momentum_buffer"].numpy()
        for p in workload.module.parameters()
        if "momentum_buffer" in workload.optimizer.state[p]
    ]
    return {"state": state + momentum, "inputs": [workload.inputs.numpy()], "targets": [workload.targets.numpy()]}


def tensorflow_arrays(workload) -> dict[str, list[np.ndarray]]:
    state = [v.numpy() for v in [*workload.model.variables, *workload.optimizer.variables]]
    return {"state": state, "inputs": [workload.inputs.numpy()], "targets": [workload.targets.numpy()]}


def jax_arrays(workload) -> dict[str, list[np.ndarray]]:
    import jax

    # The dropout key is a typed key array, no numbers; it comes from the seed as the inputs do.
    state = {name: workload.state[name] for name in ("params", "batch_stats", "opt_state")}
    return {
        "state": [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(state)],
        "inputs": [np.asarray(workload.inputs)],
        "targets": [np.asarray(workload.targets)],
    }


def largest_difference(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return float("inf")
    return max(
        (float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)), initial=0.0)) for x, y in zip(a, b)),
        default=0.0,
    )


def main(framework: str) -> None:
    threads = 1
    if framework == "torch":
        from fwbench_torch.backend import TorchBackend as Backend

        arrays = torch_arrays
    elif framework == "jax":
        from fwbench_jax.backend import JaxBackend as Backend

        arrays = jax_arrays
        threads = os.cpu_count() or 1  # XLA's CPU runtime takes every core; the runner refuses fewer
    else:
        from fwbench_tensorflow.backend import TensorFlowBackend as Backend

        arrays = tensorflow_arrays
    backend = Backend(RunnerSettings(threads, threads))

    def config(batch_size: int):
        request = RunRequest(
            model="resnet18", mode=Mode.TRAIN, batch_size=batch_size, input_shape=SHAPE, seed=7, reuse_key="chain"
        )
        return resolve(
            request, backend.runner_info().devices, backend.capabilities, load_catalog(backend.models), framework
        )

    reused = backend.build(config(2))
    for _ in range(2):
        reused.train_step()
    reused.synchronize()
    did_reuse = reused.reuse(config(3))
    fresh = backend.build(config(3))
    before = {name: largest_difference(value, arrays(fresh)[name]) for name, value in arrays(reused).items()}
    for workload in (reused, fresh):
        workload.train_step()
        workload.synchronize()
    after = largest_difference(arrays(reused)["state"], arrays(fresh)["state"])
    print(
        json.dumps({"reused": did_reuse, **before, "after_step": after, "first_step_traces": reused.first_step_traces})
    )


if __name__ == "__main__":
    main(sys.argv[1])

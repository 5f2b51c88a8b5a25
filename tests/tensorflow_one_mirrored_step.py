"""Run from the TensorFlow environment by test_distributed_tensorflow.py, in a fresh process (logical CPU devices
exist only if configured before TensorFlow starts): a MirroredStrategy run on cpu:0,cpu:1, built by the TensorFlow
backend as a runner's worker builds it, takes one training step from identical weights on each replica's own
inputs; prints (as JSON) how far apart the replicas' copies of the weights are before and after the step, how far
the step moved them, and how far apart the replicas' own (not yet all-reduced) gradients were.

Usage: python tensorflow_one_mirrored_step.py"""

from __future__ import annotations

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from fwbench_core.catalog import load_catalog
from fwbench_core.choices import DeviceKind, Mode, Strategy
from fwbench_core.devices import DeviceRef, RunnerSettings
from fwbench_core.runs import RunRequest, WorkerPlace
from fwbench_core.validation import resolve


def replica_copies(workload) -> list:
    """Each replica's copy of every trainable weight, flattened: one numpy vector per replica."""
    import numpy as np

    per_variable = [[copy.numpy().ravel() for copy in v.value.values] for v in workload.model.trainable_variables]
    return [np.concatenate(column) for column in zip(*per_variable)]


def spread(vectors) -> float:
    return float(max(abs(vector - vectors[0]).max() for vector in vectors))


def local_gradients(workload) -> list:
    """Each replica's gradients of its own inputs' loss, before any all-reduce."""
    import numpy as np
    import tensorflow as tf

    from fwbench_tensorflow.objectives import loss

    def gradients(inputs, targets):
        with tf.GradientTape() as tape:
            value = loss(workload.head, tf.cast(workload.model(inputs, training=True), tf.float32), targets)
        return tape.gradient(value, workload.model.trainable_variables)

    per_replica = workload.strategy.run(gradients, args=(workload.inputs, workload.targets))
    per_variable = [[g.numpy().ravel() for g in workload.strategy.experimental_local_results(v)] for v in per_replica]
    return [np.concatenate(column) for column in zip(*per_variable)]


def main() -> None:
    from dataclasses import replace

    from fwbench_tensorflow.backend import TensorFlowBackend

    backend = TensorFlowBackend(RunnerSettings(1, 1))
    request = RunRequest(
        model="resnet18",
        mode=Mode.TRAIN,
        batch_size=2,
        input_shape=(3, 32, 32),
        devices=(DeviceRef(DeviceKind.CPU, 0), DeviceRef(DeviceKind.CPU, 1)),
        strategy=Strategy.MIRRORED,
    )
    config = resolve(
        request, backend.runner_info().devices, backend.capabilities, load_catalog(backend.models), "tensorflow"
    )
    config = replace(config, place=WorkerPlace(0, 0, 1, "127.0.0.1:1"))
    backend.prepare_worker(config)
    workload = backend.build(config)
    inputs = [value.numpy() for value in workload.strategy.experimental_local_results(workload.inputs)]
    gradients = local_gradients(workload)
    before = replica_copies(workload)
    workload.train_step()
    workload.synchronize()
    after = replica_copies(workload)
    print(
        json.dumps(
            {
                "replicas": len(before),
                "before": spread(before),
                "after": spread(after),
                "moved": float(abs(after[0] - before[0]).max()),
                "inputs_differ": bool((inputs[0] != inputs[1]).any()),
                "gradients_differ": spread(gradients),
            }
        )
    )


if __name__ == "__main__":
    main()

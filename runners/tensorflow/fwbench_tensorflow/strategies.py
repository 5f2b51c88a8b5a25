"""Distributed runs in TensorFlow: MirroredStrategy over one runner's devices, MultiWorkerMirroredStrategy over
several runners (one TF worker each, configured through TF_CONFIG).

A distributed run always has a fresh worker process to itself: `configure_worker` sets what TensorFlow fixes when
its runtime starts (logical CPU devices, visible GPUs, TF_CONFIG), and `make_strategy` is the run's first
TensorFlow op, so the collective runtime and its rendezvous are configured before anything initialises it.
"""

from __future__ import annotations

import json
import os
import re

import tensorflow as tf

from fwbench_core.choices import DeviceKind, Strategy
from fwbench_core.errors import Aborted
from fwbench_core.runs import RunConfig

# What a run's strategy lets a TensorFlow runner do on CPU and on GPU alike.
STRATEGIES = frozenset({Strategy.SINGLE, Strategy.MIRRORED, Strategy.MULTI_WORKER_MIRRORED})
# TensorFlow's errors of a collective whose peer worker is gone (unreachable, reset) or too slow (its timeout).
_PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError)
# What they say: which worker failed (the remote target of a collective's failed call, or, where the coordination
# service noticed first because its heartbeats stopped, the task its error was reported from), and what gRPC said.
_REMOTE_TASK = re.compile(
    r"remote target /job:worker/replica:\d+/task:(\d+)|Error reported from /job:worker(?:/replica:\d+)?/task:(\d+)"
)
_GRPC_MESSAGE = re.compile(r'grpc_message:"([^"]+)"')
_HEADERS = {"Graph execution error:"}


def configure_worker(config: RunConfig) -> None:
    """Process-wide settings of a distributed run, before TensorFlow's runtime starts."""
    on_gpu = config.device.ref.kind is DeviceKind.GPU
    if not on_gpu:
        # cpu:0, cpu:1, ... are logical CPU devices of the one physical CPU (each runs ops on the shared thread pools).
        count = max(device.ref.index for device in config.run_devices) + 1
        if count > 1:
            physical = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(physical, [tf.config.LogicalDeviceConfiguration()] * count)
    elif config.strategy is Strategy.MULTI_WORKER_MIRRORED:
        # MultiWorkerMirroredStrategy takes every visible GPU: only the run's are.
        gpus = tf.config.list_physical_devices("GPU")
        tf.config.set_visible_devices([gpus[device.ref.index] for device in config.run_devices], "GPU")
    if config.strategy is Strategy.MULTI_WORKER_MIRRORED and config.cluster is not None:
        os.environ["TF_CONFIG"] = json.dumps(tf_config(config))
    else:
        # The run's cluster is the request's alone, never one the runner's environment happened to carry.
        os.environ.pop("TF_CONFIG", None)


def tf_config(config: RunConfig) -> dict:
    """This runner's TF worker in the job: one worker per runner, at the runner's cluster endpoint."""
    workers = list(config.place.workers) if config.place and config.place.workers else list(config.cluster.endpoints)
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": config.cluster.node_rank}}


def device_names(config: RunConfig) -> list[str]:
    kind = "GPU" if config.device.ref.kind is DeviceKind.GPU else "CPU"
    return [f"/{kind}:{device.ref.index}" for device in config.run_devices]


def make_strategy(config: RunConfig) -> tf.distribute.Strategy:
    if config.strategy is Strategy.MIRRORED:
        return tf.distribute.MirroredStrategy(devices=device_names(config))
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=config.distributed_timeout_s)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def peer_error(config: RunConfig, error: BaseException) -> Aborted | None:
    """A collective that failed because another TF worker of the job died, left or stalled (longer than
    distributed_timeout_s), as the run's error naming that worker where TensorFlow says which; None for any
    other error."""
    if config.strategy is not Strategy.MULTI_WORKER_MIRRORED or not isinstance(error, _PEER_ERRORS):
        return None
    text = str(error)
    workers = tf_config(config)["cluster"]["worker"] if config.cluster else []
    remote = _REMOTE_TASK.search(text)
    rank = int(remote[1] or remote[2]) if remote else len(workers)
    peer = f" (TensorFlow worker {workers[rank]}, node rank {rank})" if rank < len(workers) else ""
    return Aborted(f"a collective failed: another rank of the job failed, left or stalled{peer}: {reason(text)}")


def reason(text: str) -> str:
    """The line of a TensorFlow error that says what happened: its first but the generic headers."""
    grpc_message = _GRPC_MESSAGE.search(text)
    if grpc_message:
        return grpc_message[1]
    lines = [line.strip() for line in text.splitlines() if line.strip() and line.strip() not in _HEADERS]
    return (lines[0] if lines else "no details")[:300]

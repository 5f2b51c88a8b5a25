"""A TensorFlow run under a tf.distribute strategy: one replica per device, across runners too."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import tensorflow as tf

from fwbench_core.backend import MemoryReading, Workload, process_peak_memory
from fwbench_core.choices import Compilation, DeviceKind, Mode, Strategy
from fwbench_core.errors import FailedPrecondition
from fwbench_core.runs import RunConfig

from .objectives import loss, random_inputs, random_targets
from .strategies import make_strategy, peer_error
from .workload import build_in, compiled, count_trainable, gpu_peak_memory, output_shape


class StrategyWorkload(Workload):
    """A run under a tf.distribute strategy: the model, optimizer and their variables mirrored on every replica
    (identical weights, from the seed), each replica stepping config.batch_size samples of its own (seeded by
    its global replica id), and the gradients summed across replicas by the strategy's all-reduce."""

    def __init__(self, config: RunConfig) -> None:
        if config.compilation is Compilation.XLA and config.device.ref.kind is DeviceKind.CPU:
            raise FailedPrecondition(
                f"compilation xla cannot run strategy {config.strategy.value} on CPU devices: TensorFlow's XLA has "
                "no collectives on CPUs; use compilation graph or eager"
            )
        # First TensorFlow op: MultiWorkerMirroredStrategy configures the collective runtime, only possible before it starts.
        self.strategy = make_strategy(config)
        self.local_replicas = len(self.strategy.extended.worker_devices)
        self.config = config
        self.head = config.head
        self.is_gpu = config.device.ref.kind is DeviceKind.GPU
        self.gpus = self._gpus()
        self.model, self.optimizer = build_in(config, self.strategy.scope(), self.gpus)
        self.inputs = self.strategy.experimental_distribute_values_from_function(self._replica_inputs)
        if config.mode is Mode.TRAIN:
            self.targets = self.strategy.experimental_distribute_values_from_function(self._replica_targets)
        self.parameter_count = count_trainable(self.model)
        self.first_step_traces = config.compilation is not Compilation.EAGER
        # XLA compiles what one replica runs, on its device; the strategy's step around it stays a graph.
        self._replica_step = compiled(self._replica_train, config.compilation)
        self._replica_forward = compiled(self._forward, config.compilation)
        outer = Compilation.EAGER if config.compilation is Compilation.EAGER else Compilation.GRAPH
        self._train = compiled(self._train_graph, outer)
        self._infer = compiled(self._infer_graph, outer)
        self._last = None

    def _replica_device(self, context: tf.distribute.experimental.ValueContext) -> str:
        return self.strategy.extended.worker_devices[context.replica_id_in_sync_group % self.local_replicas]

    def _replica_inputs(self, context) -> tf.Tensor:
        """The replica's own inputs, seeded by the input seed + its replica id across the job, on its device."""
        tf.random.set_seed(self.config.data_seed + context.replica_id_in_sync_group)
        with tf.device(self._replica_device(context)):
            return random_inputs(self.config.model, self.config.batch_size, self.config.input_shape)

    def _replica_targets(self, context) -> tf.Tensor:
        inputs = self.strategy.experimental_local_results(self.inputs)[0]
        with tf.device(self._replica_device(context)):
            return random_targets(self.head, output_shape(self.head, self.model, inputs))

    def _replica_train(self, inputs, targets):
        with tf.GradientTape() as tape:
            output = tf.cast(self.model(inputs, training=True), tf.float32)
            # The optimizer sums the replicas' gradients: each replica's share of the global mean loss.
            value = loss(self.head, output, targets) / self.strategy.num_replicas_in_sync
            scaled = self.optimizer.scale_loss(value)
        variables = self.model.trainable_variables
        self.optimizer.apply(tape.gradient(scaled, variables), variables)
        return value

    def _forward(self, inputs):
        return self.model(inputs, training=False)

    def _train_graph(self):
        return self.strategy.run(self._replica_step, args=(self.inputs, self.targets))

    def _infer_graph(self):
        return self.strategy.run(self._replica_forward, args=(self.inputs,))

    def train_step(self) -> None:
        with self._peers():
            self._last = self._train()

    def infer_step(self) -> None:
        with self._peers():
            self._last = self._infer()

    def synchronize(self) -> None:
        with self._peers():
            if self.is_gpu:
                tf.test.experimental.sync_devices()
            else:
                for value in self.strategy.experimental_local_results(self._last):
                    value.numpy()

    def agree(self, votes: tuple[int, ...]) -> tuple[int, ...]:
        if self.config.strategy is not Strategy.MULTI_WORKER_MIRRORED:
            return votes  # one process: nothing to agree with

        def vote(context):
            # Each worker process votes once, through its first local replica; the others add zeros.
            first = context.replica_id_in_sync_group % self.local_replicas == 0
            return tf.constant(votes if first else [0] * len(votes), tf.int32)

        with self._peers():
            per_replica = self.strategy.experimental_distribute_values_from_function(vote)
            total = self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
            return tuple(int(value) for value in total.numpy())

    @contextmanager
    def _peers(self) -> Iterator[None]:
        """A collective that failed because another worker is gone, as an error naming the workers."""
        try:
            yield
        except Exception as error:
            lost = peer_error(self.config, error)
            if lost is None:
                raise
            raise lost from None

    def _gpus(self) -> list[str]:
        """The replicas' GPUs as TensorFlow's memory statistics name them (GPU:N, numbered among visible GPUs)."""
        if not self.is_gpu:
            return []
        specs = [tf.DeviceSpec.from_string(name) for name in self.strategy.extended.worker_devices]
        return [f"GPU:{spec.device_index}" for spec in specs]

    def peak_memory(self) -> MemoryReading:
        return gpu_peak_memory(self.gpus) if self.gpus else process_peak_memory("worker")

    def close(self) -> None:
        self.__dict__.clear()

"""TensorFlow: a step traced for its batch size against one traced for any batch size, trace and step times side by
side.

A sweep over batch sizes traces TensorFlow's step again for every batch (2 s a trace for resnet18 training on this
VM). A step traced with the batch dimension unknown (what Keras' fit and predict trace for a batched dataset) serves
every batch with one trace. Both functions run on one build, in alternating windows, so drift hits them alike:

    .venvs/tensorflow/bin/python studies/trace_shape.py [--models resnet18,mobilenet_v2] [--batch-sizes 2,8]
"""

from __future__ import annotations

import argparse
import statistics
import time


def steps(model, optimizer, head, mode: str, generic: bool, inputs, targets):
    """The step as a tf.function over (inputs, targets); `generic` leaves the batch dimension unknown."""
    import tensorflow as tf

    from fwbench_tensorflow.objectives import loss

    def train(x, y):
        with tf.GradientTape() as tape:
            value = loss(head, tf.cast(model(x, training=True), tf.float32), y)
        variables = model.trainable_variables
        optimizer.apply(tape.gradient(value, variables), variables)
        return value

    def infer(x, y):
        return model(x, training=False)

    signature = None
    if generic:
        signature = [tf.TensorSpec((None, *tensor.shape[1:]), tensor.dtype) for tensor in (inputs, targets)]
    return tf.function(train if mode == "train" else infer, input_signature=signature)


def timed_window(function, inputs, targets, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        function(inputs, targets).numpy()
        times.append(time.perf_counter() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--modes", default="train,infer")
    parser.add_argument("--batch-sizes", default="2,8")
    parser.add_argument("--shape", default="3x64x64")
    parser.add_argument("--windows", type=int, default=8, help="alternating windows per function")
    parser.add_argument("--steps", type=int, default=10, help="steps per window")
    args = parser.parse_args()
    # Imported here, so that --help needs no TensorFlow (the studies' smoke test runs it from the aggregator's).
    import tensorflow as tf
    from fwbench_keras.models import MODELS
    from fwbench_keras.objectives import keras_input_shape

    from fwbench_core.catalog import load_catalog
    from fwbench_tensorflow.objectives import random_inputs, random_targets

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    catalog = load_catalog(MODELS)
    shape = tuple(int(side) for side in args.shape.split("x"))
    print(
        f"{'model':14} {'mode':6} {'batch':>5} {'trace fixed':>11} {'trace any':>9} {'step fixed':>10} "
        f"{'step any':>9} {'any/fixed':>9}"
    )
    ratios = []
    for name in args.models.split(","):
        spec = catalog.spec(name)
        head = spec.head({})
        model = MODELS.builder(spec).build(spec, keras_input_shape(spec, shape), {})
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
        optimizer.build(model.trainable_variables)
        for mode in args.modes.split(","):
            generic_function = None
            for batch in (int(b) for b in args.batch_sizes.split(",")):
                inputs = random_inputs(spec, batch, shape)
                targets = random_targets(head, tuple(model(inputs, training=False).shape))
                fixed_function = steps(model, optimizer, head, mode, False, inputs, targets)
                started = time.perf_counter()
                fixed_function(inputs, targets).numpy()
                trace_fixed_s = time.perf_counter() - started
                if generic_function is None:  # one trace serves every batch size that follows
                    generic_function = steps(model, optimizer, head, mode, True, inputs, targets)
                started = time.perf_counter()
                generic_function(inputs, targets).numpy()
                trace_any_s = time.perf_counter() - started
                timed_window(fixed_function, inputs, targets, args.steps)
                timed_window(generic_function, inputs, targets, args.steps)
                fixed, generic = [], []
                for window in range(args.windows):
                    pair = [(fixed_function, fixed), (generic_function, generic)]
                    for function, times in pair if window % 2 == 0 else reversed(pair):
                        times.append(statistics.median(timed_window(function, inputs, targets, args.steps)))
                ratio = statistics.median(g / f for f, g in zip(fixed, generic))
                ratios.append(ratio)
                print(
                    f"{name:14} {mode:6} {batch:>5} {trace_fixed_s:>10.2f}s {trace_any_s:>8.2f}s "
                    f"{statistics.median(fixed) * 1e3:>8.1f}ms {statistics.median(generic) * 1e3:>7.1f}ms "
                    f"{ratio:>9.3f}"
                )
    print(
        f"median any/fixed over {len(ratios)} configurations: {statistics.median(ratios):.3f} "
        f"(range {min(ratios):.3f} to {max(ratios):.3f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

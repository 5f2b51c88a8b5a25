"""Compilation onnxruntime, TensorFlow's part: the Keras model converted by tf2onnx; the core's session runs it."""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf

from fwbench_core.errors import FailedPrecondition
from fwbench_core.onnx_runtime import OnnxRuntimeWorkload, import_onnxruntime
from fwbench_core.runs import RunConfig
from fwbench_core.sysinfo import host_available_memory_bytes

from .objectives import random_inputs

# The opset torch.onnx.export writes by default too.
OPSET = 18
# tf2onnx 1.17 takes host memory of about 70 times the model's weights to convert it (measured on the CPU:
# resnet50, 102 MB of weights, peaked at 7.0 GB; vgg16 and gpt2_small, about 500 MB, passed 20 GB and were
# killed): a conversion that cannot fit is refused before it takes the runner down with it.
CONVERSION_BYTES_PER_WEIGHT_BYTE = 70


def onnxruntime_workload(config: RunConfig, build_model: Callable[[RunConfig], keras.Model]) -> OnnxRuntimeWorkload:
    ort = import_onnxruntime("onnx", "tf2onnx")
    import onnx
    import tf2onnx

    keras.utils.set_random_seed(config.seed)
    with tf.device("/CPU:0"):
        model = build_model(config)
        if config.data_seed != config.seed:
            tf.random.set_seed(config.data_seed)  # inputs of their own seed; from the seed, they follow the weights
        inputs = random_inputs(config.model, config.batch_size, config.input_shape)
    parameter_count = sum(int(tf.size(w)) for w in model.trainable_weights)
    needed_bytes = CONVERSION_BYTES_PER_WEIGHT_BYTE * sum(
        int(tf.size(w)) * tf.as_dtype(w.dtype).size for w in model.weights
    )
    available_bytes = host_available_memory_bytes()
    if available_bytes is not None and needed_bytes > available_bytes:
        raise FailedPrecondition(
            f"compilation onnxruntime: tf2onnx needs about {needed_bytes / 2**30:.1f} GiB of host memory to convert "
            f"{config.model.name} ({CONVERSION_BYTES_PER_WEIGHT_BYTE} times its weights), and this host has "
            f"{available_bytes / 2**30:.1f} GiB available"
        )
    signature = (tf.TensorSpec((None, *inputs.shape[1:]), inputs.dtype, name="inputs"),)
    try:
        model_proto, _ = tf2onnx.convert.from_function(
            tf.function(lambda x: model(x, training=False)), input_signature=signature, opset=OPSET
        )
    except Exception as error:  # the converter's failures share no base class
        raise FailedPrecondition(
            f"compilation onnxruntime: tf2onnx cannot convert {config.model.name}: {type(error).__name__}: {error}"
        ) from None
    # tf2onnx leaves an op it cannot convert in the graph as it was, which no ONNX runtime can run.
    unconverted = sorted(
        {node.op_type for node in model_proto.graph.node if not onnx.defs.has(node.op_type, node.domain)}
    )
    if unconverted:
        raise FailedPrecondition(
            f"compilation onnxruntime: tf2onnx {tf2onnx.__version__} cannot convert {config.model.name}'s TensorFlow "
            f"op(s) {', '.join(unconverted)} to ONNX"
        )
    # A tensor the model captures rather than holds in a variable (Keras's Normalization layer's mean and
    # variance) becomes an input of tf2onnx's graph, not a constant: the run has nothing to feed it.
    captured = [graph_input.name for graph_input in model_proto.graph.input[1:]]
    if captured:
        raise FailedPrecondition(
            f"compilation onnxruntime: tf2onnx {tf2onnx.__version__} leaves {config.model.name}'s captured tensor(s) "
            f"{', '.join(captured)} as inputs of the ONNX graph rather than constants"
        )
    return OnnxRuntimeWorkload(
        config, ort, model_proto.SerializeToString(), inputs.numpy(), parameter_count, f"tf2onnx {tf2onnx.__version__}"
    )

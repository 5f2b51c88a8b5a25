"""Forward FLOPs of a Keras model, counted from its traced TensorFlow graph.

Counted the same way as the PyTorch runner: 2 x multiply-accumulates of
convolutions and matrix products (dense, attention, recurrent), nothing else.
Recurrent layers run as While loops: their body is counted once per step.
"""

from __future__ import annotations

import math

import tensorflow as tf

FLOPS_METHOD = "TensorFlow graph of the traced forward pass, batch 1, ops the outputs depend on: Conv2D, DepthwiseConv2dNative, MatMul, BatchMatMul, Einsum, cuDNN RNN; While bodies x steps"


def _dims(tensor) -> list[int]:
    dims = tensor.shape.as_list()
    if any(d is None for d in dims):
        raise ValueError(f"cannot count FLOPs of {tensor.name}: its shape {dims} is not static")
    return dims


def _einsum_macs(op) -> int:
    equation = op.get_attr("equation").decode().replace(" ", "")
    inputs, _ = equation.split("->")
    sizes: dict[str, int] = {}
    for letters, tensor in zip(inputs.split(","), op.inputs):
        for letter, size in zip(letters, _dims(tensor)):
            sizes[letter] = size
    return math.prod(sizes.values())


def _macs(op) -> int:
    kind = op.type
    if kind == "Conv2D":
        kernel_h, kernel_w, kernel_in, _ = _dims(op.inputs[1])
        return math.prod(_dims(op.outputs[0])) * kernel_h * kernel_w * kernel_in
    if kind == "DepthwiseConv2dNative":
        kernel_h, kernel_w, _, _ = _dims(op.inputs[1])
        return math.prod(_dims(op.outputs[0])) * kernel_h * kernel_w
    if kind == "MatMul":
        a = _dims(op.inputs[0])
        inner = a[0] if op.get_attr("transpose_a") else a[1]
        return math.prod(_dims(op.outputs[0])) * inner
    if kind in ("BatchMatMulV2", "BatchMatMulV3", "BatchMatMul"):
        a = _dims(op.inputs[0])
        inner = a[-2] if op.get_attr("adj_x") else a[-1]
        return math.prod(_dims(op.outputs[0])) * inner
    if kind == "Einsum":
        return _einsum_macs(op)
    if kind in ("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3"):
        return _cudnn_rnn_macs(op)
    return 0


# Gate blocks per cell: Keras runs GRU and LSTM layers as one cuDNN op where a GPU is visible.
CUDNN_GATES = {"rnn_relu": 1, "rnn_tanh": 1, "gru": 3, "lstm": 4}


def _cudnn_rnn_macs(op) -> int:
    """One cuDNN recurrent layer (Keras' are single-layer, unprojected): gates x hidden x (input + hidden) per step and direction."""
    steps, batch, features = _dims(op.inputs[0])
    if op.type == "CudnnRNNV3" and not op.get_attr("time_major"):
        steps, batch = batch, steps
    hidden = _dims(op.inputs[1])[-1]
    directions = 2 if op.get_attr("direction").decode() == "bidirectional" else 1
    gates = CUDNN_GATES[op.get_attr("rnn_mode").decode()]
    return directions * steps * batch * gates * hidden * (features + hidden)


def _while_steps(op) -> int:
    """Steps of a Keras RNN loop: the time length of the sequence it unstacks into a TensorList."""
    for tensor in op.inputs:
        source = tensor.op
        if source.type == "TensorListFromTensor":
            return _dims(source.inputs[0])[0]
    raise ValueError(f"cannot tell how many steps the loop {op.name} runs")


def _live_ops(graph) -> set:
    """Ops the graph's outputs depend on. Keras' RNN loop traces one step before the loop only
    to learn the output's shape and discards it; grappler prunes it, so it must not count."""
    live, pending = set(), [t.op for t in graph.outputs] + list(graph.control_outputs)
    while pending:
        op = pending.pop()
        if op not in live:
            live.add(op)
            pending.extend(t.op for t in op.inputs)
            pending.extend(op.control_inputs)
    return live


def graph_macs(graph) -> int:
    total = 0
    live = _live_ops(graph)
    for op in graph.get_operations():
        if op not in live:
            continue
        total += _macs(op)
        if op.type in ("While", "StatelessWhile"):
            body = graph._get_function(op.get_attr("body").name).graph
            total += _while_steps(op) * graph_macs(body)
        elif op.type in ("PartitionedCall", "StatefulPartitionedCall"):
            total += graph_macs(graph._get_function(op.get_attr("f").name).graph)
    return total


def forward_flops(model, sample: tf.Tensor) -> int:
    traced = tf.function(lambda x: model(x, training=False)).get_concrete_function(
        tf.TensorSpec(sample.shape, sample.dtype)
    )
    return 2 * graph_macs(traced.graph)

"""Forward FLOPs of a Keras model, counted from its traced TensorFlow graph.

Counted the same way as the PyTorch runner: 2 x multiply-accumulates of
convolutions and matrix products (dense, attention, recurrent), nothing else.
Recurrent layers run as While loops: their body is counted once per step.
"""

from __future__ import annotations

import math

import tensorflow as tf

FLOPS_METHOD = "TensorFlow graph of the traced forward pass, batch 1: Conv2D, DepthwiseConv2dNative, MatMul, BatchMatMul, Einsum; While bodies x steps"


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
    return 0


def _while_steps(op) -> int:
    """Steps of a Keras RNN loop: the time length of the sequence it unstacks into a TensorList."""
    for tensor in op.inputs:
        source = tensor.op
        if source.type == "TensorListFromTensor":
            return _dims(source.inputs[0])[0]
    raise ValueError(f"cannot tell how many steps the loop {op.name} runs")


def graph_macs(graph) -> int:
    total = 0
    for op in graph.get_operations():
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



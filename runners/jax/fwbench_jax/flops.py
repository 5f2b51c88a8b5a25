"""Forward FLOPs of a Flax model, counted from the jaxpr of its forward pass.

Counted the same way as the PyTorch runner: 2 x multiply-accumulates of convolutions and matrix
products, nothing else. A jaxpr is the exact list of primitives the forward pass runs, so only two of
them count: conv_general_dilated and dot_general. Nested jaxprs (jit, custom derivatives) are counted
where they are called, a scan's body once per iteration.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
from jax.extend import core

FLOPS_METHOD = "jaxpr of the forward pass, batch 1: conv_general_dilated and dot_general; scan bodies x length"


def _conv_macs(equation) -> int:
    output = equation.outvars[0].aval.shape
    kernel = equation.invars[1].aval.shape
    _, kernel_spec, _ = equation.params["dimension_numbers"]
    # kernel_spec: (output feature dim, input feature dim, spatial dims...); the input feature dim is
    # already the channels of one group.
    in_features = kernel[kernel_spec[1]]
    spatial = math.prod(kernel[d] for d in kernel_spec[2:])
    return math.prod(output) * in_features * spatial


def _dot_macs(equation) -> int:
    (lhs_contracting, _), _ = equation.params["dimension_numbers"]
    lhs = equation.invars[0].aval.shape
    return math.prod(equation.outvars[0].aval.shape) * math.prod(lhs[d] for d in lhs_contracting)


def _inner_jaxprs(equation):
    for value in equation.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, core.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, core.Jaxpr):
                yield item


def jaxpr_macs(jaxpr) -> int:
    total = 0
    for equation in jaxpr.eqns:
        name = equation.primitive.name
        if name == "conv_general_dilated":
            total += _conv_macs(equation)
        elif name == "dot_general":
            total += _dot_macs(equation)
        repeats = equation.params.get("length", 1) if name == "scan" else 1
        total += repeats * sum(jaxpr_macs(inner) for inner in _inner_jaxprs(equation))
    return total


def forward_flops(forward: Callable, *args) -> int:
    """FLOPs of forward(*args); args may be arrays or jax.ShapeDtypeStruct (nothing is computed)."""
    return 2 * jaxpr_macs(jax.make_jaxpr(forward)(*args).jaxpr)

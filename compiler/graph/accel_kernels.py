"""An accelerator kernel per fused group of a partitioned int8 graph, with its operand bindings.

``accelerator_kernel(cfg, graph, nodes)`` compiles one group that ``fuse_accelerator_ops`` left
(``[conv]``, ``[conv, add]``, ``[conv, pool]``, ``[conv, add, pool]``, ``[dense]``,
``[dense, add]`` or a lone ``[pool]``) with ``compiler.topi.vta`` into a kernel whose integer
semantics are the graph nodes' own (the requantization and add steps stored in their
attributes), and says which graph value binds each slot of its program image, in which NCHW
shape and blocked layout (``runtime.device.vta.launch.Operand``).

Example:
    >>> from tensorforge.compiler.graph.passes.fuse_accel import ANCHORS
    >>> ANCHORS
    ('tf.qconv2d', 'tf.qdense')
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...hw.config import HWConfig
from ...hw.isa import AluOp
from ...runtime.device.vta.launch import Operand
from ..quantize.requant import RequantParams
from ..quantize.residual import AddParams
from .ir import Graph, Node
from .ops.qnn import add_from_attrs, requant_from_attrs
from .passes.fuse_accel import ANCHORS

#: groups a lone node of these ops can form on the accelerator
STANDALONE = ("tf.qmaxpool",)


@dataclass
class AcceleratorKernel:
    """A compiled group: the topi kernel (``image``, ``run``), the graph values it reads and
    writes in parameter order, and each parameter's binding to a slot of the image."""

    kernel: Any  # compiler.topi.vta.VtaKernel or PoolKernel
    values: tuple[str, ...]
    operands: tuple[Operand, ...]
    outputs: tuple[str, ...]


def has_accelerator_kernel(graph: Graph, nodes: list[Node]) -> bool:
    """Whether ``accelerator_kernel`` compiles this group (else it runs on the CPU)."""
    first = nodes[0]
    if first.attr_dict.get("target") != "vta":
        return False
    if first.op in ANCHORS:
        return True
    # A lone max pooling without padding (the kernel has none; zero padding would be exact
    # only for non-negative inputs).
    return len(nodes) == 1 and first.op in STANDALONE and not any(first.attr("pads"))


def _nchw(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    if len(shape) == 2:
        return (shape[0], shape[1], 1, 1)
    n, c, h, w = shape
    return (n, c, h, w)


def fold_rounding(requant: RequantParams, bias: np.ndarray) -> tuple[RequantParams, np.ndarray]:
    """Move a leading rounding ``ADD`` into the int32 bias: one ALU instruction less per tile.

    Exact: the accumulator and the ALU both wrap modulo ``2**acc_width``, so adding the
    constant before or after the accumulation gives the same value, as long as the folded bias
    still fits int32 (otherwise nothing is folded).
    """
    if not requant.steps or requant.steps[0].op != AluOp.ADD:
        return requant, bias
    folded = bias.astype(np.int64) + requant.steps[0].imm
    if np.abs(folded).max(initial=0) >= 2**31:
        return requant, bias
    return replace(requant, steps=requant.steps[1:]), folded.astype(np.int32)


def _add_params(add: Node, conv_out: str) -> AddParams:
    """The add's parameters with the conv's output as the left operand (swapping operands and
    their scaling steps is exact: the ALU's ADD commutes)."""
    params = add_from_attrs(add.attr_dict)
    if add.inputs[0] == conv_out:
        return params
    return AddParams(params.rhs, params.lhs, params.requant)


def accelerator_kernel(
    cfg: HWConfig, graph: Graph, nodes: list[Node], vthreads: int = 1
) -> AcceleratorKernel:
    """Compile one accelerator group of a partitioned, fused int8 graph.

    Raises:
        ValueError: for a group the accelerator code generator cannot express (named).
    """
    if not has_accelerator_kernel(graph, nodes):
        names = [f"{n.name} ({n.op})" for n in nodes]
        raise ValueError(f"group {names} must start with an offloaded conv/dense or be a lone "
                         "max pooling without padding to run on the accelerator")  # fmt: skip
    if nodes[0].op in ANCHORS:
        return _anchored(cfg, graph, nodes, vthreads)
    return _pool(cfg, graph, nodes[0], vthreads)


def _anchored(cfg: HWConfig, graph: Graph, nodes: list[Node], vthreads: int) -> AcceleratorKernel:
    from ..topi import vta  # the accelerator code generator (loads the simulators)
    from ..topi.vta.conv2d import INPUT, OUTPUT, RESIDUAL

    anchor, rest = nodes[0], nodes[1:]
    add = next((n for n in rest if n.op == "tf.qadd"), None)
    pool = next((n for n in rest if n.op == "tf.qmaxpool"), None)
    x, weight = anchor.inputs[0], graph.constants[anchor.inputs[1]]
    b_name = anchor.inputs[2] if len(anchor.inputs) > 2 else ""  # the bias is optional
    bias = graph.constants[b_name] if b_name else np.zeros(weight.shape[0], np.int32)
    requant, bias = fold_rounding(requant_from_attrs(anchor.attr_dict), bias)
    residual = _add_params(add, anchor.outputs[0]) if add else None
    x_shape = graph.types[x].shape
    common = {"requant": requant, "residual": residual, "vthreads": vthreads}
    if anchor.op == "tf.qdense":
        kernel = vta.dense(cfg, x_shape[0], weight, bias, **common)
    else:
        a = anchor.attr_dict
        top, left, bottom, right = a["pads"]
        if (top, left) != (bottom, right):
            raise ValueError(f"node {anchor.name!r}: the accelerator needs symmetric padding, "
                             f"not {a['pads']}")  # fmt: skip
        window = tuple(pool.attr("kernel_shape")) if pool else None
        kernel = vta.conv2d(cfg, tuple(x_shape), weight, bias, stride=tuple(a["strides"]),
                            padding=(top, left), max_pool=window, **common)  # fmt: skip
    values = [x]
    operands = [Operand(INPUT, _nchw(x_shape), cfg.block_in)]
    if add is not None:
        r = add.inputs[1] if add.inputs[0] == anchor.outputs[0] else add.inputs[0]
        values.append(r)
        operands.append(Operand(RESIDUAL, _nchw(graph.types[r].shape), cfg.block_out))
    out = nodes[-1].outputs[0]
    operands.append(Operand(OUTPUT, _nchw(graph.types[out].shape)))
    return AcceleratorKernel(kernel, (*values, out), tuple(operands), (out,))


def _pool(cfg: HWConfig, graph: Graph, node: Node, vthreads: int) -> AcceleratorKernel:
    from ..topi import vta
    from ..topi.vta.pool import INPUT, OUTPUT

    x, out = node.inputs[0], node.outputs[0]
    x_shape = graph.types[x].shape
    kernel = vta.max_pool2d(cfg, tuple(x_shape), tuple(node.attr("kernel_shape")),
                            tuple(node.attr("strides")), vthreads=vthreads)  # fmt: skip
    operands = (
        Operand(INPUT, _nchw(x_shape), cfg.block_out),  # pooling reads an output's layout
        Operand(OUTPUT, _nchw(graph.types[out].shape)),
    )
    return AcceleratorKernel(kernel, (x, out), operands, (out,))

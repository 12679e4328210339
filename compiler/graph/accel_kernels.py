"""An accelerator kernel per fused group of a partitioned int8 graph, with its operand bindings.

``accelerator_kernel(cfg, graph, nodes)`` compiles one group that ``fuse_accelerator_ops`` left
(``[conv]``, ``[conv, add]``, ``[conv, pool]``, ``[conv, add, pool]``, ``[dense]``,
``[dense, add]`` or a lone ``[pool]``) with ``compiler.vta`` into a kernel whose integer
semantics are the graph nodes' own (the requantization and add steps stored in their
attributes), and says which graph value binds each slot of its program image, in which NCHW
shape and blocked layout (``runtime.device.vta.launch.Operand``).

``packed_tensors(graph, cfg)`` is the graph-level layout transformation of the accelerator
partition: the tensors that flow only between accelerator kernels, which stay in the blocked
layout in the module's memory (their kernels bind them as ``packed`` operands).

Example:
    >>> from tensorforge.compiler.graph.passes.fuse_accel import ANCHORS
    >>> ANCHORS
    ('tf.qconv2d', 'tf.qdense')
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...hw.config import HWConfig
from ...hw.isa import AluOp
from ...runtime.device.vta.launch import Operand
from ...runtime.device.vta.layout import blocked_shape
from ..quantize.requant import RequantParams
from ..quantize.residual import AddParams
from .ir import Graph, Node
from .ops.qnn import add_from_attrs, requant_from_attrs
from .passes.fuse_accel import ANCHORS
from .passes.fuse_ops import group_order

#: groups a lone node of these ops can form on the accelerator
STANDALONE = ("tf.qmaxpool",)


@dataclass
class AcceleratorKernel:
    """A compiled group: the topi kernel (``image``, ``run``), the graph values it reads and
    writes in parameter order, and each parameter's binding to a slot of the image."""

    kernel: Any  # compiler.vta.VtaKernel or PoolKernel
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


def accelerator_reads(cfg: HWConfig, nodes: list[Node]) -> tuple[tuple[str, int], ...]:
    """(value, channel block) of each tensor an accelerator group reads from memory, in
    parameter order: a conv/dense input with BLOCK_IN, a residual operand and a lone pooling's
    input in an output's layout (BLOCK_OUT)."""
    anchor = nodes[0]
    if anchor.op not in ANCHORS:
        return ((anchor.inputs[0], cfg.block_out),)
    reads = [(anchor.inputs[0], cfg.block_in)]
    add = next((n for n in nodes[1:] if n.op == "tf.qadd"), None)
    if add is not None:
        r = add.inputs[1] if add.inputs[0] == anchor.outputs[0] else add.inputs[0]
        reads.append((r, cfg.block_out))
    return tuple(reads)


def packed_tensors(graph: Graph, cfg: HWConfig) -> dict[str, tuple[int, ...]]:
    """The tensors of a fused, partitioned graph that stay in the accelerator's blocked layout,
    each with its blocked shape (``runtime.device.vta.layout.blocked_shape``).

    A tensor stays blocked when an accelerator kernel writes it (with channel blocks of
    BLOCK_OUT), it is not a graph output, and every group that reads it is an accelerator kernel
    reading it with the same channel blocks: always for a residual operand or a pooling's input,
    only when BLOCK_IN equals BLOCK_OUT for a conv/dense input. Any other tensor stays NCHW,
    packed and unpacked at the kernels' boundary.

    Before: ``conv2 -> %a -> conv3`` (both "vta"): %a int8[1, 32, 8, 8] in memory
    After:  %a -> (1, 2, 8, 8, 1, 16) on ``pynq``: conv2 stores it and conv3 loads it as it is.

    Raises:
        ValueError: for a graph without fusion groups (named).
    """
    if graph.groups is None:
        raise ValueError(f"packed_tensors needs a fused graph (run fuse_ops on {graph.name!r})")
    written, reads = _hand_offs(graph, cfg)
    return {
        value: blocked_shape(cfg, _nchw(graph.types[value].shape), cfg.block_out)
        for value in written
        if value not in graph.outputs
        and reads.get(value)
        and all(block == cfg.block_out for block in reads[value])
    }


def _hand_offs(graph: Graph, cfg: HWConfig) -> tuple[list[str], dict[str, list[int | None]]]:
    """The values accelerator kernels write, and for each value read across a group boundary
    the channel block of every read (None: a read by a CPU kernel)."""
    written: list[str] = []
    reads: dict[str, list[int | None]] = {}
    for _, nodes in group_order(graph):
        kernel_reads: dict[str, int] = {}
        if has_accelerator_kernel(graph, nodes):
            written.append(nodes[-1].outputs[0])
            for value, block in accelerator_reads(cfg, nodes):
                reads.setdefault(value, []).append(block)
                kernel_reads[value] = block
        inside = {o for n in nodes for o in n.outputs}
        for value in dict.fromkeys(i for n in nodes for i in n.inputs if i and i not in inside):
            if value not in graph.constants and value not in kernel_reads:
                reads.setdefault(value, []).append(None)
    return written, reads


def fold_rounding(requant: RequantParams, bias: np.ndarray) -> tuple[RequantParams, np.ndarray]:
    """Move a leading rounding ``ADD`` into the int32 bias: one ALU instruction less per tile.

    Exact: the accumulator and the ALU both wrap modulo ``2**acc_width``, so adding the
    constant before or after the accumulation gives the same value, as long as the folded bias
    still fits int32 (otherwise nothing is folded). Not with per-channel multipliers: they
    multiply between the bias and the steps.
    """
    if requant.channel_multipliers or not requant.steps or requant.steps[0].op != AluOp.ADD:
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
    cfg: HWConfig,
    graph: Graph,
    nodes: list[Node],
    vthreads: int = 1,
    packed: Collection[str] = (),
) -> AcceleratorKernel:
    """Compile one accelerator group of a partitioned, fused int8 graph.

    The values in `packed` (``packed_tensors``) are bound as packed operands: the caller keeps
    them in the slot's blocked layout and shape.

    Raises:
        ValueError: for a group the accelerator code generator cannot express (named).
    """
    if not has_accelerator_kernel(graph, nodes):
        names = [f"{n.name} ({n.op})" for n in nodes]
        raise ValueError(f"group {names} must start with an offloaded conv/dense or be a lone "
                         "max pooling without padding to run on the accelerator")  # fmt: skip
    if nodes[0].op in ANCHORS:
        kernel, slots = _anchored(cfg, graph, nodes, vthreads)
    else:
        kernel, slots = _pool(cfg, graph, nodes[0], vthreads)
    *in_slots, out_slot = slots
    reads, out = accelerator_reads(cfg, nodes), nodes[-1].outputs[0]
    operands = [
        Operand(slot, _nchw(graph.types[v].shape), block, v in packed)
        for slot, (v, block) in zip(in_slots, reads, strict=True)
    ]
    operands.append(Operand(out_slot, _nchw(graph.types[out].shape), packed=out in packed))
    values = (*(v for v, _ in reads), out)
    return AcceleratorKernel(kernel, values, tuple(operands), (out,))


def _anchored(cfg: HWConfig, graph: Graph, nodes: list[Node], vthreads: int) -> tuple[Any, list]:
    """The conv/dense kernel of a group and its slots: input, [residual,] output."""
    from .. import vta  # the accelerator code generator (loads the simulators)
    from ..vta.layout import INPUT, OUTPUT, RESIDUAL

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
        window = tuple(pool.attr("kernel_shape")) if pool else None
        kernel = vta.conv2d(cfg, tuple(x_shape), weight, bias, stride=tuple(a["strides"]),
                            padding=tuple(a["pads"]), max_pool=window, groups=a.get("group", 1),
                            **common)  # fmt: skip
    return kernel, [INPUT, *([RESIDUAL] if add else []), OUTPUT]


def _pool(cfg: HWConfig, graph: Graph, node: Node, vthreads: int) -> tuple[Any, list]:
    from .. import vta
    from ..vta.pool import INPUT, OUTPUT

    kernel = vta.max_pool2d(cfg, tuple(graph.types[node.inputs[0]].shape),
                            tuple(node.attr("kernel_shape")), tuple(node.attr("strides")),
                            vthreads=vthreads)  # fmt: skip
    return kernel, [INPUT, OUTPUT]

"""Accelerator fusion: a conv/dense on the accelerator absorbs the residual add and the max
pooling that follow it, so that their results never travel through DRAM.

Runs after ``fuse_ops`` on a partitioned graph: it merges fused groups, it never changes nodes.
A group ``[conv]`` (target "vta") takes its output's only reader when that reader also runs on
the accelerator and is

- a ``tf.qadd`` whose other operand comes from elsewhere (the residual, loaded by the kernel
  with ``LOAD ACC_8BIT``) and that scales neither operand by zero (a ``MUL 0``: one operand's
  scale so far below the other's that it rounds away; the kernel's stage would be a constant,
  which the ALU lowering does not take, so such an add runs on the CPU), and then
- a ``tf.qmaxpool`` of a conv (not a dense) without padding whose window equals its stride (the
  non-overlapping pooling ``compiler.vta.conv2d(..., max_pool=...)`` fuses).

A value read by two nodes, or an output of the graph, stays in memory: the group ends before
its reader. Given the config, a chain is cut short where the fused kernel would have no tiling
that fits the SRAMs (a residual operand doubles the ACC tile; a pooling needs whole windows of
rows per tile), so that each part still compiles.
"""

from __future__ import annotations

from ....hw.config import HWConfig
from ..ir import Graph, Node
from .fuse_ops import FusedGroup
from .partition import fit_problem, is_offloaded

ANCHORS = ("tf.qconv2d", "tf.qdense")


def is_fusable_pool(node: Node) -> bool:
    """A max pooling the conv kernel can fuse: no padding, window equal to the stride."""
    return (
        node.op == "tf.qmaxpool"
        and not any(node.attr("pads"))
        and tuple(node.attr("kernel_shape")) == tuple(node.attr("strides"))
    )


def _scales_an_operand_to_zero(add: Node) -> bool:
    a = add.attr_dict
    return any(
        a.get(f"{side}_op") == "MUL" and a.get(f"{side}_imm") == 0 for side in ("lhs", "rhs")
    )


def _only_reader(graph: Graph, value: str, readers: dict[str, list[Node]]) -> Node | None:
    users = readers.get(value, [])
    if value in graph.outputs or len(users) != 1 or not is_offloaded(users[0]):
        return None
    return users[0]


def accelerator_chain(graph: Graph, anchor: Node, cfg: HWConfig | None = None) -> list[Node]:
    """The anchor and the nodes fused after it (``[conv]``, ``[conv, add]``, ``[conv, pool]``,
    ``[conv, add, pool]``); with `cfg`, only as far as the fused kernel fits its SRAMs."""
    readers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for value in dict.fromkeys(node.inputs):
            readers.setdefault(value, []).append(node)
    chain = [anchor]
    nxt = _only_reader(graph, anchor.outputs[0], readers)
    if (
        nxt is not None
        and nxt.op == "tf.qadd"
        and nxt.inputs[0] != nxt.inputs[1]
        and not _scales_an_operand_to_zero(nxt)
    ):
        chain.append(nxt)
        nxt = _only_reader(graph, nxt.outputs[0], readers)
    if nxt is not None and anchor.op == "tf.qconv2d" and is_fusable_pool(nxt):
        chain.append(nxt)
    while cfg is not None and len(chain) > 1 and fit_problem(graph, chain, cfg):
        chain.pop()
    return chain


def fuse_accelerator_ops(graph: Graph, cfg: HWConfig | None = None) -> Graph:
    """Merge each offloaded conv/dense group with the add and pooling groups it can absorb
    (with `cfg`, those whose fused kernel still fits the SRAMs of `cfg`).

    Before: groups `[conv2]`, `[pool]` (conv2 and a 2x2/2 max pool, both target "vta")
    After:  group `[conv2, pool]`, one accelerator kernel.
    """
    if graph.groups is None:
        raise ValueError(
            f"fuse_accelerator_ops needs a fused graph (run fuse_ops on {graph.name!r})"
        )
    owner = {name: g for g in graph.groups for name in g.nodes}
    absorbed: dict[str, FusedGroup] = {}
    merged: dict[str, FusedGroup] = {}
    for node in graph.nodes:
        if node.op not in ANCHORS or not is_offloaded(node) or node.name in absorbed:
            continue
        chain = accelerator_chain(graph, node, cfg)
        # An add of two convs' outputs (a downsampling block's shortcut) goes to the first.
        taken = any(n.name in absorbed for n in chain[1:])
        if len(chain) == 1 or taken or any(len(owner[n.name].nodes) != 1 for n in chain):
            continue
        group = owner[node.name]
        merged[group.name] = FusedGroup(group.name, tuple(n.name for n in chain), group.pattern)
        for n in chain[1:]:
            absorbed[n.name] = owner[n.name]
    gone = {g.name for g in absorbed.values()}
    groups = tuple(merged.get(g.name, g) for g in graph.groups if g.name not in gone)
    return graph.replace(groups=groups)

"""Layout alteration: 2-D convolutions move to the channel-blocked NCHW[c]c layout (as TVM's
x86 conv2d_NCHWc), elementwise ops between them follow, and LayoutTransform nodes are inserted
only where an op needs plain NCHW."""

from __future__ import annotations

import numpy as np

from ..ir import Graph, GraphBuilder, Node
from ..ops.layout import pack_weight, to_blocked
from ..ops.nn import window_geometry
from ..registry import Pattern, get_op
from .eliminate_dead_code import eliminate_dead_code

_BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min"}

#: the block the CPU compile moves convolution chains to (`compile_graph`): 32 channels, the
#: output-channel block `topi.x86.conv2d.default_config` takes where it divides the channels
#: (two 16-lane vectors per register tile row)
CPU_BLOCK = 32


def _block_for(channels: int, block: int) -> int:
    """The largest divisor of `channels` that is at most `block`."""
    return max(d for d in range(1, min(block, channels) + 1) if channels % d == 0)


class _Rewriter:
    def __init__(self, graph: Graph, block: int, chains_only: bool = False) -> None:
        self.graph, self.block = graph, block
        self.flows = _flowing_values(graph) if chains_only else None
        self.b = GraphBuilder(graph.name)
        for name in graph.inputs:
            ty = graph.types[name]
            self.b.add_input(name, ty.shape, ty.dtype)
        for name, value in graph.constants.items():
            self.b.add_constant(name, value)
        self.blocked: dict[str, tuple[str, int]] = {}  # NCHW value -> (blocked value, block)
        self.plain: set[str] = set(graph.inputs) | set(graph.constants)

    def need_plain(self, name: str) -> str:
        if name and name not in self.plain:
            blocked, block = self.blocked[name]
            attrs = {"src": "NCHWc", "dst": "NCHW", "block": block}
            self.b.add_node(
                "LayoutTransform", [blocked], attrs, name=f"{name}_to_nchw", outputs=[name]
            )
            self.plain.add(name)
        return name

    def need_blocked(self, name: str, block: int) -> str:
        if name in self.blocked and self.blocked[name][1] == block:
            return self.blocked[name][0]
        attrs = {"src": "NCHW", "dst": "NCHWc", "block": block}
        (out,) = self.b.add_node(
            "LayoutTransform", [self.need_plain(name)], attrs, name=f"{name}_to_nchw{block}c"
        )
        self.blocked[name] = (out, block)
        return out

    def emit_blocked(self, node: Node, op: str, inputs: list[str], attrs: dict, block: int) -> None:
        (out,) = self.b.add_node(
            op, inputs, attrs, name=node.name, outputs=[self.b.fresh(f"{node.outputs[0]}_nchwc")]
        )
        self.blocked[node.outputs[0]] = (out, block)

    def visit(self, node: Node) -> None:
        if node.op == "Conv" and self._conv(node):
            return
        if self._follow(node):
            return
        inputs = [self.need_plain(i) for i in node.inputs]
        self.b.add_node(node.op, inputs, node.attr_dict, name=node.name, outputs=list(node.outputs))
        self.plain.update(o for o in node.outputs if o)

    def _conv(self, node: Node) -> bool:
        consts = self.graph.constants
        if not _is_candidate(self.graph, node, self.flows is not None):
            return False
        if self.flows is not None and not (
            node.inputs[0] in self.blocked or node.outputs[0] in self.flows
        ):
            return False
        out_ch, in_ch = self.graph.types[node.inputs[1]].shape[:2]
        bi, bo = _block_for(in_ch, self.block), _block_for(out_ch, self.block)
        w = self.b.add_constant(
            self.b.fresh(f"{node.name}_w_packed"), pack_weight(consts[node.inputs[1]], bi, bo)
        )
        inputs = [self.need_blocked(node.inputs[0], bi), w]
        if len(node.inputs) > 2 and node.inputs[2]:
            bias = consts[node.inputs[2]].reshape(out_ch // bo, bo)
            inputs.append(self.b.add_constant(self.b.fresh(f"{node.name}_b_packed"), bias))
        attrs = {k: v for k, v in node.attrs if k not in ("group", "kernel_shape")}
        self.emit_blocked(node, "ConvNCHWc", inputs, attrs, bo)
        return True

    def _follow(self, node: Node) -> bool:
        """Elementwise ops of a blocked value stay blocked (constants are repacked)."""
        spec = get_op(node.op)
        first = node.inputs[0] if node.inputs else ""
        if first not in self.blocked or len(node.outputs) != 1:
            return False
        block = self.blocked[first][1]
        out_ty = self.graph.types[node.outputs[0]]
        if spec.pattern == Pattern.ELEMWISE and node.op != "Cast":
            rest = node.inputs[1:]
            if all(self.graph.constants.get(i, np.zeros(2)).size == 1 for i in rest if i):
                self.emit_blocked(
                    node, node.op, [self.blocked[first][0], *rest], node.attr_dict, block
                )
                return True
            return False
        if node.op in _BINARY and len(out_ty.shape) == 4:
            inputs = [self._operand(i, out_ty.shape, block) for i in node.inputs]
            if None not in inputs:
                self.emit_blocked(node, node.op, inputs, node.attr_dict, block)  # type: ignore[arg-type]
                return True
        return False

    def _operand(self, name: str, shape: tuple[int, ...], block: int) -> str | None:
        """`name` in the blocked layout: a blocked value, a scalar or a per-channel constant."""
        if name in self.blocked and self.blocked[name][1] == block:
            return self.blocked[name][0]
        value = self.graph.constants.get(name)
        if value is None:
            return None
        if value.size == 1:
            return name
        channels = shape[1]
        if value.size == channels and value.shape[-2:] in ((1, 1),) and value.ndim >= 3:
            packed = value.reshape(1, channels // block, 1, 1, block)
            return self.b.add_constant(self.b.fresh(f"{name}_nchwc"), packed)
        return None


def _is_candidate(graph: Graph, node: Node, chains_only: bool) -> bool:
    """Whether `node` is a Conv that `_Rewriter._conv` may move (ungrouped, 2-D, constant
    weights); with `chains_only` also float and not a pointwise GEMM (those read NCHW as it
    lies, `strategy.conv.is_pointwise_gemm`)."""
    if node.op != "Conv" or node.attr("group") != 1:
        return False
    if any(p not in graph.constants for p in node.inputs[1:] if p):
        return False
    x_ty, w_ty = graph.types[node.inputs[0]], graph.types[node.inputs[1]]
    if len(w_ty.shape) != 4 or not chains_only:
        return len(w_ty.shape) == 4
    from ..strategy.conv import is_pointwise_gemm  # lowering rules import the passes

    attrs = get_op("Conv").full_attrs(node)
    begin, end, strides, _, _ = window_geometry(attrs, x_ty.shape[2:], w_ty.shape[2:])
    gemm = is_pointwise_gemm(x_ty.shape, w_ty.shape, (*begin, *end), strides, x_ty.dtype)
    return x_ty.dtype == "float32" and not gemm


def _flowing_values(graph: Graph) -> set[str]:
    """Values worth producing in the blocked layout: read by a candidate Conv, or by an
    elementwise/binary op whose own output is worth it (visited from the outputs back)."""
    readers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for value in node.inputs:
            readers.setdefault(value, []).append(node)
    flows: set[str] = set()
    for node in reversed(graph.nodes):
        for value in node.outputs:
            for reader in readers.get(value, []):
                conv = _is_candidate(graph, reader, True) and reader.inputs[0] == value
                follows = _may_follow(reader) and reader.outputs[0] in flows
                if conv or follows:
                    flows.add(value)
    return flows


def _may_follow(node: Node) -> bool:
    """Whether `node` may stay in the blocked layout (`_Rewriter._follow` decides on its
    operands)."""
    spec = get_op(node.op)
    elementwise = spec.pattern == Pattern.ELEMWISE and node.op != "Cast"
    return len(node.outputs) == 1 and (elementwise or node.op in _BINARY)


def alter_layout(graph: Graph, block: int = 8, chains_only: bool = False) -> Graph:
    """Move 2-D, ungrouped convolutions with constant weights to NCHW[block]c.

    Before: `%c = Conv(%x, %w); %r = Relu(%c); %d = Conv(%r, %w2); return %d`
    After:  `%xb = LayoutTransform(%x); %cb = ConvNCHWc(%xb, %w_packed); %rb = Relu(%cb);
    %db = ConvNCHWc(%rb, %w2_packed); %d = LayoutTransform(%db); return %d`
    Channel counts that `block` does not divide use their largest divisor below it (the
    block of a value depends only on its channel count, so producer and consumers agree).

    With `chains_only` (the CPU compile's default) a float convolution moves only where the
    blocked layout then flows: its input is already blocked, or its output reaches another
    moving convolution through elementwise ops; pointwise GEMM convolutions stay NCHW. A
    lone convolution would only trade its kernel's own pack and unpack for two transforms.
    """
    rewriter = _Rewriter(graph, block, chains_only)
    for node in graph.nodes:
        rewriter.visit(node)
    outputs = [rewriter.need_plain(o) for o in graph.outputs]
    return eliminate_dead_code(rewriter.b.build(outputs))


__all__ = ["alter_layout", "to_blocked"]

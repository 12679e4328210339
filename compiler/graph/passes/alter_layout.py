"""Layout alteration: 2-D convolutions move to the channel-blocked NCHW[c]c layout (as TVM's
x86 conv2d_NCHWc), elementwise ops between them follow, and LayoutTransform nodes are inserted
only where an op needs plain NCHW."""

from __future__ import annotations

import numpy as np

from ..ir import Graph, GraphBuilder, Node
from ..ops.layout import pack_weight, to_blocked
from ..registry import Pattern, get_op
from .eliminate_dead_code import eliminate_dead_code

_BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min"}


def _block_for(channels: int, block: int) -> int:
    """The largest divisor of `channels` that is at most `block`."""
    return max(d for d in range(1, min(block, channels) + 1) if channels % d == 0)


class _Rewriter:
    def __init__(self, graph: Graph, block: int) -> None:
        self.graph, self.block = graph, block
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
        params = [i for i in node.inputs[1:] if i]
        w_ty = self.graph.types[node.inputs[1]]
        if len(w_ty.shape) != 4 or node.attr("group") != 1 or any(p not in consts for p in params):
            return False
        out_ch, in_ch = w_ty.shape[:2]
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


def alter_layout(graph: Graph, block: int = 8) -> Graph:
    """Move 2-D, ungrouped convolutions with constant weights to NCHW[block]c.

    Before: `%c = Conv(%x, %w); %r = Relu(%c); %d = Conv(%r, %w2); return %d`
    After:  `%xb = LayoutTransform(%x); %cb = ConvNCHWc(%xb, %w_packed); %rb = Relu(%cb);
    %db = ConvNCHWc(%rb, %w2_packed); %d = LayoutTransform(%db); return %d`
    Channel counts that `block` does not divide use their largest divisor below it.
    """
    rewriter = _Rewriter(graph, block)
    for node in graph.nodes:
        rewriter.visit(node)
    outputs = [rewriter.need_plain(o) for o in graph.outputs]
    return eliminate_dead_code(rewriter.b.build(outputs))


__all__ = ["alter_layout", "to_blocked"]

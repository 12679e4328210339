"""Transpose sinking: Transposes move down through element-wise ops, reductions and Pads until
they meet their inverse and vanish (tf2onnx's NHWC graphs: a Transpose to NHWC after every
convolution and one back to NCHW before the next, with the bias, activation and
squeeze-excitation between them in NHWC)."""

from __future__ import annotations

import numpy as np

from ....runtime.dtypes import is_narrow
from ..ir import Graph, GraphBuilder, Node
from ..ops.shape import pad_widths, reduce_axes
from ..registry import Pattern, get_op

#: ops whose every input broadcasts against the others (numpy's rules) into the output
_BROADCASTING = {
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Mod", "PRelu", "Where",
    "And", "Or", "Xor", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual",
}  # fmt: skip
_REDUCES = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"}

Perm = tuple[int, ...]


def _compose(first: Perm, then: Perm) -> Perm:
    """The perm of `Transpose[then](Transpose[first](x))`."""
    return tuple(first[i] for i in then)


def _is_identity(perm: Perm) -> bool:
    return perm == tuple(range(len(perm)))


class _Sinker:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.b = GraphBuilder.sharing(graph)
        self.pending: dict[str, tuple[str, Perm]] = {}  # value -> (source, perm): not built yet
        self.built: set[str] = set()

    def resolve(self, name: str) -> str:
        """`name` as a value of the new graph: a pending Transpose is built here (once), an
        identity one is its source."""
        if name not in self.pending:
            return name
        source, perm = self.pending[name]
        if _is_identity(perm):
            return source
        if name not in self.built:
            self.b.add_node("Transpose", [source], {"perm": perm}, name=name, outputs=[name])
            self.built.add(name)
        return name

    def emit(self, node: Node) -> None:
        inputs = [self.resolve(i) if i else i for i in node.inputs]
        self.b.add_node(node.op, inputs, node.attr_dict, name=node.name, outputs=node.outputs)

    def visit(self, node: Node) -> None:
        if node.op == "Transpose" and node.inputs[0] not in self.graph.constants:
            source, first = self.pending.get(node.inputs[0], (node.inputs[0], None))
            rank = len(self.graph.types[node.inputs[0]].shape)
            perm = tuple(int(p) for p in node.attr_dict.get("perm") or range(rank)[::-1])
            self.pending[node.outputs[0]] = (
                source,
                perm if first is None else _compose(first, perm),
            )
        elif not self._sink(node):
            self.emit(node)

    def _perm(self, node: Node) -> Perm | None:
        """The perm of the pending Transposes `node` reads (all alike), if it reads any."""
        perms = {self.pending[i][1] for i in node.inputs if i in self.pending}
        if len(perms) != 1 or len(node.outputs) != 1:
            return None
        (perm,) = perms
        return perm

    def _sink(self, node: Node) -> bool:
        perm = self._perm(node) if node.inputs else None
        if perm is None:
            return False
        spec = get_op(node.op)
        if spec.pattern == Pattern.ELEMWISE and len(node.inputs) == 1:
            return self._rebuild(node, [self.pending[node.inputs[0]][0]], perm)
        if node.op == "Clip" and node.inputs[0] in self.pending:  # min and max are scalars
            rest = [self.resolve(i) if i else i for i in node.inputs[1:]]
            return self._rebuild(node, [self.pending[node.inputs[0]][0], *rest], perm)
        if node.op in _BROADCASTING:
            operands = [self._operand(i, perm) for i in node.inputs]
            return None not in operands and self._rebuild(node, operands, perm)
        if node.op in _REDUCES:
            return self._reduce(node, perm)
        if node.op == "Pad" and node.inputs[0] in self.pending:
            return self._pad(node, perm)
        return False

    def _operand(self, name: str, perm: Perm) -> str | None:
        """A broadcast operand of a sunk op: a pending Transpose's source, or a constant
        transposed by the inverse perm (after numpy's broadcast prepends its missing axes)."""
        if name in self.pending:
            return self.pending[name][0] if self.pending[name][1] == perm else None
        if name not in self.graph.constants:
            return None
        value = self.graph.constants[name]
        if value.ndim > len(perm):
            return None
        full = value.reshape((1,) * (len(perm) - value.ndim) + value.shape)
        moved = np.ascontiguousarray(full.transpose(np.argsort(perm)))
        return self.b.add_constant(self.b.fresh(f"{name}_transposed"), moved)

    def _rebuild(
        self, node: Node, inputs: list[str], perm: Perm, attrs: dict | None = None
    ) -> bool:
        out = self.b.fresh(f"{node.outputs[0]}_sunk")
        attrs = node.attr_dict if attrs is None else attrs
        self.b.add_node(node.op, inputs, attrs, name=node.name, outputs=[out])
        self.pending[node.outputs[0]] = (out, perm)
        return True

    def _reduce(self, node: Node, perm: Perm) -> bool:
        axes_input = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] else None
        if axes_input is not None and axes_input not in self.graph.constants:
            return False
        axes_value = self.graph.constants[axes_input] if axes_input else None
        axes = reduce_axes(node.attr_dict, len(perm), axes_value)
        if axes is None or node.inputs[0] not in self.pending:
            return False
        moved = sorted(perm[a] for a in axes)
        name = self.b.add_constant(self.b.fresh(f"{node.name}_axes"), np.array(moved, np.int64))
        source = self.pending[node.inputs[0]][0]
        if node.attr("keepdims"):
            return self._rebuild(node, [source, name], perm)
        kept = [p for i, p in enumerate(perm) if i not in axes]  # source axes, output order
        order = sorted(kept)
        return self._rebuild(node, [source, name], tuple(order.index(p) for p in kept))

    def _pad(self, node: Node, perm: Perm) -> bool:
        names = [*node.inputs, "", "", ""][:4]
        if any(n and n not in self.graph.constants for n in names[1:]):
            return False
        axes = self.graph.constants[names[3]] if names[3] else None
        widths = pad_widths(len(perm), self.graph.constants[names[1]], axes)
        moved = [(0, 0)] * len(perm)
        for i, p in enumerate(perm):
            moved[p] = widths[i]
        pads = np.array([w[0] for w in moved] + [w[1] for w in moved], np.int64)
        pads_name = self.b.add_constant(self.b.fresh(f"{node.name}_pads"), pads)
        inputs = [self.pending[node.inputs[0]][0], pads_name]
        if names[2]:
            inputs.append(names[2])
        return self._rebuild(node, inputs, perm)

    def finish(self) -> Graph:
        outputs = []
        for name in self.graph.outputs:
            value = self.resolve(name)
            if value != name:  # an identity Transpose's source under the output's name
                self.b.add_node("Identity", [value], name=f"{name}_identity", outputs=[name])
            outputs.append(name)
        return self.b.build(outputs)


def sink_transposes(graph: Graph) -> Graph:
    """Defer each Transpose of a value computed at run time to where a reader needs its layout:
    an element-wise op, Clip, a broadcasting op whose other operands are constants (transposed
    at compile time) or Transposes by the same perm, a reduction with constant axes (axes
    renumbered) and a constant Pad (widths moved) are applied to the untransposed value and
    the Transpose follows them; two that compose to the identity vanish, two others become
    one. A Transpose is built where some other op reads it.

    Before: `%t = Transpose[0,2,3,1](%c); %a = Add(%t, %bias[C]); %r = Relu(%a);
             %u = Transpose[0,3,1,2](%r); %y = Conv(%u, %w)`
    After:  `%a = Add(%c, %bias[C,1,1]); %r = Relu(%a); %y = Conv(%r, %w)`
    """
    if not any(n.op == "Transpose" for n in graph.nodes):
        return graph
    if any(is_narrow(t.dtype) for t in graph.types.values()):
        # narrow values (bfloat16, float8, int4) move between `widen_narrow`'s Casts as their
        # storage integers; a rebuilt graph re-infers them as the narrow types (a LoweringError)
        return graph
    sinker = _Sinker(graph)
    for node in graph.nodes:
        sinker.visit(node)
    return sinker.finish()

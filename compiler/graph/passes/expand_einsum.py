"""Einsum expansion: every Einsum node becomes the ops the back-ends already compile, so an
attention written with `torch.einsum` (MaxViT, many exported transformers) runs on the same
batched-MatMul kernels as one written with `@`.

Per operand: a repeated label (a diagonal, `ii->i`) is a Mul by an identity mask and a
ReduceSum; a label that no other operand and not the output uses is summed at once. Then the
operands are contracted left to right, two at a time, each pair as one batched MatMul:
labels in both operands and still needed later are the batch axes, labels in both and needed
no more are the reduction (K), the rest are the rows (M, first operand) and columns (N,
second); Transpose and Reshape bring each operand to `[batch..., M, K]` / `[batch..., K, N]`,
and broadcast (ellipsis) batch axes of size 1 broadcast in MatMul. A last Transpose puts the
labels in the output's order.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import Graph, GraphBuilder, Node
from ..ops.einsum import label_sizes, parse


class _Expander:
    def __init__(self, b: GraphBuilder, node: Node) -> None:
        self.b, self.node = b, node

    def shape(self, value: str) -> tuple[int, ...]:
        return self.b.types[value].shape

    def _add(self, op: str, inputs: list[str], attrs: dict | None = None, **kw) -> str:
        (out,) = self.b.add_node(op, inputs, attrs, name=f"{self.node.name}_{op.lower()}", **kw)
        return out

    def _ints(self, values: list[int], hint: str) -> str:
        name = self.b.fresh(f"{self.node.name}_{hint}")
        return self.b.add_constant(name, np.asarray(values, np.int64))

    def transpose(self, value: str, labels: list[str], order: list[str]) -> str:
        if labels == order:
            return value
        return self._add("Transpose", [value], {"perm": [labels.index(x) for x in order]})

    def reshape(self, value: str, shape: list[int]) -> str:
        if list(self.shape(value)) == shape:
            return value
        return self._add("Reshape", [value, self._ints(shape, "shape")])

    def reduce_sum(self, value: str, labels: list[str], drop: list[str]) -> tuple[str, list[str]]:
        if not drop:
            return value, labels
        axes = [i for i, x in enumerate(labels) if x in drop]
        out = self._add("ReduceSum", [value, self._ints(axes, "axes")], {"keepdims": 0})
        return out, [x for x in labels if x not in drop]

    def diagonals(self, value: str, labels: list[str]) -> tuple[str, list[str]]:
        """Each repeated label down to one axis: a Mul by the identity over its two axes, then a
        ReduceSum of the second."""
        while len(set(labels)) != len(labels):
            first = next(x for x in labels if labels.count(x) > 1)
            i = labels.index(first)
            j = labels.index(first, i + 1)
            n = self.shape(value)[i]
            mask_shape = [1] * len(labels)
            mask_shape[i] = mask_shape[j] = n
            dtype = self.b.types[value].dtype
            mask = np.eye(n, dtype=dtype).reshape(mask_shape)
            eye = self.b.add_constant(self.b.fresh(f"{self.node.name}_eye"), mask)
            value = self._add("Mul", [value, eye])
            axes = self._ints([j], "axes")
            value = self._add("ReduceSum", [value, axes], {"keepdims": 0})
            labels = labels[:j] + labels[j + 1 :]
        return value, labels

    def contract(
        self, a: tuple[str, list[str]], b: tuple[str, list[str]], keep: set[str]
    ) -> tuple[str, list[str]]:
        (va, la), (vb, lb) = a, b
        sa = dict(zip(la, self.shape(va), strict=True))
        sb = dict(zip(lb, self.shape(vb), strict=True))
        shared = [x for x in la if x in lb]
        # a summed label broadcast (1 against n) is summed in each operand on its own
        lone = [x for x in shared if x not in keep and sa[x] != sb[x]]
        va, la = self.reduce_sum(va, la, lone)
        vb, lb = self.reduce_sum(vb, lb, lone)
        batch = [x for x in la if x in lb and x in keep]
        red = [x for x in la if x in lb and x not in keep]
        rows = [x for x in la if x not in lb]
        cols = [x for x in lb if x not in la]
        va = self.transpose(va, la, batch + rows + red)
        vb = self.transpose(vb, lb, batch + red + cols)
        m, k, n = (math.prod(s[x] for x in part) for s, part in ((sa, rows), (sa, red), (sb, cols)))
        va = self.reshape(va, [sa[x] for x in batch] + [m, k])
        vb = self.reshape(vb, [sb[x] for x in batch] + [k, n])
        out = self._add("MatMul", [va, vb])
        wide = [max(sa[x], sb[x]) for x in batch]
        out = self.reshape(out, wide + [sa[x] for x in rows] + [sb[x] for x in cols])
        return out, batch + rows + cols

    def emit(self) -> None:
        node = self.node
        shapes = [self.shape(v) for v in node.inputs]
        eq = parse(node.attr("equation"), [len(s) for s in shapes], f"Einsum node {node.name!r}")
        label_sizes(eq, shapes, f"Einsum node {node.name!r}")
        terms = []
        for value, labels in zip(node.inputs, eq.inputs, strict=True):
            terms.append(self.diagonals(value, list(labels)))
        out_labels = list(eq.output)
        for i, (value, labels) in enumerate(terms):
            elsewhere = {x for j, (_, ls) in enumerate(terms) if j != i for x in ls}
            drop = [x for x in labels if x not in elsewhere and x not in out_labels]
            terms[i] = self.reduce_sum(value, labels, list(dict.fromkeys(drop)))
        acc = terms[0]
        for i in range(1, len(terms)):
            keep = set(out_labels) | {x for _, ls in terms[i + 1 :] for x in ls}
            acc = self.contract(acc, terms[i], keep)
        value, labels = acc
        perm = [labels.index(x) for x in out_labels]
        self.b.add_node(
            "Transpose", [value], {"perm": perm}, name=node.name, outputs=list(node.outputs[:1])
        )


def expand_einsum(graph: Graph) -> Graph:
    """Rewrite every Einsum node into Transpose/Reshape/MatMul/ReduceSum/Mul (module docstring).

    Before: `%y = Einsum[equation="bhid,bhjd->bhij"](%q, %k)`
    After:  `%kt = Transpose[perm=(0, 1, 3, 2)](%k); %y0 = MatMul(%q, %kt);
    %y = Transpose[perm=(0, 1, 2, 3)](%y0)`
    """
    if not any(n.op == "Einsum" for n in graph.nodes):
        return graph
    b = GraphBuilder(graph.name)
    for name in graph.inputs:
        ty = graph.types[name]
        b.add_input(name, ty.shape, ty.dtype)
    for name, value in graph.constants.items():
        b.add_constant(name, value)
    for node in graph.nodes:
        if node.op == "Einsum":
            _Expander(b, node).emit()
        else:
            b.add_node(
                node.op, node.inputs, node.attr_dict, name=node.name, outputs=list(node.outputs)
            )
    return b.build(graph.outputs)


__all__ = ["expand_einsum"]

"""Composite-op expansion: every node whose op has an `expand` (Einsum, LSTM, GRU, RNN, ...) is
rewritten into the ops the back-ends already compile, before any other pass, so the folds and
fusion see (and every back-end lowers) only those."""

from __future__ import annotations

from ..ir import Graph, GraphBuilder
from ..registry import get_op


def expand_composites(graph: Graph) -> Graph:
    """Replace each composite node by its expansion (`OpSpec.expand`); other nodes, inputs,
    constants and output names stay as they are.

    An expansion may use other composites (LpNormalization uses ReduceL2): they are expanded
    in turn, until none is left.

    Before: `%y = Einsum[equation="bij,bjk->bik"](%a, %b)`
    After:  `%y0 = MatMul(%a, %b); %y = Transpose[perm=(0, 1, 2)](%y0)`
    """
    while True:
        graph, changed = _expand_once(graph)
        if not changed:
            return graph


def _expand_once(graph: Graph) -> tuple[Graph, bool]:
    b = GraphBuilder.sharing(graph)
    changed = False
    for node in graph.nodes:
        expand = get_op(node.op).expand
        if expand is not None and expand(b, node) is not False:
            changed = True
        else:
            b.add_node(
                node.op, node.inputs, node.attr_dict, name=node.name, outputs=list(node.outputs)
            )
    return (b.build(graph.outputs) if changed else graph), changed


__all__ = ["expand_composites"]

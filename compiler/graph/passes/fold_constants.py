"""Constant folding: nodes whose inputs are all constants (and Shape or Size of static shapes)
become constants."""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..ops.shape import SHAPE_ONLY_OPS
from ..registry import get_op


def _foldable(graph: Graph, node: Node, consts: dict[str, np.ndarray]) -> bool:
    if node.op in SHAPE_ONLY_OPS:
        return True  # every shape is static
    present = [i for i in node.inputs if i]
    return bool(present) and all(i in consts for i in present)


def fold_constants(graph: Graph) -> Graph:
    """Evaluate every node computable from constants alone and keep its results as constants.

    Before: `const %w; %wt = Transpose(%w); %y = MatMul(%x, %wt)`
    After:  `const %wt; %y = MatMul(%x, %wt)` (run eliminate_dead_code to drop `%w`).
    """
    consts = dict(graph.constants)
    kept = []
    for node in graph.nodes:
        if not _foldable(graph, node, consts):
            kept.append(node)
            continue
        if node.op in SHAPE_ONLY_OPS:
            arrays = [np.broadcast_to(np.uint8(0), graph.types[node.inputs[0]].shape)]
        else:
            arrays = [consts[i] if i else None for i in node.inputs]
        values = get_op(node.op).run(node, arrays)
        for name, value in zip(node.outputs, values, strict=False):
            if name:
                consts[name] = np.asarray(value, dtype=graph.types[name].dtype)
    if len(kept) == len(graph.nodes):
        return graph
    return graph.replace(nodes=tuple(kept), constants=consts)

"""Constant folding: nodes whose inputs are all constants (and Shape or Size of static shapes)
become constants. A zero-size value holds no data, so its type alone is its value: it counts as
a constant, and so no zero extent ever reaches the tensor-expression layer."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph, Node
from ..ops.shape import SHAPE_ONLY_OPS
from ..registry import get_op


def _is_empty(graph: Graph, name: str) -> bool:
    return graph.types[name].size == 0


def _empty(graph: Graph, name: str) -> np.ndarray:
    ty = graph.types[name]
    return np.zeros(ty.shape, ty.dtype)


#: A node whose outputs would hold more bytes than this is left to run time rather than folded
#: into the module's constants (a model's ConstantOfShape/Expand of a huge shape would otherwise
#: allocate it here, at compile time, and store it in the module).
FOLD_LIMIT_BYTES = 64 << 20


def _too_big(graph: Graph, node: Node) -> bool:
    return sum(graph.types[o].nbytes for o in node.outputs if o) > FOLD_LIMIT_BYTES


# A run-time Loop of constants folds only with a trip count of at most this many iterations:
# each is one run of its body on the reference executor at compile time (a while loop, without
# a trip count, might not end for a long while, and stays a loop).
LOOP_FOLD_TRIPS = 4096


def _foldable(graph: Graph, node: Node, consts: dict[str, np.ndarray]) -> bool:
    if _too_big(graph, node):
        return False
    if node.op == "Loop" and not (
        node.attr_dict.get("has_trips")
        and node.inputs[0] in consts
        and int(np.asarray(consts[node.inputs[0]]).reshape(-1)[0]) <= LOOP_FOLD_TRIPS
    ):
        return False
    if node.op in SHAPE_ONLY_OPS:
        return True  # every shape is static
    present = [i for i in node.inputs if i]
    return bool(present) and all(i in consts for i in present)


def _outputs_empty(graph: Graph, node: Node) -> bool:
    present = [o for o in node.outputs if o]
    return bool(present) and all(_is_empty(graph, o) for o in present)


def _drop_empty(graph: Graph, node: Node, consts: dict[str, np.ndarray]) -> Node:
    """A node left to compute: its zero-size outputs become constants (the output unnamed, as
    an unused optional one), and a Concat drops its zero-size operands (the others alone give
    the same result)."""
    outputs = []
    for name in node.outputs:
        if name and _is_empty(graph, name):
            consts[name] = _empty(graph, name)
            name = ""
        outputs.append(name)
    inputs = node.inputs
    if node.op == "Concat":
        inputs = tuple(i for i in node.inputs if not _is_empty(graph, i))
    if inputs == node.inputs and tuple(outputs) == node.outputs:
        return node
    return dataclasses.replace(node, inputs=inputs, outputs=tuple(outputs))


def _fold(graph: Graph, node: Node, consts: dict[str, np.ndarray]) -> list[np.ndarray | None]:
    if _outputs_empty(graph, node):
        return [_empty(graph, o) if o else None for o in node.outputs]
    if node.op in SHAPE_ONLY_OPS:
        arrays = [np.broadcast_to(np.uint8(0), graph.types[node.inputs[0]].shape)]
    else:
        arrays = [consts[i] if i else None for i in node.inputs]
    return list(get_op(node.op).run(node, arrays))


def fold_constants(graph: Graph) -> Graph:
    """Evaluate every node computable from constants alone and keep its results as constants.
    Zero-size values (graph inputs and any node's outputs) count as constants, a node whose
    outputs all have zero size folds whatever its inputs, and a Concat drops its zero-size
    operands.

    Before: `const %w; %wt = Transpose(%w); %y = MatMul(%x, %wt)`
    After:  `const %wt; %y = MatMul(%x, %wt)` (run eliminate_dead_code to drop `%w`).
    Before: `input %x: f32[0, 4]; %r = ReduceSum(%x, axes=[0])`
    After:  `const %r = zeros(f32[1, 4])` (`%x` stays an input, read by nothing).
    """
    consts = dict(graph.constants)
    consts.update({n: _empty(graph, n) for n in graph.inputs if _is_empty(graph, n)})
    kept = []
    changed = False
    for node in graph.nodes:
        if not (_foldable(graph, node, consts) or _outputs_empty(graph, node)):
            new = _drop_empty(graph, node, consts)
            changed |= new is not node
            kept.append(new)
            continue
        for name, value in zip(node.outputs, _fold(graph, node, consts), strict=False):
            if name:
                consts[name] = np.asarray(value, dtype=graph.types[name].dtype)
    if len(kept) == len(graph.nodes) and not changed:
        return graph
    constants = {k: v for k, v in consts.items() if k not in graph.inputs}
    return graph.replace(nodes=tuple(kept), constants=constants)

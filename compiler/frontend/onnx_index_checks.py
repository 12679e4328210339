"""Index range checks of the ONNX ops that read or write at positions given as a tensor.

onnxruntime refuses a run in which an index of Gather, GatherElements, GatherND,
ScatterElements or ScatterND lies outside `[-n, n-1]` of its axis; the compiled kernels clamp
such an index (they never touch memory outside the data), which alone would return an answer
from the wrong row. So each such node of the model gets a check (`runtime.checks`): constant
indices are checked here, at import; indices known only at run time get a uint8 flag computed
by ordinary ops, `ReduceMin(Cast(And(i >= -n, i < n)))`, which `Module.run` reads after the
kernels and raises on. Only the model's own nodes are checked: the importer's rewrites index
within range by construction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...runtime.checks import check_name
from ..graph.ir import GraphBuilder, GraphError

# op -> (input holding the data, input holding the indices)
INDEX_OPS = {
    "Gather": (0, 1),
    "GatherElements": (0, 1),
    "GatherND": (0, 1),
    "ScatterElements": (0, 1),
    "ScatterND": (0, 1),
}


def _bounds(
    op: str, attrs: dict[str, Any], data: tuple[int, ...], indices: tuple[int, ...]
) -> tuple[np.ndarray, str] | None:
    """The size of the axis each index addresses (a scalar, or one per component of the last
    axis of GatherND/ScatterND's indices) and the words for it in the message; None for a
    node the op's own checks refuse (an axis or an index depth the data does not have)."""
    if op in ("GatherND", "ScatterND"):
        first = int(attrs.get("batch_dims", 0) or 0)
        dims = data[first : first + indices[-1]] if indices else ()
        if not indices or len(dims) != indices[-1]:
            return None
        axes = ", ".join(str(first + k) for k in range(len(dims)))
        words = f"the sizes {list(dims)} of the data's axes {axes}"
        return np.array(dims, np.int64), words
    axis = int(attrs.get("axis", 0) or 0)
    if not -len(data) <= axis < len(data):
        return None
    axis %= len(data)
    n = data[axis]
    return np.array(n, np.int64), f"[{-n}, {n - 1}] along axis {axis} of the data"


def add_index_check(
    builder: GraphBuilder,
    op: str,
    node: str,
    inputs: list[str],
    attrs: dict[str, Any],
    serial: int,
    taken: str | None = None,
) -> str | None:
    """Check the indices of node `node` (`op`, its ONNX `inputs` and `attrs`): raise
    `GraphError` now for constant indices out of range; for indices computed at run time add
    the check's ops and return its value name (an extra graph output); None when nothing is
    left to check. A node in a branch of an If decided at run time (both branches are
    computed, `onnx_if`) is checked only when its branch is `taken` (a bool scalar value):
    the other branch may well index out of range, as a guarded `x[i] if i < n else 0` does."""
    data_pos, index_pos = INDEX_OPS[op]
    data, indices = inputs[data_pos], inputs[index_pos]
    types = builder.types
    if data not in types or indices not in types:
        return None
    index_ty = types[indices]
    if index_ty.size == 0:
        return None
    found = _bounds(op, attrs, types[data].shape, index_ty.shape)
    if found is None:
        return None
    bounds, axis_words = found
    message = f"{op} node {node!r}: input {indices!r} holds an index outside {axis_words}"
    const = builder.constants.get(indices)
    if const is not None:
        bad = (const < -bounds) | (const >= bounds)
        if not bad.any():
            return None
        if taken is None:
            where = tuple(int(k) for k in np.argwhere(bad)[0])
            raise GraphError(f"{message}: {int(const[where])} at position {list(where)}")
    dtype = index_ty.dtype
    high = builder.add_constant(builder.fresh(f"{node}/index_high"), bounds.astype(dtype))
    low = builder.add_constant(builder.fresh(f"{node}/index_low"), (-bounds).astype(dtype))
    (above,) = builder.add_node("GreaterOrEqual", [indices, low], name=f"{node}/index_check")
    (below,) = builder.add_node("Less", [indices, high], name=f"{node}/index_check")
    (inside,) = builder.add_node("And", [above, below], name=f"{node}/index_check")
    (flag,) = builder.add_node("Cast", [inside], {"to": "uint8"}, name=f"{node}/index_check")
    name = check_name(serial, f"{message} (onnxruntime refuses this run too)")
    if taken is None:
        builder.add_node(
            "ReduceMin", [flag], {"keepdims": 0}, name=f"{node}/index_check", outputs=[name]
        )
        return name
    (holds,) = builder.add_node("ReduceMin", [flag], {"keepdims": 0}, name=f"{node}/index_check")
    (skipped,) = builder.add_node("Not", [taken], name=f"{node}/index_check")
    (skip,) = builder.add_node("Cast", [skipped], {"to": "uint8"}, name=f"{node}/index_check")
    builder.add_node("Max", [holds, skip], name=f"{node}/index_check", outputs=[name])
    return name

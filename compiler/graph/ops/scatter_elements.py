"""ScatterElements (torch's scatter, scatter_add, scatter_reduce, index_fill), a composite.

Indices are computed at run time (a top-k filter's, an argmax's), so no table of positions is
built at compile time: along the scattered axis (moved last), output element j compares its
position with every index of its row, `hit[..., j, m] = indices[..., m] == j`, and reduces the
matching updates over m: the last hit's update (`reduction="none"`: the last write wins, as
onnxruntime's loop leaves it), or their sum, product, maximum or minimum combined with the data.
That costs one comparison per output element and update along the axis, and the comparisons
fuse into the reductions. A row of indices shorter than the data's (updates smaller than the
data off the axis) is padded with -1, which no position matches.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter
from .indexing import SCATTER_COMBINE, SCATTER_REDUCTIONS, scatter_neutral
from .shape import normalize_axis


def _scatter_elements_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    data, indices, updates = (t.shape for t in types)
    axis = normalize_axis(attrs["axis"], len(data), "ScatterElements axis")
    if types[1].dtype not in ("int32", "int64"):
        raise ValueError(f"ScatterElements indices must be int32 or int64, not {types[1].dtype}")
    if types[2].dtype != types[0].dtype:
        raise ValueError(
            f"ScatterElements updates must have the data's dtype {types[0].dtype}, "
            f"not {types[2].dtype}"
        )
    if updates != indices or len(indices) != len(data):
        raise ValueError(
            f"ScatterElements indices and updates must have one shape of the data's rank, "
            f"not {list(indices)} and {list(updates)} (data {list(data)})"
        )
    if any(i != axis and k > d for i, (k, d) in enumerate(zip(indices, data, strict=True))):
        raise ValueError(
            f"ScatterElements indices shape {list(indices)} must not exceed the data's "
            f"{list(data)} off axis {axis}"
        )
    if attrs["reduction"] not in SCATTER_REDUCTIONS:
        raise ValueError(
            f"ScatterElements reduction must be one of {', '.join(SCATTER_REDUCTIONS)}, "
            f"not {attrs['reduction']!r}"
        )
    _check_range(consts[1], data[axis], axis)
    return [types[0]]


def _check_range(indices: np.ndarray | None, n: int, axis: int) -> None:
    """Constant indices are checked once; computed ones are not (as Gather's)."""
    if indices is not None and indices.size and (indices.min() < -n or indices.max() >= n):
        bad = indices[(indices < -n) | (indices >= n)].reshape(-1)[0]
        raise ValueError(
            f"ScatterElements indices must be in [{-n}, {n - 1}] along axis {axis}, not {bad}"
        )


def scatter_elements(
    attrs: dict[str, Any], data: np.ndarray, indices: np.ndarray, updates: np.ndarray
) -> np.ndarray:
    """numpy: `out[..., indices[i...], ...] (op)= updates[i...]`, the updates in C order."""
    axis = attrs["axis"] % data.ndim
    n = data.shape[axis]
    _check_range(indices, n, axis)
    coords = [c.reshape(-1) for c in np.indices(indices.shape)]
    coords[axis] = np.where(indices < 0, indices + n, indices).reshape(-1)
    where, flat = tuple(coords), updates.reshape(-1)
    out = data.copy()
    reduce = SCATTER_REDUCTIONS[attrs["reduction"]]
    if reduce is None:
        out[where] = flat  # numpy assigns in order: the last of repeated positions stays
    else:
        reduce.at(out, where, flat)
    return out


def _expand(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    data, indices, updates = node.inputs
    shape, ishape = e.shape(data), e.shape(indices)
    rank, dtype = len(shape), e.dtype(data)
    axis = node.attr_dict["axis"] % rank
    reduction = node.attr_dict["reduction"]
    perm = [i for i in range(rank) if i != axis] + [axis]
    back = [perm.index(i) for i in range(rank)]
    data_t, n = e.transpose(data, perm), shape[axis]
    idx = indices if e.dtype(indices) == "int64" else e.add("Cast", [indices], {"to": "int64"})
    zero = e.const(0, "zero", "int64")
    idx = e.add(
        "Where", [e.add("Less", [idx, zero]), e.add("Add", [idx, e.const(n, "n", "int64")]), idx]
    )
    idx, upd = e.transpose(idx, perm), e.transpose(updates, perm)
    short = [shape[p] - ishape[p] for p in perm[:-1]]
    if any(short):  # rows the updates do not reach: indices -1 match no position
        pads = e.ints([0] * rank + [*short, 0], "pads")
        idx = e.add("Pad", [idx, pads, e.const(-1, "none", "int64")])
        upd = e.add("Pad", [upd, pads, e.const(0, "pad", dtype)])
    m = ishape[axis]
    position = e.const(np.arange(n, dtype=np.int64).reshape(n, 1), "position")
    hit = e.add("Equal", [e.add("Unsqueeze", [idx, e.ints([-2], "axes")]), position])  # [.., n, m]
    last = e.ints([-1], "last")
    if reduction == "none":
        ramp = e.const(np.arange(m, dtype=np.int64), "ramp")
        minus = e.const(-1, "minus", "int64")
        writer = e.add("ReduceMax", [e.add("Where", [hit, ramp, minus]), last], {"keepdims": 0})
        taken = e.add("GatherElements", [upd, e.add("Max", [writer, zero])], {"axis": -1})
        out = e.add("Where", [e.add("GreaterOrEqual", [writer, zero]), taken, data_t])
    else:
        spread = e.add("Unsqueeze", [upd, e.ints([-2], "axes")])  # [..., 1, m]
        op, combine = SCATTER_COMBINE[reduction]
        neutral = e.const(scatter_neutral(reduction, dtype), "neutral", dtype)
        masked = e.add("Where", [hit, spread, neutral])
        total = e.add(op, [masked, last], {"keepdims": 0})
        out = e.add(combine, [data_t, total])  # the neutral value keeps unreached data
    e.add("Transpose", [out], {"perm": back}, outputs=[node.outputs[0]])


register(
    "ScatterElements",
    Pattern.OPAQUE,
    _scatter_elements_type,
    scatter_elements,
    inputs=(3, 3),
    attrs={"axis": 0, "reduction": "none"},
    expand=_expand,
)

__all__ = ["scatter_elements"]

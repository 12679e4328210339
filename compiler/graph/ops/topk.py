"""TopK: the K largest (or smallest) elements along an axis and their indices, as a composite.

Up to `MAX_K` the expansion selects one element per step, K steps: the best value among those
not taken yet (ReduceMax/ReduceMin), the lowest index holding it (ONNX's tie rule: the lower
index first), then that index marked taken; that suits the small K of classification heads and
samplers. A larger K (a whole sort: torch.sort and torch.argsort export as TopK with K the axis
length) ranks every element instead: its rank is the number of elements that go before it (better,
or equal at a lower index), a sum over the axis of a pairwise comparison; output position p takes
the element whose rank is p. That costs n * n comparisons per row of n, so an axis past
`MAX_SORT_N` is refused by name.

NaN ranks as the largest value, above +inf, NaNs among themselves by index (onnxruntime's
order): first with largest=1, last with largest=0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...tir.stmt import LoweringError
from ..ir import DataDependentShapeError, GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter

#: the largest K the step-by-step expansion takes (each step is about three kernels)
MAX_K = 64
#: the longest axis the ranking expansion (K > MAX_K) sorts: n * n comparisons per row
MAX_SORT_N = 16384


def _k_and_axis(attrs: dict[str, Any], shape: tuple[int, ...], k: Any, where: str) -> tuple:
    if k is None:
        raise DataDependentShapeError(
            f"{where}: K must be a constant (it decides the output shape)"
        )
    k = int(np.asarray(k).reshape(-1)[0])
    if not shape:
        raise ValueError(f"{where}: the input must have at least one axis, not a scalar")
    axis = int(attrs["axis"])
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"{where}: axis {axis} is out of range for rank {len(shape)}")
    axis %= len(shape)
    if not 0 <= k <= shape[axis]:
        raise ValueError(f"{where}: K must be in [0, {shape[axis]}] (axis {axis}), not {k}")
    return k, axis


def _topk_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    k, axis = _k_and_axis(attrs, x.shape, consts[1], "TopK")
    shape = tuple(k if i == axis else d for i, d in enumerate(x.shape))
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


def topk(attrs: dict[str, Any], x: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy: a stable sort (ties keep the lower index first; NaN the largest), the first K."""
    k, axis = _k_and_axis(attrs, x.shape, k, "TopK")
    if attrs["largest"]:  # descending with ties by ascending index: a stable sort of the keys
        # negated (NaN still last in numpy's sort: put it first by its own key)
        keys = np.negative(x) if x.dtype.kind == "f" else None
        if keys is None:
            order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
            order = x.shape[axis] - 1 - order
        else:
            order = np.lexsort((np.where(np.isnan(x), 0, keys), ~np.isnan(x)), axis=axis)
    else:  # numpy's sort puts NaN last, in index order
        order = np.argsort(x, axis=axis, kind="stable")
    index = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, index, axis=axis), index.astype(np.int64)


def expand(b: GraphBuilder, node: Node) -> None:
    """K selection steps (module docstring), their values and indices concatenated."""
    e = Emitter(b, node)
    x = node.inputs[0]
    shape, dtype = e.shape(x), e.dtype(x)
    attrs = dict(node.attrs)
    k, axis = _k_and_axis(attrs, shape, b.constants.get(node.inputs[1]), f"TopK {node.name!r}")
    if k > MAX_K and shape[axis] > MAX_SORT_N:
        raise LoweringError(
            f"TopK node {node.name!r}: K={k} over an axis of {shape[axis]} is more than the "
            f"step-by-step selection (K up to {MAX_K}) and the ranking sort (axis up to "
            f"{MAX_SORT_N}) take"
        )
    if k == 0:  # zero-size outputs are constants (as fold_constants makes them)
        out_shape = tuple(0 if i == axis else d for i, d in enumerate(shape))
        for out, out_dtype in zip(node.outputs, (dtype, "int64"), strict=False):
            if out:
                e.rename(e.const(np.zeros(out_shape, out_dtype), "empty"), out)
        return
    if k > MAX_K:
        _expand_by_rank(e, node, k, axis)
        return
    n, largest = shape[axis], bool(attrs["largest"])
    iota_shape = [n if i == axis else 1 for i in range(len(shape))]
    iota = e.const(np.arange(n, dtype=np.int64).reshape(iota_shape), "iota")
    beyond = e.const(np.int64(n), "beyond")
    kind = np.dtype(dtype)
    worst_value = (-np.inf if largest else np.inf) if kind.kind == "f" else (
        np.iinfo(kind).min if largest else np.iinfo(kind).max
    )  # fmt: skip
    worst = e.const(np.asarray(worst_value, dtype), "worst")
    axes = e.ints([axis], "axis")
    best = "ReduceMax" if largest else "ReduceMin"
    nan = e.add("IsNaN", [x]) if kind.kind == "f" else None  # NaNs: taken apart, by index
    indices = []
    taken = None
    for step in range(k):
        out = nan if taken is None else (taken if nan is None else e.add("Or", [taken, nan]))
        pool = x if out is None else e.add("Where", [out, worst, x])
        value = e.add(best, [pool, axes], {"keepdims": 1})
        hit = e.add("Equal", [pool, value])
        if out is not None:
            hit = e.add("And", [hit, e.add("Not", [out])])
        index = e.add("ReduceMin", [e.add("Where", [hit, iota, beyond]), axes], {"keepdims": 1})
        if nan is not None:
            index = _nan_first_or_last(e, nan, taken, index, iota, beyond, axes, largest)
        indices.append(index)
        if step + 1 < k:
            now = e.add("Equal", [iota, index])
            taken = now if taken is None else e.add("Or", [taken, now])
    index = indices[0] if len(indices) == 1 else e.add("Concat", indices, {"axis": axis})
    out_values, out_indices = (node.outputs + ("", ""))[:2]
    if out_values:
        e.add("GatherElements", [x, index], {"axis": axis}, outputs=[out_values])
    if out_indices:
        e.rename(index, out_indices)


def _nan_first_or_last(
    e: Emitter, nan: str, taken: str | None, index: str, iota: str, beyond: str, axes: str,
    largest: bool,
) -> str:  # fmt: skip
    """One selection step's index with NaN the largest value: the lowest-indexed NaN not taken
    yet comes before any number when largest, after all of them (`index` is `beyond`) else."""
    left = nan if taken is None else e.add("And", [nan, e.add("Not", [taken])])
    first_nan = e.add("ReduceMin", [e.add("Where", [left, iota, beyond]), axes], {"keepdims": 1})
    if largest:
        return e.add("Where", [e.add("Less", [first_nan, beyond]), first_nan, index])
    return e.add("Where", [e.add("Less", [index, beyond]), index, first_nan])


def _expand_by_rank(e: Emitter, node: Node, k: int, axis: int) -> None:
    """The first K of a ranking sort (module docstring), along the last axis moved there."""
    x = node.inputs[0]
    rank_in = len(e.shape(x))
    perm = [i for i in range(rank_in) if i != axis] + [axis]
    back = [perm.index(i) for i in range(rank_in)]
    xt = e.transpose(x, perm)
    n = e.shape(xt)[-1]
    mine = e.add("Unsqueeze", [xt, e.ints([-1], "axes")])  # [..., n, 1]: element i
    other = e.add("Unsqueeze", [xt, e.ints([-2], "axes")])  # [..., 1, n]: element j
    largest = bool(dict(node.attrs)["largest"])
    better = e.add("Greater" if largest else "Less", [other, mine])
    same = e.add("Equal", [other, mine])
    if np.dtype(e.dtype(x)).kind == "f":  # NaN is the largest value, equal to another NaN
        nan_j, nan_i = e.add("IsNaN", [other]), e.add("IsNaN", [mine])
        # largest: j goes first when j is NaN and i is not; else when i is NaN and j is not
        ahead, behind = (nan_j, nan_i) if largest else (nan_i, nan_j)
        better = e.add("Or", [better, e.add("And", [ahead, e.add("Not", [behind])])])
        same = e.add("Or", [same, e.add("And", [nan_j, nan_i])])
    lower = e.const(np.tri(n, k=-1, dtype=bool), "lower")  # [i, j]: j < i
    before = e.add("Or", [better, e.add("And", [same, lower])])
    rank = e.reduce_sum(e.add("Cast", [before], {"to": "int64"}), [-1])  # [..., n]
    position = e.const(np.arange(k, dtype=np.int64).reshape(k, 1), "position")
    at = e.add("Equal", [e.add("Unsqueeze", [rank, e.ints([-2], "axes")]), position])
    iota = e.const(np.arange(n, dtype=np.int64), "iota")
    index = e.reduce_sum(e.add("Where", [at, iota, e.const(np.int64(0), "zero")]), [-1])
    out_values, out_indices = (node.outputs + ("", ""))[:2]
    if out_values:
        values = e.add("GatherElements", [xt, index], {"axis": -1})
        e.add("Transpose", [values], {"perm": back}, outputs=[out_values])
    if out_indices:
        e.add("Transpose", [index], {"perm": back}, outputs=[out_indices])


register(
    "TopK",
    Pattern.OPAQUE,
    _topk_type,
    topk,
    inputs=(2, 2),
    outputs=(2, 2),
    const_inputs=(1,),
    attrs={"axis": -1, "largest": 1, "sorted": 1},
    expand=expand,
)

__all__ = ["MAX_K", "MAX_SORT_N", "expand", "topk"]

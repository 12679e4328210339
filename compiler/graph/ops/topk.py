"""TopK: the K largest (or smallest) elements along an axis and their indices, as a composite.

Up to `MAX_K` the expansion selects one element per step, K steps: the best value among those
not taken yet (ReduceMax/ReduceMin), the lowest index holding it (ONNX's tie rule: the lower
index first), then that index marked taken; that suits the small K of classification heads and
samplers. A larger K (a whole sort: torch.sort and torch.argsort export as TopK with K the axis
length) ranks every element instead: its rank is the number of elements that go before it (better,
or equal at a lower index), a sum over the axis of a pairwise comparison; output position p takes
the element whose rank is p. That costs n * n comparisons per row of n, so an axis past
`MAX_SORT_N` is refused by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...tir.stmt import LoweringError
from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter

#: the largest K the step-by-step expansion takes (each step is about three kernels)
MAX_K = 64
#: the longest axis the ranking expansion (K > MAX_K) sorts: n * n comparisons per row
MAX_SORT_N = 16384


def _k_and_axis(attrs: dict[str, Any], shape: tuple[int, ...], k: Any, where: str) -> tuple:
    if k is None:
        raise ValueError(f"{where}: K must be a constant (it decides the output shape)")
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
    """numpy: a stable sort (ties keep the lower index first), the first K."""
    k, axis = _k_and_axis(attrs, x.shape, k, "TopK")
    if attrs["largest"]:  # descending with ties by ascending index: sort the reversed axis
        n = x.shape[axis]
        order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
        order = n - 1 - order
    else:
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
    values, indices = [], []
    taken = None
    for step in range(k):
        pool = x if taken is None else e.add("Where", [taken, worst, x])
        value = e.add(best, [pool, axes], {"keepdims": 1})
        hit = e.add("Equal", [pool, value])
        if taken is not None:
            hit = e.add("And", [hit, e.add("Not", [taken])])
        index = e.add("ReduceMin", [e.add("Where", [hit, iota, beyond]), axes], {"keepdims": 1})
        values.append(value)
        indices.append(index)
        if step + 1 < k:
            now = e.add("Equal", [iota, index])
            taken = now if taken is None else e.add("Or", [taken, now])
    out_values, out_indices = (node.outputs + ("", ""))[:2]
    for parts, out in ((values, out_values), (indices, out_indices)):
        if not out:
            continue
        if len(parts) == 1:
            e.rename(parts[0], out)
        else:
            e.add("Concat", parts, {"axis": axis}, outputs=[out])


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
    better = e.add("Greater" if dict(node.attrs)["largest"] else "Less", [other, mine])
    lower = e.const(np.tri(n, k=-1, dtype=bool), "lower")  # [i, j]: j < i
    before = e.add("Or", [better, e.add("And", [e.add("Equal", [other, mine]), lower])])
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

"""TopK: the K largest (or smallest) elements along an axis and their indices, as a composite.

The expansion selects one element per step, K steps: the best value among those not taken yet
(ReduceMax/ReduceMin), the lowest index holding it (ONNX's tie rule: the lower index first),
then that index marked taken. So it suits the small K of classification heads and samplers
(K up to `MAX_K`), not a sort of thousands of anchors, which is refused by name.
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
    if k > MAX_K:
        raise LoweringError(
            f"TopK node {node.name!r}: K={k} is more than the {MAX_K} the step-by-step "
            f"selection takes (a sorting kernel is not built yet)"
        )
    if k == 0:  # zero-size outputs are constants (as fold_constants makes them)
        out_shape = tuple(0 if i == axis else d for i, d in enumerate(shape))
        for out, out_dtype in zip(node.outputs, (dtype, "int64"), strict=False):
            if out:
                e.rename(e.const(np.zeros(out_shape, out_dtype), "empty"), out)
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

__all__ = ["MAX_K", "expand", "topk"]

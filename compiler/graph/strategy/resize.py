"""Native lowering of Resize: a lazy gather (nearest) or weighted sum of gathers (linear, cubic)
whose input positions and weights are constant tables from `ops.resize.resize_plan`, so it
inlines into its neighbours like any injective op."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import te
from ...te import dtype as dt
from ..ir import Node
from ..lower_te import GroupContext, Index, Lazy, Rule
from ..ops.resize import AxisTaps, resize_plan
from ..registry import get_op
from .elemwise import const_input


def _tables(ctx: GroupContext, node: Node, taps: AxisTaps, acc: str) -> tuple[Any, Any, bool]:
    """The kernel parameters holding one axis's tap positions and weights (None for nearest),
    tap-major ([tap, output position]: consecutive outputs read consecutive entries), and
    whether some rows lie outside the crop (position -1)."""
    index = ctx.add_constant(f"{node.name}.taps{taps.axis}", _tap_major(taps.index, "int32"))
    weight = None
    if taps.weight is not None:
        weight = ctx.add_constant(f"{node.name}.weights{taps.axis}", _tap_major(taps.weight, acc))
    return index, weight, bool((taps.index[:, 0] < 0).any())


def _tap_major(table: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(table.T.astype(dtype))


def _resize(ctx: GroupContext, node: Node) -> list[Lazy]:
    x = ctx.get(node.inputs[0])
    out = ctx.type_of(node.outputs[0])
    attrs = get_op("Resize").full_attrs(node)
    plan = resize_plan(attrs, x.shape, *(const_input(ctx, node, k) for k in (1, 2, 3)))
    acc = "float64" if out.dtype == "float64" else "float32"
    tables = [(t.axis, t.index.shape[1], *_tables(ctx, node, t, acc)) for t in plan.axes]
    fill = te.const(plan.extrapolation, acc)

    def fn(idx: Index) -> Any:
        terms: list[tuple[Any, list[Any]]] = [(None, list(idx))]
        inside = []
        for axis, count, index, weight, crops in tables:
            i = idx[axis]
            if crops:
                inside.append(index[0, i] >= 0)
            terms = [
                (_times(w, weight, i, k), _at(src, axis, index[k, i], crops and k == 0))
                for w, src in terms
                for k in range(count)
            ]
        if len(terms) == 1 and terms[0][0] is None:  # nearest: a pure gather
            value, fill_value = x(tuple(terms[0][1])), fill.astype(x.dtype)
        else:
            value, fill_value = None, fill
            for w, src in terms:
                term = x(tuple(src)).astype(acc) * w
                value = term if value is None else value + term
        if inside:
            value = te.select(te.all_of(*inside), value, fill_value)
        return _to_dtype(value, out.dtype)

    return [Lazy(out.shape, out.dtype, fn)]


def _times(w: Any, weight: Any, i: Any, k: int) -> Any:
    if weight is None:
        return w
    return weight[k, i] if w is None else w * weight[k, i]


def _at(src: list[Any], axis: int, position: Any, clamp: bool) -> list[Any]:
    """`src` with the position on `axis` replaced (a crop's -1 read as element 0)."""
    return src[:axis] + [te.max(position, 0) if clamp else position] + src[axis + 1 :]


INT_SNAP = 1e-3


def _to_dtype(value: Any, dtype: str) -> Any:
    """The accumulated value in the output dtype: integers truncated toward zero and
    saturated, as onnxruntime's kernels cast them (ONNX leaves the rounding open), but a value
    within `INT_SNAP` of an integer is that integer (the weights' rounding would otherwise
    turn a copied 71 into 70)."""
    if value.dtype == dtype:
        return value
    if dt.is_int(dtype):
        lo, hi = te.min_value(dtype).astype(value.dtype), te.max_value(dtype).astype(value.dtype)
        near = te.round(value)
        value = te.select(te.abs(value - near) < INT_SNAP, near, value)
        value = te.min(te.max(value, lo), hi)
    return value.astype(dtype)


ELEMENTWISE: dict[str, Rule] = {"Resize": _resize}

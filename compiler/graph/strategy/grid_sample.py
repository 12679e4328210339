"""GridSample's CPU/GPU kernel: the grid's coordinates (x, y, and z for volumes) computed once
per output pixel (their padding rule included) into small stages, one per axis, then each
output element reads one (nearest), 2^r (linear) or 4^r (cubic) input pixels at those
data-dependent places, each index clamped into the input so no read leaves it (the padding
mode decides the value). It mirrors the numpy kernel of ops/grid_sample.py operation by
operation in float32, with the same interpolation taps (`axis_taps`). The coordinate stages
keep the expressions small: inlined, the reflection rule's selects nested once per use."""

from __future__ import annotations

from typing import Any

from ... import te
from ...tir.stmt import LoweringError
from ..ir import Node
from ..lower_te import AnchorRule, GroupContext, Tail
from ..ops.grid_sample import axis_taps, bounds, check_attrs
from ..registry import get_op
from .nn import Result


def _reflect(v: Any, lo: float, hi: float) -> Any:
    """`ops.grid_sample.reflect_np` as an expression."""
    span = hi - lo
    if span <= 0:
        return te.const(lo, v.dtype)
    below, above = v < lo, v > hi
    dx = te.select(below, lo - v, te.select(above, v - hi, te.const(0.0, v.dtype)))
    n = te.trunc(dx / span)
    r = dx - n * span
    even = (n - te.floor(n * 0.5) * 2.0) == te.const(0.0, v.dtype)
    low_side = te.select(even, r + lo, hi - r)
    high_side = te.select(even, hi - r, r + lo)
    return te.select(below, low_side, te.select(above, high_side, v))


def _coordinate(g: Any, size: int, mode: str, padding: str, align: bool) -> Any:
    v = (g + 1.0) * 0.5 * float(size - 1) if align else ((g + 1.0) * float(size) - 1.0) * 0.5
    v = te.round(v) if mode == "nearest" else v
    lo, hi = bounds(size, align)
    if padding == "border" and mode != "cubic":
        clamped = te.min(te.max(v, te.const(0.0, v.dtype)), te.const(float(size - 1), v.dtype))
        return te.select((v < lo) | (v > hi), clamped, v)
    if padding == "reflection":
        return _reflect(v, lo, hi)
    return v


def _grid_sample(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    if tail.nodes:
        raise LoweringError(f"{node.op} must be alone in its group (node {node.name!r})")
    x, grid = ctx.as_tensor(node.inputs[0]), ctx.as_tensor(node.inputs[1])
    mode, padding, align = check_attrs(get_op("GridSample").full_attrs(node))
    n_, c_, *dims = (int(d) for d in x.shape)
    outs = [int(d) for d in grid.shape[1:-1]]
    rank, fdt = len(dims), grid.dtype

    def coordinate(axis: int) -> Any:
        k, size = rank - 1 - axis, dims[axis]
        return te.compute(
            (n_, *outs),
            lambda n, *o: _coordinate(grid[(n, *o, k)], size, mode, padding, align),
            name=f"grid_{'xyz'[k]}",
        )

    coords = [coordinate(axis) for axis in range(rank)]

    def pixel(n: Any, c: Any, index: list) -> Any:
        """x[n, c, *index] under the padding mode (int32 indices)."""
        inside, clamped = None, []
        for i, size in zip(index, dims, strict=True):
            if padding == "reflection":
                i = _reflect(i.astype(fdt), *bounds(size, align)).astype("int32")
            clamped.append(te.min(te.max(i, te.const(0, "int32")), te.const(size - 1, "int32")))
            if padding == "zeros":
                within = (i >= 0) & (i < size)
                inside = within if inside is None else inside & within
        value = x[(n, c, *clamped)]
        if inside is None:
            return value
        return te.select(inside, value, te.const(0, value.dtype))

    def body(n: Any, c: Any, *o: Any) -> Any:
        points = [t[(n, *o)] for t in coords]
        if mode == "nearest":
            return pixel(n, c, [p.astype("int32") for p in points])
        floors = [te.floor(p) for p in points]
        taps = [axis_taps(mode, p - f) for p, f in zip(points, floors, strict=True)]
        starts = [f.astype("int32") for f in floors]

        def interpolate(axis: int, index: list) -> Any:  # innermost axes first, as numpy
            if axis == rank:
                return pixel(n, c, index)
            total = None
            for offset, weight in taps[axis]:
                term = weight * interpolate(axis + 1, [*index, starts[axis] + offset])
                total = term if total is None else total + term
            return total

        return interpolate(0, [])

    out = te.compute((n_, c_, *outs), body, name="grid_sample")
    s = te.create_schedule(out.op)
    for t in coords:
        s[t].compute_at(s[out], out.op.axis[0])
    return s, [out]


ANCHORS: dict[str, AnchorRule] = {"GridSample": _grid_sample}

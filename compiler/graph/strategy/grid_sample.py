"""GridSample's CPU/GPU kernel: the grid's x and y coordinates computed once per output pixel
(their padding rule included) into two small stages, then each output element reads one
(nearest) or four (linear) input pixels at those data-dependent places, each index clamped
into the image so no read leaves it (the padding mode decides the value). It mirrors the numpy
kernel of ops/grid_sample.py operation by operation in float32. The coordinate stages keep the
expressions small: inlined, the reflection rule's selects nested once per use."""

from __future__ import annotations

from typing import Any

from ... import te
from ...tir.stmt import LoweringError
from ..ir import Node
from ..lower_te import AnchorRule, GroupContext, Tail
from ..ops.grid_sample import bounds, check_attrs
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
    if padding == "border":
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
    n_, c_, h, w = (int(d) for d in x.shape)
    _, ho, wo, _ = (int(d) for d in grid.shape)
    fdt = grid.dtype

    def coordinate(k: int, size: int, name: str) -> Any:
        return te.compute(
            (n_, ho, wo),
            lambda n, i, j: _coordinate(grid[n, i, j, k], size, mode, padding, align),
            name=name,
        )

    gx, gy = coordinate(0, w, "grid_x"), coordinate(1, h, "grid_y")

    def pixel(n: Any, c: Any, iy: Any, ix: Any) -> Any:
        """x[n, c, iy, ix] under the padding mode (int32 indices)."""
        if padding == "reflection":
            ix = _reflect(ix.astype(fdt), *bounds(w, align)).astype("int32")
            iy = _reflect(iy.astype(fdt), *bounds(h, align)).astype("int32")
        cx = te.min(te.max(ix, te.const(0, "int32")), te.const(w - 1, "int32"))
        cy = te.min(te.max(iy, te.const(0, "int32")), te.const(h - 1, "int32"))
        value = x[n, c, cy, cx]
        if padding != "zeros":
            return value
        inside = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
        return te.select(inside, value, te.const(0, value.dtype))

    def body(n: Any, c: Any, i: Any, j: Any) -> Any:
        px, py = gx[n, i, j], gy[n, i, j]
        if mode == "nearest":
            return pixel(n, c, py.astype("int32"), px.astype("int32"))
        x0, y0 = te.floor(px), te.floor(py)
        wx1, wy1 = px - x0, py - y0
        wx0, wy0 = 1.0 - wx1, 1.0 - wy1
        ix0, iy0 = x0.astype("int32"), y0.astype("int32")
        row0 = wx0 * pixel(n, c, iy0, ix0) + wx1 * pixel(n, c, iy0, ix0 + 1)
        row1 = wx0 * pixel(n, c, iy0 + 1, ix0) + wx1 * pixel(n, c, iy0 + 1, ix0 + 1)
        return wy0 * row0 + wy1 * row1

    out = te.compute((n_, c_, ho, wo), body, name="grid_sample")
    s = te.create_schedule(out.op)
    for t in (gx, gy):
        s[t].compute_at(s[out], out.op.axis[0])
    return s, [out]


ANCHORS: dict[str, AnchorRule] = {"GridSample": _grid_sample}

"""Pooling and reduction anchors: pool2d from the x86 library, separable max pooling, the
generic windowed pooling, global pooling and the Reduce* ops (the GPU row reduction)."""

from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import te
from ...topi.gpu import reduce as gpu_reduce
from ...topi.x86 import (  # the x86 operator library
    pool2d,
    schedule_pool2d,
)
from ..ir import Node
from ..lower_te import AnchorRule, GroupContext, Index, Lazy, Tail, schedule_rows, unravel
from ..ops.nn import window_geometry
from ..ops.shape import reduce_axes
from .nn import Result, full_attrs, gpu_row_config, reduce_kernel, rows_of, window_source


def _pool(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    attrs = full_attrs(node)
    x_ty = ctx.type_of(node.inputs[0])
    kernel = tuple(attrs["kernel_shape"])
    kind = "max" if node.op == "MaxPool" else "avg"
    geometry = window_geometry(attrs, x_ty.shape[2:], kernel, attrs["ceil_mode"])
    begin, end, strides, dil, _ = geometry
    if kind == "max" and _is_blocked_2d(x_ty.shape, kernel, geometry):
        return max_pool_separable(ctx, node, tail, kernel[:2], begin[:2], strides[:2])
    if len(x_ty.shape) != 4:
        return _pool_generic(ctx, node, tail, kind, kernel, geometry)
    if kind == "max" and set(dil) == {1}:  # 10-20x faster than topi's pool2d (no vector lanes)
        return max_pool_separable(ctx, node, tail, kernel, begin, strides)
    symmetric = begin == end and len({*begin}) == 1
    square = len({*kernel}) == 1 and len({*strides}) == 1 and set(dil) == {1}
    counts_ok = kind == "max" or begin[0] == 0 or attrs.get("count_include_pad")
    if symmetric and square and counts_ok and not attrs["ceil_mode"] and not tail.nodes:
        _, out = pool2d(ctx.as_tensor(node.inputs[0]), kind, kernel[0], strides[0], begin[0])
        return schedule_pool2d(out), [out]
    return _pool_generic(ctx, node, tail, kind, kernel, geometry)


def _is_blocked_2d(shape: tuple, kernel: tuple, geometry: tuple) -> bool:
    """A 2-D pool of blocked NCHW[c]c data (`passes.alter_layout`): 3-D over (H, W, c) with a
    window of 1 along c, no padding, stride or dilation there."""
    begin, end, strides, dil, _ = geometry
    along_c = (kernel[-1], begin[-1], end[-1], strides[-1])
    return len(shape) == 5 and along_c == (1, 0, 0, 1) and set(dil) == {1}


def max_pool_separable(
    ctx: GroupContext, node: Node, tail: Tail, kernel: tuple, pads: list, st: list
) -> Result:
    """Max pooling as a column pass (contiguous rows: vector loads) then a row pass over it,
    computed per output row: 3 + 3 reads per output for a 3x3 window instead of 9 gathers.
    Blocked data (`[N, C/c, H, W, c]`) keeps its channel block as the innermost axis."""
    x = ctx.get(node.inputs[0])
    n, c, h, w, *block = x.shape
    shape = ctx.type_of(node.outputs[0]).shape
    low = te.min_value(x.dtype)
    ry, rx = te.reduce_axis((0, kernel[0]), "ry"), te.reduce_axis((0, kernel[1]), "rx")

    def fcol(nn: Any, cc: Any, y: Any, xx: Any, *ci: Any) -> Any:
        iy = y * st[0] + ry - pads[0]
        read = x((nn, cc, te.min(te.max(iy, 0), h - 1), xx, *ci))
        return te.max(te.select(te.all_of(iy >= 0, iy < h), read, low), axis=ry)

    cols = te.compute((n, c, shape[2], w, *block), fcol, name="cols")

    def frow(nn: Any, cc: Any, y: Any, xx: Any, *ci: Any) -> Any:
        ix = xx * st[1] + rx - pads[1]
        read = cols[(nn, cc, y, te.min(te.max(ix, 0), w - 1), *ci)]
        return te.max(te.select(te.all_of(ix >= 0, ix < w), read, low), axis=rx)

    red = te.compute(shape, frow, name="pool")
    out = red
    first = _window_nan_first(x, pads, st, [1] * len(pads))
    if tail.nodes or first is not None:
        finish = first or (lambda v, i: v)
        out = te.compute(shape, lambda *i: tail.epilogue(finish(red[i], i), i), name="out")
    s = te.create_schedule(out.op)
    if block:  # rows in parallel, the channel block in vector lanes (a fused column axis would
        # leave the column pass no bound narrower than the whole row)
        nn, cc, y, _, ci = out.op.axis
        row = s[out].fuse(nn, cc, y)
        s[out].parallel(row)
        s[out].vectorize(ci)
    else:
        row = schedule_rows(s, out)
    for stage in (cols, red) if out is not red else (cols,):
        s[stage].compute_at(s[out], row)
    _, lanes = s[cols].split(cols.op.axis[-1], factor=16)
    s[cols].vectorize(lanes)
    return s, [out]


def _window_nan_first(x: Any, pads: Sequence, st: Sequence, dil: Sequence) -> Any:
    """A float max pool's NaN rule, ReduceMax's (`_nan_first`): the max skips NaN, but a NaN
    at the window's first position inside the image is the result, so a window of NaN only
    gives NaN (not -inf). None for integers. `x` is `[N, C, *spatial]`, or blocked
    `[N, C/c, H, W, c]` (the trailing block axis is not pooled)."""
    if np.dtype(x.dtype).kind != "f":
        return None
    spatial = x.shape[2 : 2 + len(pads)]

    def post(v: Any, i: Index) -> Any:
        n, c, *rest = i
        out, block = rest[: len(pads)], rest[len(pads) :]
        pos = []
        for o, s, d, p, size in zip(out, st, dil, pads, spatial, strict=True):
            start = o * s - p  # the first tap inside the image: start + r * d >= 0
            if not p:
                first = start
            elif d == 1:
                first = te.max(start, 0)
            else:
                first = start + te.max((d - 1 - start) // d, 0) * d
            pos.append(te.min(first, size - 1))  # (a ceil_mode window may start past it)
        value = x((n, c, *pos, *block))
        return te.select(value != value, value, v)

    return post


def _pool_generic(
    ctx: GroupContext, node: Node, tail: Tail, kind: str, kernel: tuple, geometry: tuple
) -> Result:
    """Max or average pooling over any number of spatial axes: one reduction over the window
    of a padded copy (the padding is the reduction's identity), the average divided by the
    taps `_window_count` counts."""
    begin, end, st, dil, _ = geometry
    x = ctx.get(node.inputs[0])
    shape = ctx.type_of(node.outputs[0]).shape
    raxes = [te.reduce_axis((0, k), f"r{a}") for a, k in enumerate(kernel)]
    # max padding: the lowest finite value, as onnxruntime's pools (a padded window of -inf
    # gives -3.4e38), but -inf in a dilated window, as its dilated kernel (and the ONNX spec)
    low = (te.lowest if max(dil) > 1 else te.min_value)(x.dtype)
    low = low if kind == "max" else te.const(0, x.dtype)
    read, extra = window_source(x, shape, kernel, begin, st, dil, low)

    def body(n: Any, c: Any, *o: Any) -> Any:
        pos = [i * s + r * d - p for i, s, r, d, p in zip(o, st, raxes, dil, begin, strict=True)]
        return (te.max if kind == "max" else te.sum)(read(n, c, *pos), axis=raxes)

    red = te.compute(shape, body, name="pool")
    post = _window_nan_first(x, begin, st, dil) if kind == "max" else None
    if kind == "avg":
        include = bool(full_attrs(node)["count_include_pad"])
        lows = [-b for b in begin] if include else [0] * len(kernel)
        highs = [n + e if include else n for n, e in zip(x.shape[2:], end, strict=True)]
        full = _full_windows(kernel, geometry, lows, highs)

        def post(v: Any, i: Index) -> Any:
            if full:
                return v / float(np.prod(kernel))
            return v / _window_count(i[2:], kernel, st, dil, begin, lows, highs, x.dtype)

    return reduce_kernel(red, tail, post, extra)


def _window_count(
    out: Index, kernel: tuple, st: list, dil: list, begin: list, lows: list, highs: list, dtype
) -> Any:
    """How many taps of the window at output position `out` fall in [low, high) on every axis:
    an average's divisor (the input, or the input and its explicit padding, never the end
    padding ceil_mode adds)."""
    count: Any = 1
    for o, k, s, d, b, low, high in zip(out, kernel, st, dil, begin, lows, highs, strict=True):
        x0 = o * s - b  # the window's first tap
        if d == 1:
            taps = te.min(high - x0, k) - te.max(low - x0, 0)
        else:
            taps = te.min((high - 1 - x0) // d, k - 1) - te.max((low - x0 + d - 1) // d, 0) + 1
        count = count * taps
    return count.astype(dtype)


def _full_windows(kernel: tuple, geometry: tuple, lows: list, highs: list) -> bool:
    """Whether every window lies inside [low, high) on every axis (a constant divisor)."""
    begin, _, st, dil, outs = geometry
    shapes = zip(kernel, begin, st, dil, outs, lows, highs, strict=True)
    return all(-b >= lo and (o - 1) * s - b + (k - 1) * d < hi for k, b, s, d, o, lo, hi in shapes)


def _global_pool(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    x = ctx.get(node.inputs[0])
    spatial = x.shape[2:]
    raxes = [te.reduce_axis((0, d), f"r{k}") for k, d in enumerate(spatial)]
    shape = ctx.type_of(node.outputs[0]).shape
    reducer = te.max if node.op == "GlobalMaxPool" else te.sum
    count = float(np.prod(spatial))
    post = (lambda v, i: v / count) if node.op == "GlobalAveragePool" else None
    if node.op == "GlobalMaxPool" and np.dtype(x.dtype).kind == "f":  # ReduceMax's NaN rule:
        # an image of NaN only gave -inf (onnxruntime: NaN)
        post = _nan_first(x, tuple(range(2, len(x.shape))), True)
    if len(spatial) < 2:
        red = te.compute(
            shape, lambda n, c, *_: reducer(x((n, c, *raxes)), axis=raxes), name="gpool"
        )
        return reduce_kernel(red, tail, post)
    # the leading spatial axes first, the last one in vector lanes (the output alone has no
    # axis to vectorize), then the short remaining row
    cols = te.compute(
        (*shape[:2], spatial[-1]),
        lambda n, c, j: reducer(x((n, c, *raxes[:-1], j)), axis=raxes[:-1]),
        name="gpool_cols",
    )
    last = te.reduce_axis((0, spatial[-1]), "rlast")
    red = te.compute(shape, lambda n, c, *_: reducer(cols[n, c, last], axis=last), name="gpool")
    return reduce_kernel(red, tail, post, [cols])


_REDUCERS = {
    "ReduceSum": te.sum,
    "ReduceMean": te.sum,
    "ReduceMax": te.max,
    "ReduceMin": te.min,
    "ReduceProd": te.prod,
}


def _reduce(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    x = ctx.get(node.inputs[0])
    attrs = full_attrs(node)
    const = ctx.constant(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    axes = reduce_axes(attrs, len(x.shape), const)
    if axes is None:
        axes = ()
    shape = ctx.type_of(node.outputs[0]).shape or (1,)
    raxes = {a: te.reduce_axis((0, x.shape[a]), f"r{a}") for a in axes}

    def body(*i: Any) -> Any:
        it = iter(i)
        src = []
        for a in range(len(x.shape)):
            if a in raxes:
                src.append(raxes[a])
                if attrs["keepdims"]:
                    next(it)
            else:
                src.append(next(it))
        value = x(tuple(src))
        return _REDUCERS[node.op](value, axis=list(raxes.values())) if raxes else value

    count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    post = _mean_of(count, x.dtype) if node.op == "ReduceMean" else None
    if node.op in ("ReduceMax", "ReduceMin") and np.dtype(x.dtype).kind == "f" and raxes:
        post = _nan_first(x, tuple(raxes), bool(attrs["keepdims"]))
    lead = len(x.shape) - len(axes)
    if ctx.gpu and set(axes) == set(range(lead, len(x.shape))) and count > gpu_reduce.MIN_ROW:
        return _gpu_reduce(ctx, node, tail, x, lead, post)
    red = te.compute(shape, body, name="reduce")
    return reduce_kernel(red, tail, post)


def _nan_first(x: Lazy, axes: tuple[int, ...], keepdims: bool) -> Any:
    """A max/min's NaN rule (onnxruntime's scan from the first element): the reduction skips
    NaN (the comparison it folds with keeps the running value), but a NaN first in the
    reduced range is the result, so a range of NaN only gives NaN."""

    def post(v: Any, i: Index) -> Any:
        it, src = iter(i), []
        for a in range(len(x.shape)):
            if a in axes:
                src.append(0)
                if keepdims:
                    next(it)
            else:
                src.append(next(it))
        first = x(tuple(src))
        return te.select(first != first, first, v)

    return post


def _mean_of(count: int, dtype: str) -> Any:
    """The mean's division of a sum of `count` values: an integer mean truncates as the integer
    sum divided in its own type (onnxruntime's), and an empty integer one is 0, not a trap."""
    if np.dtype(dtype).kind in "iu":
        return lambda v, i: v / te.const(max(count, 1), v.dtype)
    return lambda v, i: v / float(count)


def _gpu_reduce(ctx: GroupContext, node: Node, tail: Tail, x: Lazy, lead: int, post: Any) -> Result:
    """A reduction over the trailing axes (more than `MIN_ROW` values per output) on a GPU: one
    thread block per output (`topi.gpu.reduce`), the fused producers read in the row's loads,
    the mean's division and the tail applied where the value is written."""
    rows, n = rows_of(x.shape, lead)
    op = {"ReduceMean": "sum"}.get(node.op, node.op[len("Reduce") :].lower())
    config, _ = gpu_row_config(ctx, rows, n, op, x.dtype)

    def f(r: Any, j: Any) -> Any:
        return x((*unravel(r, x.shape[:lead]), *unravel(j, x.shape[lead:])))

    total, stages = gpu_reduce.block_reduce(f, rows, n, op, config.threads, False, "red")
    post = post or (lambda v, i: v)
    shape = ctx.type_of(node.outputs[0]).shape or (1,)

    def fout(*i: Any) -> Any:
        r = _ravel(i[:lead], x.shape[:lead])
        return tail.epilogue(post(total(r, 0), i), i)

    out = te.compute(shape, fout, name="out")
    s = te.create_schedule(out.op)
    gpu_reduce.schedule_value_output(s, out, stages)
    return s, [out]


def _ravel(index: Sequence[Any], dims: Sequence[int]) -> Any:
    """The flat row-major position of `index` in `dims` (0 for no dims)."""
    flat: Any = 0
    for i, d in zip(index, dims, strict=True):
        flat = flat * d + i
    return flat


ANCHORS: dict[str, AnchorRule] = {
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
    "ReduceSum": _reduce,
    "ReduceMean": _reduce,
    "ReduceMax": _reduce,
    "ReduceMin": _reduce,
    "ReduceProd": _reduce,
}

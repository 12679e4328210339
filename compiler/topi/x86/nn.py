"""Pooling, softmax, layer norm, depthwise conv2d and fused element-wise/broadcast operators for
x86 (compute + schedule)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ... import te
from ...schedule.primitives import check_positive_knobs
from ...schedule.schedule import Schedule
from ...te.tensor import Tensor


@dataclass(frozen=True)
class RowConfig:
    """Knobs of the row-wise schedules: vector lanes of the innermost axis, thread pool use."""

    lanes: int = 16
    parallel: bool = True

    def check(self, op: str) -> None:
        check_positive_knobs(self, ("lanes",), op)


def _vectorize_last(s: Schedule, t: Tensor, config: RowConfig) -> None:
    """Parallel over the fused outer axes, vector lanes over the innermost axis."""
    axes = list(t.op.axis)
    _, inner = s[t].split(axes[-1], factor=config.lanes)
    s[t].vectorize(inner)
    if len(axes) > 1 and config.parallel:
        outer = s[t].fuse(*axes[:-1]) if len(axes) > 2 else axes[0]
        s[t].parallel(outer)


# ---- pooling ------------------------------------------------------------------------------------


def pool2d(
    data: Tensor, kind: str, size: int, stride: int = 1, padding: int = 0
) -> tuple[list[Tensor], Tensor]:
    """Max or average pooling of NCHW `data` (average counts the padding, as ONNX's default).

    Returns:
        (args, out): the arguments in parameter order and the output tensor.
    """
    if kind not in ("max", "avg"):
        raise ValueError(f"pool2d: kind must be 'max' or 'avg', not {kind!r}")
    n, c, h, w = data.shape
    oh, ow = (h + 2 * padding - size) // stride + 1, (w + 2 * padding - size) // stride + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"pool2d: output size must be positive, not {oh}x{ow}")
    low = te.min_value(data.dtype) if kind == "max" else te.const(0, data.dtype)
    ry, rx = te.reduce_axis((0, size), "ry"), te.reduce_axis((0, size), "rx")

    def window(nn: te.Expr, cc: te.Expr, y: te.Expr, x: te.Expr) -> te.Expr:
        yy, xx = y * stride + ry - padding, x * stride + rx - padding
        if padding == 0:
            return data[nn, cc, yy, xx]
        inside = te.all_of(yy >= 0, yy < h, xx >= 0, xx < w)
        return te.if_then_else(inside, data[nn, cc, yy, xx], low)

    reducer = te.max if kind == "max" else te.sum
    pooled = te.compute(
        (n, c, oh, ow),
        lambda nn, cc, y, x: reducer(window(nn, cc, y, x), axis=[ry, rx]),
        name="pool",
    )
    out = pooled
    if kind == "avg":
        out = te.compute(pooled.shape, lambda *i: pooled[i] / float(size * size), name="avg")
    return [data, out], out


def schedule_pool2d(out: Tensor, config: RowConfig | None = None) -> Schedule:
    """Rows in parallel; the average's division fused into the window sum (a local buffer)."""
    config = config or RowConfig()
    config.check("pool2d")
    s = te.create_schedule(out.op)
    nn, cc, y, _ = out.op.axis
    row = s[out].fuse(nn, cc, y)
    if config.parallel:
        s[out].parallel(row)
    if out.op.name == "avg":
        (pooled,) = out.op.input_tensors
        s[pooled].compute_at(s[out], row)
        s[pooled].set_scope("local")
    return s


# ---- softmax ----------------------------------------------------------------------------------


REDUCE_LANES = 16  # partial results of a long row reduction: one 16-lane vector
LANES_MIN_ROW = 16  # rows longer than this are reduced in lanes


def row_reduce(
    rows: int,
    cols: int,
    term: Callable[[te.Expr, te.Expr], te.Expr],
    name: str,
    kind: str = "sum",
    min_row: int | None = LANES_MIN_ROW,
) -> tuple[Tensor, list[Tensor]]:
    """`sum_j term(i, j)` (or `max_j`) of each row, and every stage it takes (to be computed at
    the consumer's row: `schedule_row_reduce`). A row longer than `min_row` (None: never; GPU
    kernels, whose long rows take a schedule of their own) is reduced first into REDUCE_LANES
    partial results (one vector; `<name>_part`), then those, then the ragged tail of a row that
    is not a multiple of the lanes. One running scalar was bound by the add's latency:
    LayerNormalization over 768 values (ViT-B/16's, 197 rows) took 0.33 ms, in lanes 0.04;
    softmax over ViT's 197-long attention rows 1.16 ns per value, in lanes 0.38 (Swin's 49-long
    rows 1.03 -> 0.62)."""
    if kind not in ("sum", "max"):
        raise ValueError(f"row_reduce: kind must be 'sum' or 'max', not {kind!r}")
    reducer = te.sum if kind == "sum" else te.max
    if min_row is None or cols <= max(min_row, REDUCE_LANES - 1):
        k = te.reduce_axis((0, cols), f"{name}_k")
        return te.compute((rows,), lambda i: reducer(term(i, k), axis=k), name=name), []
    full, tail = cols - cols % REDUCE_LANES, cols % REDUCE_LANES
    kk = te.reduce_axis((0, full // REDUCE_LANES), f"{name}_kk")
    part = te.compute(
        (rows, REDUCE_LANES),
        lambda i, lane: reducer(term(i, kk * REDUCE_LANES + lane), axis=kk),
        name=f"{name}_part",
    )
    kl = te.reduce_axis((0, REDUCE_LANES), f"{name}_kl")
    lanes_name = f"{name}_lanes" if tail else name
    lanes = te.compute((rows,), lambda i: reducer(part[i, kl], axis=kl), name=lanes_name)
    if not tail:
        return lanes, [part]
    kt = te.reduce_axis((0, tail), f"{name}_kt")
    rest = te.compute((rows,), lambda i: reducer(term(i, full + kt), axis=kt), name=f"{name}_tail")
    both = (lambda i: lanes[i] + rest[i]) if kind == "sum" else lambda i: te.max(lanes[i], rest[i])
    return te.compute((rows,), both, name=name), [part, lanes, rest]


def schedule_row_reduce(s: Schedule, stages: list[Tensor], at: Tensor, row: te.IterVar) -> None:
    """Compute `row_reduce`'s stages (its result included) at `row` of `at`, each partial-result
    stage's lanes innermost as one vector."""
    for t in stages:
        s[t].compute_at(s[at], row)
        if t.op.name.endswith("_part"):
            (k,), (_, lane) = t.op.reduce_axis, t.op.axis
            s[t].reorder(k, lane)
            s[t].vectorize(lane)


def softmax(
    data: Tensor, min_row: int | None = LANES_MIN_ROW, log: bool = False
) -> tuple[list[Tensor], Tensor]:
    """Softmax (or, with `log`, log-softmax) over the last axis of a 2-D tensor (max-subtracted
    for stability); the row's max and sum in vector lanes when it is longer than `min_row`
    (`row_reduce`), its reciprocal multiplied (log-softmax: `x - max - log(sum)`)."""
    n, m = data.shape
    mx, _ = row_reduce(n, m, lambda i, j: data[i, j], "max", kind="max", min_row=min_row)
    ex = te.compute((n, m), lambda i, j: te.exp(data[i, j] - mx[i]), name="exp")
    sm, _ = row_reduce(n, m, lambda i, j: ex[i, j], "sum", min_row=min_row)
    if log:
        shift = te.compute((n,), lambda i: mx[i] + te.log(sm[i]), name="log_sum")
        out = te.compute((n, m), lambda i, j: data[i, j] - shift[i], name="log_softmax")
        return [data, out], out
    inv = te.compute((n,), lambda i: 1.0 / sm[i], name="inv_sum")
    out = te.compute((n, m), lambda i, j: ex[i, j] * inv[i], name="softmax")
    return [data, out], out


def softmax_inner(
    data: Tensor, log: bool = False, lanes: int = REDUCE_LANES
) -> tuple[list[Tensor], Tensor]:
    """(Log-)softmax over the middle axis of `[outer, n, inner]` (an axis before the last):
    the max and the sum of each of the `inner` columns, in vector lanes along `inner`
    (`schedule_softmax_inner`), where one running scalar per column, read at a stride of
    `inner`, was bound by the reduction's latency (a softmax over axis 1 of 8x64x50: 4.9x
    onnxruntime's time)."""
    outer, n, inner = data.shape
    k1, k2 = te.reduce_axis((0, n), "k1"), te.reduce_axis((0, n), "k2")
    mx = te.compute((outer, inner), lambda o, i: te.max(data[o, k1, i], axis=k1), name="max")
    sm = te.compute(
        (outer, inner), lambda o, i: te.sum(te.exp(data[o, k2, i] - mx[o, i]), axis=k2),
        name="sum",
    )  # fmt: skip
    if log:
        shift = te.compute((outer, inner), lambda o, i: mx[o, i] + te.log(sm[o, i]), name="shift")
        body = lambda o, k, i: data[o, k, i] - shift[o, i]  # noqa: E731
    else:
        shift = te.compute((outer, inner), lambda o, i: 1.0 / sm[o, i], name="inv_sum")
        body = lambda o, k, i: te.exp(data[o, k, i] - mx[o, i]) * shift[o, i]  # noqa: E731
    out = te.compute((outer, n, inner), body, name="log_softmax" if log else "softmax")
    return [data, out], out


def schedule_softmax_inner(out: Tensor, config: RowConfig | None = None) -> Schedule:
    """`softmax_inner`'s schedule: one outer row per task; in it, for each vector of `inner`
    columns, the max and the sum run over the softmax axis with the columns in lanes (the
    reduction axis outside the lanes), then the output rows, lanes on `inner`."""
    config = config or RowConfig()
    config.check("softmax_inner")
    s = te.create_schedule(out.op)
    o, k, i = out.op.axis
    inner = out.shape[2]
    (shift,) = (t for t in out.op.input_tensors if t.op.name in ("shift", "inv_sum"))
    stages = [t for t in _stages(out) if t.op.name in ("max", "sum")] + [shift]
    lanes = min(config.lanes, inner)
    io, ii = s[out].split(i, factor=lanes)
    s[out].reorder(o, io, k, ii)
    for t in stages:
        s[t].compute_at(s[out], io)
        if t.op.reduce_axis:
            (kr,), (_, ti) = t.op.reduce_axis, t.op.axis
            s[t].reorder(kr, ti)
        s[t].vectorize(t.op.axis[1])
    s[out].vectorize(ii)
    if config.parallel:
        s[out].parallel(o)
    return s


def _stages(out: Tensor) -> list[Tensor]:
    """The compute stages `out` reads, directly or not, producers first (each once)."""
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:
        for p in t.op.input_tensors:
            if isinstance(p.op, te.PlaceholderOp) or id(p.op) in seen:
                continue
            seen.add(id(p.op))
            visit(p)
            order.append(p)

    visit(out)
    return order


def schedule_softmax(out: Tensor, config: RowConfig | None = None) -> Schedule:
    """One row per task: max, exp, sum and its reciprocal computed inside the row loop, vector
    lanes on columns (and on the long rows' partial maxima and sums)."""
    config = config or RowConfig()
    config.check("softmax")
    s = te.create_schedule(out.op)
    row, col = out.op.axis
    stages = _stages(out)
    schedule_row_reduce(s, stages, out, row)
    ex = next(t for t in stages if t.op.name == "exp")
    _, lanes = s[ex].split(ex.op.axis[1], factor=config.lanes)
    s[ex].vectorize(lanes)
    _, lanes = s[out].split(col, factor=config.lanes)
    s[out].vectorize(lanes)
    if config.parallel:
        s[out].parallel(row)
    return s


# ---- element-wise and broadcast ---------------------------------------------------------------


def broadcast_op(
    fn: Callable[[te.Expr, te.Expr], te.Expr], a: Tensor, b: Tensor, name: str = "broadcast"
) -> tuple[list[Tensor], Tensor]:
    """`fn(a, b)` with numpy broadcasting (shapes aligned at the right, extent-1 axes stretch)."""
    rank = max(len(a.shape), len(b.shape))
    sa, sb = (1,) * (rank - len(a.shape)) + a.shape, (1,) * (rank - len(b.shape)) + b.shape
    shape = []
    for da, db in zip(sa, sb, strict=True):
        if da != db and 1 not in (da, db):
            raise ValueError(
                f"{name}: shapes {list(a.shape)} and {list(b.shape)} must broadcast, "
                f"extents {da} and {db} differ"
            )
        shape.append(max(da, db))

    def pick(t: Tensor, padded: tuple[int, ...], idx: tuple[te.Expr, ...]) -> te.Expr:
        keep = idx[rank - len(t.shape) :]
        dims = padded[rank - len(t.shape) :]
        return t[tuple(0 if d == 1 else i for d, i in zip(dims, keep, strict=True))]

    out = te.compute(tuple(shape), lambda *i: fn(pick(a, sa, i), pick(b, sb, i)), name=name)
    return [a, b, out], out


def schedule_elementwise(out: Tensor, config: RowConfig | None = None) -> Schedule:
    """Producers that are element-wise are inlined (fused); lanes on the last axis."""
    config = config or RowConfig()
    config.check("elementwise")
    s = te.create_schedule(out.op)
    for t in out.op.input_tensors:
        if s[t].is_compute and not t.op.reduce_axis:
            s[t].compute_inline()
    _vectorize_last(s, out, config)
    return s


# ---- depthwise conv2d ------------------------------------------------------------------------


def depthwise_conv2d(
    data: Tensor, kernel: Tensor, stride: int = 1, padding: int = 0
) -> tuple[list[Tensor], Tensor]:
    """Depthwise NCHW conv2d: `kernel` is `[C, 1, R, S]`, one filter per channel.

    Returns:
        (args, out): the arguments in parameter order and the output tensor.
    """
    n, c, h, w = data.shape
    c2, one, r, s = kernel.shape
    if (c2, one) != (c, 1):
        raise ValueError(
            f"depthwise_conv2d: kernel must be [{c}, 1, R, S], not {list(kernel.shape)}"
        )
    oh, ow = (h + 2 * padding - r) // stride + 1, (w + 2 * padding - s) // stride + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"depthwise_conv2d: output size must be positive, not {oh}x{ow}")
    ry, rx = te.reduce_axis((0, r), "ry"), te.reduce_axis((0, s), "rx")

    def tap(nn: te.Expr, cc: te.Expr, y: te.Expr, x: te.Expr) -> te.Expr:
        yy, xx = y * stride + ry - padding, x * stride + rx - padding
        value = data[nn, cc, yy, xx]
        if padding:
            inside = te.all_of(yy >= 0, yy < h, xx >= 0, xx < w)
            value = te.if_then_else(inside, value, te.const(0, data.dtype))
        return value * kernel[cc, 0, ry, rx]

    out = te.compute(
        (n, c, oh, ow),
        lambda nn, cc, y, x: te.sum(tap(nn, cc, y, x), axis=[ry, rx]),
        name="depthwise",
    )
    return [data, kernel, out], out


def schedule_depthwise_conv2d(out: Tensor, config: RowConfig | None = None) -> Schedule:
    """Rows in parallel; each output row accumulates in a local buffer, vector lanes along x."""
    config = config or RowConfig()
    config.check("depthwise_conv2d")
    s = te.create_schedule(out.op)
    local = s.cache_write(out, "local")
    nn, cc, y, x = out.op.axis
    row = s[out].fuse(nn, cc, y)
    if config.parallel:
        s[out].parallel(row)
    s[local].compute_at(s[out], row)
    lx = s[local].op.axis[3]
    ry, rx = s[local].op.reduce_axis
    s[local].reorder(ry, rx, lx)
    _, lanes = s[local].split(lx, factor=config.lanes)
    s[local].vectorize(lanes)
    return s


# ---- layer norm ------------------------------------------------------------------------------


def layer_norm(
    data: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5
) -> tuple[list[Tensor], Tensor]:
    """Layer normalization over the last axis of a 2-D tensor, then `* gamma + beta`."""
    n, m = data.shape
    k1, k2 = te.reduce_axis((0, m), "k1"), te.reduce_axis((0, m), "k2")
    total = te.compute((n,), lambda i: te.sum(data[i, k1], axis=k1), name="sum")
    mean = te.compute((n,), lambda i: total[i] / float(m), name="mean")
    dev = te.compute((n, m), lambda i, j: data[i, j] - mean[i], name="dev")
    var = te.compute((n,), lambda i: te.sum(dev[i, k2] * dev[i, k2], axis=k2), name="var")
    out = te.compute(
        (n, m),
        lambda i, j: dev[i, j] * te.rsqrt(var[i] / float(m) + eps) * gamma[j] + beta[j],
        name="layer_norm",
    )
    return [data, gamma, beta, out], out


def schedule_layer_norm(out: Tensor, config: RowConfig | None = None) -> Schedule:
    """One row per task: the statistics are computed inside the row loop, the deviation inlined."""
    config = config or RowConfig()
    config.check("layer_norm")
    s = te.create_schedule(out.op)
    dev = next(t for t in out.op.input_tensors if t.op.name == "dev")
    var = next(t for t in out.op.input_tensors if t.op.name == "var")
    mean = next(t for t in dev.op.input_tensors if t.op.name == "mean")
    total = mean.op.input_tensors[0]
    s[dev].compute_inline()
    row, col = out.op.axis
    for t in (total, mean, var):
        s[t].compute_at(s[out], row)
    _, lanes = s[out].split(col, factor=config.lanes)
    s[out].vectorize(lanes)
    if config.parallel:
        s[out].parallel(row)
    return s

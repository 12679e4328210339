"""Pooling, softmax, layer norm, depthwise conv2d and fused element-wise/broadcast operators for
x86 (compute + schedule)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ... import te
from ...schedule.primitives import check_positive_knobs
from ...schedule.schedule import Schedule
from ...te.tensor import Tensor
from ..gpu.reduce import MIN_ROW


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


# Softmax rows of a multiple of this many columns (longer than MIN_ROW: shorter ones may be
# scheduled for a GPU's threads) reduce in this many partial maxima and sums
# (one vector register), then across them: a single running max or sum is a chain of
# dependent scalar operations, 4 cycles a column (a 128-wide attention softmax ran 3x
# onnxruntime's time).
SOFTMAX_PARTIALS = 16


def softmax(data: Tensor) -> tuple[list[Tensor], Tensor]:
    """Softmax over the last axis of a 2-D tensor (max-subtracted for stability)."""
    n, m = data.shape
    if m % SOFTMAX_PARTIALS or m <= MIN_ROW:  # rows up to MIN_ROW may be a GPU's (norm.py)
        k1, k2 = te.reduce_axis((0, m), "k1"), te.reduce_axis((0, m), "k2")
        mx = te.compute((n,), lambda i: te.max(data[i, k1], axis=k1), name="max")
        ex = te.compute((n, m), lambda i, j: te.exp(data[i, j] - mx[i]), name="exp")
        sm = te.compute((n,), lambda i: te.sum(ex[i, k2], axis=k2), name="sum")
    else:
        mx = _partial_reduce(data, te.max, "max")
        ex = te.compute((n, m), lambda i, j: te.exp(data[i, j] - mx[i]), name="exp")
        sm = _partial_reduce(ex, te.sum, "sum")
    out = te.compute((n, m), lambda i, j: ex[i, j] / sm[i], name="softmax")
    return [data, out], out


def _partial_reduce(data: Tensor, reducer: Callable, name: str) -> Tensor:
    """`reducer` over each row of `data` as SOFTMAX_PARTIALS strided partial results
    (`part[i, l]` over columns `l, l + P, ...`), then over those."""
    n, m = data.shape
    width = SOFTMAX_PARTIALS
    ko = te.reduce_axis((0, m // width), f"{name}_ko")
    kl = te.reduce_axis((0, width), f"{name}_kl")
    part = te.compute(
        (n, width), lambda i, lane: reducer(data[i, ko * width + lane], axis=ko), name=f"p{name}"
    )
    return te.compute((n,), lambda i: reducer(part[i, kl], axis=kl), name=name)


def schedule_softmax(out: Tensor, config: RowConfig | None = None) -> Schedule:
    """One row per task: max, exp and sum computed inside the row loop, vector lanes on columns
    (and on the partial maxima and sums of `_partial_reduce`)."""
    config = config or RowConfig()
    config.check("softmax")
    s = te.create_schedule(out.op)
    ex, sm = out.op.input_tensors
    mx = next(t for t in ex.op.input_tensors if t.op.name == "max")
    parts = [t for r in (mx, sm) for t in r.op.input_tensors if t.op.name in ("pmax", "psum")]
    row, col = out.op.axis
    for t in (*parts, mx, ex, sm):
        s[t].compute_at(s[out], row)
    for part in parts:
        (ko,) = part.op.reduce_axis
        outer, lanes = s[part].split(part.op.axis[1], factor=min(config.lanes, SOFTMAX_PARTIALS))
        s[part].reorder(ko, outer, lanes)
        s[part].vectorize(lanes)
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

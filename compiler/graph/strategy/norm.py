"""Softmax, LogSoftmax and LayerNormalization anchors (all outputs of LayerNormalization)."""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import te
from ...te.tensor import Tensor
from ...tir.stmt import LoweringError
from ...topi.gpu import reduce as gpu_reduce
from ...topi.x86 import (  # the x86 operator library
    LANES_MIN_ROW,
    row_reduce,
    schedule_row_reduce,
    schedule_softmax,
    schedule_softmax_inner,
    softmax,
    softmax_inner,
)
from ..ir import Node
from ..lower_te import AnchorRule, GroupContext, Lazy, Tail, reshape_lazy
from .elemwise import broadcast_read
from .nn import Result, full_attrs, gpu_row_config, rows_of


def _softmax(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    shape = ctx.type_of(node.inputs[0]).shape
    axis = full_attrs(node)["axis"] % len(shape)
    if tail.nodes:
        raise LoweringError(f"{node.op} must be alone in its group (node {node.name!r})")
    if ctx.gpu and axis == len(shape) - 1 and shape[-1] > gpu_reduce.MIN_ROW:
        return _gpu_softmax(ctx, node, rows_of(shape, axis))
    log = node.op == "LogSoftmax"
    if axis == len(shape) - 1 and not (ctx.gpu and log):
        x = ctx.as_tensor(node.inputs[0], rows_of(shape, axis))
        _, out = softmax(x, min_row=None if ctx.gpu else LANES_MIN_ROW, log=log)
        return schedule_softmax(out), [out]
    if not ctx.gpu:
        outer, n = int(np.prod(shape[:axis])), shape[axis]
        x = ctx.as_tensor(node.inputs[0], (outer, n, int(np.prod(shape[axis + 1 :]))))
        _, out = softmax_inner(x, log=log)
        return schedule_softmax_inner(out), [out]
    return _softmax_axis(ctx, node, shape, axis, log=log)


def _gpu_softmax(ctx: GroupContext, node: Node, rows_n: tuple[int, int]) -> Result:
    """(Log)softmax over a long last axis on a GPU: one thread block per row (`topi.gpu.reduce`)."""
    x = ctx.as_tensor(node.inputs[0], rows_n)
    op = "log_softmax" if node.op == "LogSoftmax" else "softmax"
    config, warp = gpu_row_config(ctx, *rows_n, op, x.dtype)
    out, stages = gpu_reduce.softmax_rows(x, config, warp, log=node.op == "LogSoftmax")
    return gpu_reduce.schedule_rows(out, stages, config), [out]


def _softmax_axis(ctx: GroupContext, node: Node, shape: tuple, axis: int, log: bool) -> Result:
    """(Log)softmax over any axis on a GPU (a short last axis too): the tensor viewed as
    [outer, axis, inner], the max and the sum of exponentials computed per outer row."""
    outer, n, inner = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1 :]))
    x = ctx.as_tensor(node.inputs[0], (outer, n, inner))
    k1, k2 = te.reduce_axis((0, n), "k1"), te.reduce_axis((0, n), "k2")
    mx = te.compute((outer, inner), lambda o, i: te.max(x[o, k1, i], axis=k1), name="max")
    sm = te.compute(
        (outer, inner), lambda o, i: te.sum(te.exp(x[o, k2, i] - mx[o, i]), axis=k2), name="sum"
    )
    if log:
        body = lambda o, k, i: x[o, k, i] - mx[o, i] - te.log(sm[o, i])  # noqa: E731
    else:
        body = lambda o, k, i: te.exp(x[o, k, i] - mx[o, i]) / sm[o, i]  # noqa: E731
    out = te.compute((outer, n, inner), body, name="softmax")
    s = te.create_schedule(out.op)
    o, k, i = out.op.axis
    for t in (mx, sm):
        s[t].compute_at(s[out], o)
    if outer * n * inner >= 2048:
        s[out].parallel(o)
    _, lanes = s[out].split(i if inner > 1 else k, factor=16)
    s[out].vectorize(lanes)
    return s, [out]


def _layer_norm(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    if tail.nodes:
        raise LoweringError(f"{node.op} must be alone in its group (node {node.name!r})")
    if tuple(tail.outputs) != node.outputs[:1]:
        return _layer_norm_stats(ctx, node, tail.outputs)
    attrs = full_attrs(node)
    shape = ctx.type_of(node.inputs[0]).shape
    axis = attrs["axis"] % len(shape)
    rows, cols = rows_of(shape, axis)
    x = ctx.as_tensor(node.inputs[0], (rows, cols))
    scale, bias = _ln_affine(ctx, node, cols)
    if ctx.gpu and cols > gpu_reduce.MIN_ROW:  # one thread block per row
        config, warp = gpu_row_config(ctx, rows, cols, "layer_norm", x.dtype)
        affine = [None if f is None else (lambda j, f=f: f((j,))) for f in (scale, bias)]
        out, stages = gpu_reduce.layer_norm_rows(x, *affine, attrs["epsilon"], config, warp)
        return gpu_reduce.schedule_rows(out, stages, config), [out]
    eps = attrs["epsilon"]
    min_row = None if ctx.gpu else LANES_MIN_ROW
    mean_stages, mean = row_mean(rows, cols, lambda i, j: x[i, j], min_row)
    centered = lambda i, j: x[i, j] - mean[i]  # noqa: E731
    term = lambda i, j: centered(i, j) * centered(i, j)  # noqa: E731
    sq, sq_stages = row_reduce(rows, cols, term, "sq", min_row=min_row)

    def fout(i: Any, j: Any) -> Any:
        v = (x[i, j] - mean[i]) * te.rsqrt(sq[i] * (1.0 / cols) + eps) * scale((j,))
        return v + bias((j,)) if bias is not None else v

    out = te.compute((rows, cols), fout, name="layer_norm")
    s = te.create_schedule(out.op)
    row, col = out.op.axis
    schedule_row_reduce(s, [*mean_stages, mean, *sq_stages, sq], out, row)
    _, lanes = s[out].split(col, factor=16)
    s[out].vectorize(lanes)
    if rows * cols >= 2048:
        s[out].parallel(row)
    return s, [out]


def row_mean(
    rows: int, cols: int, read: Callable[[Any, Any], Any], min_row: int | None = None
) -> tuple[list[Tensor], Tensor]:
    """(the stages of the offsets' sum (`row_reduce`, in lanes on rows longer than `min_row`);
    the mean) of each row of `read(i, j)`, summed as offsets from the row's first element: a plain
    float32 sum of values far from 0 (hidden states around 300 with a spread of 0.05) loses the
    mean by many times the spread's rounding, and x - mean with it (layer norm 30x less accurate
    than onnxruntime's); the offsets keep those digits."""
    offset = lambda i, j: read(i, j) - read(i, 0)  # noqa: E731
    total, stages = row_reduce(rows, cols, offset, "total_shifted", min_row=min_row)
    mean = te.compute((rows,), lambda i: read(i, 0) + total[i] * (1.0 / cols), name="mean")
    return [*stages, total], mean


def _ln_affine(ctx: GroupContext, node: Node, cols: int) -> tuple[Lazy, Lazy | None]:
    """LayerNormalization's scale and (optional) bias, each read as a row of `cols`: each is
    broadcast to the normalized shape first (ONNX lets them be any shape that broadcasts to it,
    a `[1, W]` scale of `[H, W]` rows)."""
    shape = ctx.type_of(node.inputs[0]).shape
    inner = shape[full_attrs(node)["axis"] % len(shape) :]

    def row(name: str) -> Lazy:
        src = ctx.get(name)
        if src.shape != inner:
            src = Lazy(inner, src.dtype, broadcast_read(src, inner))
        return reshape_lazy(src, (cols,))

    has_bias = len(node.inputs) > 2 and node.inputs[2]
    return row(node.inputs[1]), row(node.inputs[2]) if has_bias else None


def _layer_norm_stats(ctx: GroupContext, node: Node, wanted: Sequence[str]) -> Result:
    """LayerNormalization whose Mean or InvStdDev is used: the statistics are outputs of their
    own (one per row), computed in float32 (stash_type 1) as ONNX's function body does; Y is the
    normalized value cast back to the input dtype, then scaled and shifted in that dtype."""
    attrs = full_attrs(node)
    x_ty = ctx.type_of(node.inputs[0])
    rows, cols = rows_of(x_ty.shape, attrs["axis"] % len(x_ty.shape))
    x = ctx.as_tensor(node.inputs[0], (rows, cols))
    xf = (
        (lambda i, j: x[i, j]) if x.dtype == "float32" else (lambda i, j: x[i, j].astype("float32"))
    )
    k2 = te.reduce_axis((0, cols), "k2")
    _, mean = row_mean(rows, cols, xf)
    sq = te.compute(
        (rows,),
        lambda i: te.sum((xf(i, k2) - mean[i]) * (xf(i, k2) - mean[i]), axis=k2),
        name="sq",
    )
    inv = te.compute(
        (rows,), lambda i: te.rsqrt(sq[i] * (1.0 / cols) + attrs["epsilon"]), name="inv_std"
    )
    by_output = dict(zip(node.outputs[1:], (mean, inv), strict=False))
    if node.outputs[0] in wanted:
        by_output[node.outputs[0]] = _ln_normalized(ctx, node, xf, (mean, inv), x.dtype)
    tensors = [by_output[name] for name in wanted]
    s = te.create_schedule([t.op for t in tensors])
    if node.outputs[0] in wanted:
        out = by_output[node.outputs[0]]
        _, lanes = s[out].split(out.op.axis[1], factor=16)
        s[out].vectorize(lanes)
        if rows * cols >= 2048:
            s[out].parallel(out.op.axis[0])
    return s, tensors


def _ln_normalized(
    ctx: GroupContext, node: Node, xf: Callable, stats: tuple[Tensor, Tensor], dtype: str
) -> Tensor:
    """Y from float32 statistics: `cast((x - mean) * inv_std, dtype) * scale + bias`."""
    mean, inv = stats
    rows = int(mean.shape[0])
    cols = ctx.type_of(node.inputs[0]).size // rows
    scale, bias = _ln_affine(ctx, node, cols)

    def fout(i: Any, j: Any) -> Any:
        v = ((xf(i, j) - mean[i]) * inv[i]).astype(dtype) * scale((j,))
        return v + bias((j,)) if bias is not None else v

    return te.compute((rows, cols), fout, name="layer_norm")


ANCHORS: dict[str, AnchorRule] = {
    "Softmax": _softmax,
    "LogSoftmax": _softmax,
    "LayerNormalization": _layer_norm,
}

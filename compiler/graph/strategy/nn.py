"""Anchor lowerings: convolution, Gemm/MatMul, pooling, reductions, Softmax, LayerNormalization.

The x86 operator library (`compiler.topi.x86`) is used where it has the operator (conv2d with
pre-packed weights, dense, pool2d, softmax), with the group's elementwise tail as its epilogue;
the other cases (grouped/depthwise convolutions and ones whose strides or dilations differ by
axis, batched MatMul, exclusive-pad average pooling, reductions, LayerNormalization) are
computes written here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import te
from ...autotune.dispatch import query as autotune_query
from ...autotune.space import ConfigSpace, Knob
from ...schedule.schedule import Schedule
from ...te.tensor import Tensor
from ...tir.stmt import LoweringError
from ...topi.gpu import reduce as gpu_reduce
from ...topi.x86 import (  # the x86 operator library
    Conv2dConfig,
    DenseConfig,
    conv2d_nchwc,
    dense,
    pool2d,
    schedule_conv2d_nchwc,
    schedule_dense,
    schedule_pool2d,
    schedule_softmax,
    softmax,
)
from ...topi.x86.conv2d import config_from as conv_config_from
from ...topi.x86.conv2d import default_config as conv_default
from ...topi.x86.conv2d import kernel_blocks, pack_kernel
from ...topi.x86.dense import config_from as dense_config_from
from ...topi.x86.dense import default_config as dense_default
from ...topi.x86.dense import dense_prepacked, pack_panels
from ...topi.x86.depthwise import (
    DepthwiseConfig,
    channel_block,
    default_depthwise_config,
    depthwise_conv2d_nchwc,
    pack_depthwise_kernel,
    schedule_depthwise_nchwc,
)
from ..ir import Node
from ..lower_te import AnchorRule, GroupContext, Index, Lazy, Tail, reshape_lazy, schedule_rows
from ..ops.nn import window_geometry
from ..ops.shape import reduce_axes
from ..registry import get_op
from .elemwise import broadcast_read

Result = tuple[Schedule, list[Tensor]]
FLOATS = ("float32", "float64")


@dataclass(frozen=True)
class ReduceConfig:
    """The knobs of `reduce_kernel` (the schedule of depthwise convolutions and other
    reductions): vector lanes along the last axis, thread-pool use (for stages of at least 2048
    elements), and unrolling the innermost reduction axis (the kernel's taps)."""

    lanes: int = 16
    parallel: bool = True
    unroll_taps: bool = False


def depthwise_space(wl: dict[str, Any]) -> ConfigSpace:
    """The config space of a depthwise conv2d (the `x86.depthwise_conv2d` template): `layout`
    "nchwc" (topi's blocked template, channels in vector lanes: knobs `cb`, `reg_n`) or "rows"
    (the reduction along output rows: the `ReduceConfig` knobs `lanes`, `unroll_taps`), and
    `parallel` for both. Default: "nchwc" with `default_depthwise_config` (benchmarks/dwconv.py:
    2-2.5x faster than "rows" at 7x7 and 14x14, where a row fills no vector, 1.2x at stride 2
    and 5x5, level at 3x3 on 56x56 and 112x112), `ReduceConfig()`'s knobs for "rows"."""
    out_w = _out_width(wl)
    regs = tuple(sorted({1, 2, 4, 7, 8, 14, 16} & set(range(1, out_w + 1))
                        | {default_depthwise_config(wl["c"], out_w).reg_n}))  # fmt: skip
    knobs = [Knob("layout", ("nchwc", "rows")), Knob("cb", (8, 16, 32)), Knob("reg_n", regs),
             Knob("lanes", (4, 8, 16, 32)), Knob("parallel", (True, False)),
             Knob("unroll_taps", (False, True))]  # fmt: skip
    d, b = ReduceConfig(), default_depthwise_config(wl["c"], out_w)
    default = {"layout": "nchwc", "cb": 8, "reg_n": b.reg_n, "lanes": d.lanes,
               "parallel": d.parallel, "unroll_taps": d.unroll_taps}  # fmt: skip

    def constraint(v: dict) -> str | None:  # each layout's knobs vary, the other's stay put
        fixed = ("lanes", "unroll_taps") if v["layout"] == "nchwc" else ("cb", "reg_n")
        moved = [k for k in fixed if v[k] != default[k]]
        return f"{', '.join(moved)} only apply to the other layout" if moved else None

    return ConfigSpace("x86.depthwise_conv2d", knobs, default, constraint)


def _out_width(wl: dict[str, Any]) -> int:
    span = (
        int(wl["w"])
        + int(wl["pads"][1])
        + int(wl["pads"][3])
        - int(wl["dil"][1]) * (int(wl["s"]) - 1)
    )
    return max(1, (span - 1) // int(wl["strides"][1]) + 1)


def _attrs(node: Node) -> dict[str, Any]:
    return get_op(node.op).full_attrs(node)


def _epilogue(tail: Tail, index: Callable[..., Index] | None = None) -> Any:
    if not tail.nodes:
        return None
    index = index or (lambda *i: i)
    return lambda v, *i: tail.epilogue(v, index(*i))


def reduce_kernel(
    red: Tensor,
    tail: Tail,
    post: Callable[[Any, Index], Any] | None = None,
    extra: Sequence[Tensor] = (),
    config: ReduceConfig | None = None,
) -> Result:
    """A reduction stage plus the elementwise result (post-processing, then the tail), computed
    row by row: the reduction at each output row, its last axis in vector lanes; `extra` stages
    (padding) run first, at the root. `config`: the knobs (default `ReduceConfig()`)."""
    config = config or ReduceConfig()
    out = red
    if post is not None or tail.nodes:
        post = post or (lambda v, i: v)
        out = te.compute(red.shape, lambda *i: tail.epilogue(post(red[i], i), i), name="out")
    s = te.create_schedule(out.op)
    threshold = 2048 if config.parallel else 1 << 62
    for stage in extra:
        schedule_rows(s, stage, config.lanes, threshold)
        if stage.op.reduce_axis:
            vectorize_reduction(s, stage, config)
    row = schedule_rows(s, out, config.lanes, threshold)
    if out is not red and row is not None:
        s[red].compute_at(s[out], row)
        s[red].set_scope("local")
    if out is red or row is not None:
        vectorize_reduction(s, red, config)
    return s, [out]


def vectorize_reduction(s: Schedule, red: Tensor, config: ReduceConfig) -> None:
    """The last axis of reduction `red` split into vector lanes innermost, inside the reduction
    loops (each lane its own accumulator); the last reduction axis unrolled if configured."""
    if red.shape[-1] <= 1:
        return
    xo, xi = s[red].split(red.op.axis[-1], factor=config.lanes)
    s[red].reorder(xo, *red.op.reduce_axis, xi)
    s[red].vectorize(xi)
    if config.unroll_taps and red.op.reduce_axis:
        s[red].unroll(red.op.reduce_axis[-1])


def pad_image(x: Lazy, before: Sequence[int], after: Sequence[int], fill: Any) -> Tensor:
    """x (`[N, C, *spatial]`) with `fill` around its spatial axes, as its own stage: the window
    loops that read it then index affinely (vector loads) instead of clamping every lane."""
    spatial = x.shape[2:]
    shape = (*x.shape[:2], *(d + b + a for d, b, a in zip(spatial, before, after, strict=True)))
    return te.compute(shape, lambda n, c, *pos: _padded(x, before, fill, n, c, pos), name="pad")


def _padded(x: Lazy, before: Sequence[int], fill: Any, n: Any, c: Any, pos: Sequence) -> Any:
    """x at spatial position `pos` of its padded copy (`fill` outside x): a select over a
    clamped, always in-bounds read, which vectorizes."""
    spatial = x.shape[2:]
    src = [p - b for p, b in zip(pos, before, strict=True)]
    inside = te.all_of(*(i >= 0 for i in src), *(i < d for i, d in zip(src, spatial, strict=True)))
    clamped = [te.min(te.max(i, 0), d - 1) for i, d in zip(src, spatial, strict=True)]
    return te.select(inside, x((n, c, *clamped)), fill)


def pads_after(
    out_hw: Sequence[int], kernel: Sequence[int], pads: Sequence[int], st: Sequence[int],
    dil: Sequence[int], in_hw: Sequence[int],
) -> list[int]:  # fmt: skip
    """The padding a window op reads after the input (bottom, right): what the last output
    row and column reach past the input, given the padding before."""
    shapes = zip(out_hw, st, kernel, dil, pads, in_hw, strict=True)
    return [max(0, (o - 1) * s + (k - 1) * d - p - (n - 1)) for o, s, k, d, p, n in shapes]


def window_source(
    x: Lazy, out: tuple, kernel: tuple, pads: list, st: list, dil: list, fill: Any
) -> tuple[Callable[..., Any], list[Tensor]]:
    """A reader `(n, c, *position) -> value` of `[N, C, *spatial]` x with padding applied (the
    window's input positions, before padding), and the extra stages it needs."""
    after = pads_after(out[2:], kernel, pads, st, dil, x.shape[2:])
    if not any(pads) and not any(after):
        return (lambda n, c, *pos: x((n, c, *pos))), []
    shift = lambda pos: [p + b for p, b in zip(pos, pads, strict=True)]  # noqa: E731
    if st[-1] == 1:
        padded = pad_image(x, pads, after, fill)
        return (lambda n, c, *pos: padded[(n, c, *shift(pos))]), [padded]
    phased = _pad_phases(x, pads, after, st[-1], fill)

    def read(n: Any, c: Any, *pos: Any) -> Any:
        *rows, col = shift(pos)  # x * stride + rx * dilation: the phase depends on rx alone
        return phased[(n, c, *rows, col % st[-1], col // st[-1])]

    return read, [phased]


def _pad_phases(x: Lazy, before: list, after: list, stride: int, fill: Any) -> Tensor:
    """The padded image with its columns (last axis) dealt into `stride` phases, `[n, c,
    *rows, column % stride, column // stride]`: a strided window then reads consecutive
    outputs from consecutive addresses (vector loads instead of gathers)."""
    sizes = [d + b + a for d, b, a in zip(x.shape[2:], before, after, strict=True)]
    shape = (*x.shape[:2], *sizes[:-1], stride, -(-sizes[-1] // stride))

    def fpad(n: Any, c: Any, *pos: Any) -> Any:
        *rows, phase, j = pos
        return _padded(x, before, fill, n, c, (*rows, j * stride + phase))

    return te.compute(shape, fpad, name="pad_phases")


# ---- convolution --------------------------------------------------------------------------------


def conv2d_geometry(
    node: Node, attrs: dict[str, Any], x_shape: tuple[int, ...], w_shape: tuple[int, ...]
) -> tuple[Any, Any, Any, Any]:
    """(pads before, pads after, strides, dilations) of a 2-D convolution node (Conv,
    QLinearConv); LoweringError for another rank, which the CPU back-end does not lower yet."""
    if len(x_shape) != 4:
        raise LoweringError(
            f"{node.op} must be 2-D (NCHW input) on the CPU back-end, not {len(x_shape) - 2}-D "
            f"(node {node.name!r}; not built yet)"
        )
    begin, end, strides, dil, _ = window_geometry(attrs, x_shape[2:], w_shape[2:])
    return begin, end, strides, dil


def _conv(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    x_ty, w_ty = ctx.type_of(node.inputs[0]), ctx.type_of(node.inputs[1])
    attrs = _attrs(node)
    begin, end, strides, dil = conv2d_geometry(node, attrs, x_ty.shape, w_ty.shape)
    uniform = len({*strides}) == 1 and len({*dil}) == 1
    weight = ctx.constant(node.inputs[1])
    group = attrs["group"]
    depthwise = group > 1 and w_ty.shape[0] == group and w_ty.shape[1] == 1
    blocked = uniform and weight is not None and not ctx.gpu and not depthwise
    pads = begin[0] if len({*begin, *end}) == 1 else (*begin, *end)  # an int when uniform
    if blocked and group == 1 and _pointwise(x_ty, w_ty, pads, strides[0]):
        return _conv_pointwise(ctx, node, tail)
    if blocked and (group == 1 or x_ty.dtype in FLOATS):
        args = (pads, strides[0], dil[0], np.asarray(weight), group)
        return _conv_topi(ctx, node, tail, *args)
    if ctx.gpu:
        from ...topi.gpu.conv2d import template_for

        out_hw = tuple(ctx.type_of(node.outputs[0]).shape[2:])
        template = template_for(w_ty.shape, attrs["group"], out_hw)
        if template is not None:
            return _gpu_conv(ctx, node, tail, (begin, strides, dil), template)
    return _conv_generic(ctx, node, tail, begin, strides, dil)


def _gpu_conv(ctx: GroupContext, node: Node, tail: Tail, geometry: tuple, template: str) -> Result:
    """A 2-D convolution on a GPU by `template` (`topi.gpu.conv2d.template_for`): direct,
    implicit GEMM or depthwise; bias and tail fused; the knobs tuned, or the default."""
    from ...codegen.gpu import Limits
    from ...target import Target
    from ...topi.gpu import conv2d as gpu_conv

    begin, strides, dil = geometry
    x, w = ctx.as_tensor(node.inputs[0]), ctx.as_tensor(node.inputs[1])
    out_shape = ctx.type_of(node.outputs[0]).shape
    geo = gpu_conv.Geometry(tuple(begin), tuple(strides), tuple(dil), tuple(out_shape[2:]))
    bias = ctx.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None

    def epilogue(v: Any, *i: Any) -> Any:
        v = v + bias((i[1],)) if bias is not None else v
        return tail.epilogue(v, i)

    limit = Limits.of(Target.parse(ctx.target)).max_threads
    wl = {"x": [int(d) for d in x.shape], "w": [int(d) for d in w.shape],
          "out": list(geo.out), "pads": list(geo.pads), "strides": list(geo.strides),
          "dil": list(geo.dil), "dtype": x.dtype, "max_threads": limit}  # fmt: skip
    tuned = autotune_query(template, wl)
    config = (gpu_conv.config_of(template, tuned) if tuned
              else gpu_conv.default_of(template, w.shape, geo, limit))  # fmt: skip
    epi = epilogue if bias is not None or tail.nodes else None
    out, s = gpu_conv.conv2d(template, x, w, geo, config, epi)
    return s, [out]


def _pointwise(x_ty: Any, w_ty: Any, pad: int | tuple[int, ...], stride: int) -> bool:
    """A 1x1 convolution that is a GEMM on NCHW as it lies: batch 1, stride 1, no padding,
    float."""
    one = tuple(w_ty.shape[2:]) == (1, 1) and x_ty.shape[0] == 1
    return one and pad == 0 and stride == 1 and x_ty.dtype in FLOATS


def _conv_pointwise(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """A pointwise conv as topi's dense, out[K, H*W] = W[K, C] x X[C, H*W]: the NCHW input and
    output are that GEMM's operand and result as they lie in memory, so nothing is packed to
    NCHWc and back (1.1-1.9x faster than `conv2d_nchwc` on MobileNetV2/EfficientNet 1x1 layers
    of 14x14 and more); the image operand is packed into panels inside the kernel."""
    _, c, h, w = ctx.type_of(node.inputs[0]).shape
    k = ctx.type_of(node.inputs[1]).shape[0]
    weight = ctx.as_tensor(node.inputs[1], (k, c))
    ctx.as_tensor(node.inputs[0])  # the parameter keeps its NCHW shape (a residual reads it so)
    image = ctx.as_tensor(node.inputs[0], (c, h * w))  # a reshaping view of it, inlined
    has_bias = len(node.inputs) > 2 and node.inputs[2]
    bias = ctx.get(node.inputs[2]) if has_bias else None

    def epilogue(v: Any, i: Any, j: Any) -> Any:
        v = v + bias((i,)) if bias is not None else v
        return tail.epilogue(v, (0, i, *unravel(j, (h, w)))) if tail.nodes else v

    wl = {"m": k, "n": h * w, "k": c, "dtype": weight.dtype, "prepacked": False}
    values = autotune_query("x86.dense", wl)
    config = dense_config_from(values) if values is not None else _pointwise_default(k, h * w)
    op = dense(weight, image, None, epilogue, None, config, "KN")
    return schedule_dense(op, config), [op.out]


def _pointwise_default(m: int, n: int) -> DenseConfig:
    """`topi.x86.dense.default_config` with a panel width whose last panel is a power-of-two
    number of lanes: a 7x7 image (49 columns) in 32-wide panels leaves a 17-lane tail, which
    LLVM legalizes so badly that the layer ran 9x slower than with 16-wide panels."""
    tail_ok = lambda bn: n % bn & (n % bn - 1) == 0  # noqa: E731  (0 or a power of two)
    bn = next((bn for bn in (32, 16, 8) if tail_ok(bn)), 8)
    return DenseConfig(mr=dense_default(m).mr, bn=bn)


def conv_config(
    data: Tensor,
    w_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    stride: int,
    pad: int | tuple[int, ...],
    dil: int,
    groups: int = 1,
) -> Conv2dConfig:
    """The knobs of topi's NCHWc conv2d for this layer: the tuned config when a tuning log is
    applied and has this workload (`compiler.autotune`; the tuner's workloads pad every side
    alike), else `topi.x86.conv2d.default_config` (of one group's channels, for a grouped
    convolution)."""
    if isinstance(pad, int):
        wl = conv_workload(data, w_shape, stride, pad, dil, groups)
        values = autotune_query("x86.conv2d_nchwc", wl)
        if values is not None:
            return conv_config_from(values)
    return conv_default(w_shape[1], w_shape[0] // groups, tuple(out_shape[2:]))


def conv_workload(
    data: Tensor, w_shape: tuple[int, ...], stride: int, pad: int, dil: int, groups: int = 1
) -> dict[str, Any]:
    """The tuning workload of an NCHWc conv2d (`compiler.autotune.templates`); `groups` only
    when above 1 (the keys of ungrouped workloads stay as they were)."""
    n, c, h, w = (int(d) for d in data.shape)
    k, _, r, s_ = (int(d) for d in w_shape)
    wl = {"n": n, "c": c, "h": h, "w": w, "k": k, "r": r, "s": s_, "stride": int(stride),
          "pad": int(pad), "dil": int(dil), "dtype": data.dtype}  # fmt: skip
    return {**wl, "groups": int(groups)} if groups > 1 else wl


def dense_config(data: Tensor, n: int, prepacked: bool) -> DenseConfig:
    """The knobs of topi's dense for `data [M, K] x [K, n]`: tuned (as `conv_config`) or
    `topi.x86.dense.default_config`."""
    m, k = (int(d) for d in data.shape)
    wl = {"m": m, "n": int(n), "k": k, "dtype": data.dtype, "prepacked": bool(prepacked)}
    values = autotune_query("x86.dense", wl)
    return dense_config_from(values) if values is not None else dense_default(m)


def _conv_topi(
    ctx: GroupContext,
    node: Node,
    tail: Tail,
    pad: int | tuple[int, ...],
    stride: int,
    dil: int,
    w: np.ndarray,
    groups: int = 1,
) -> Result:
    data = ctx.as_tensor(node.inputs[0])
    out_shape = ctx.type_of(node.outputs[0]).shape
    config = conv_config(data, w.shape, out_shape, stride, pad, dil, groups)
    ic_bn, oc_bn = kernel_blocks(w.shape[1], w.shape[0] // groups, config)
    packed = ctx.add_constant(
        f"{node.inputs[1]}.nchwc{ic_bn}x{oc_bn}", pack_kernel(w, ic_bn, oc_bn)
    )
    has_bias = len(node.inputs) > 2 and node.inputs[2]
    bias = ctx.as_tensor(node.inputs[2]) if has_bias else None
    epilogue = _epilogue(tail)
    op = conv2d_nchwc(data, packed, stride, pad, dil, bias, epilogue, config, None, groups)
    return schedule_conv2d_nchwc(op, config), [op.out]


def _conv_generic(
    ctx: GroupContext, node: Node, tail: Tail, pads: list, strides: list, dil: list
) -> Result:
    x_ty, w_ty = ctx.type_of(node.inputs[0]), ctx.type_of(node.inputs[1])
    group = _attrs(node)["group"]
    config = None
    if w_ty.shape[1] == 1 and group == w_ty.shape[0] > 1:  # depthwise: a tunable template
        wl = depthwise_workload(x_ty, w_ty, ctx.type_of(node.outputs[0]).shape, pads, strides, dil)
        values = autotune_query("x86.depthwise_conv2d", wl)
        values = dict(values if values is not None else depthwise_space(wl).default.values)
        blocked = values.get("layout") == "nchwc" and x_ty.dtype in FLOATS and not ctx.gpu
        if blocked and ctx.constant(node.inputs[1]) is not None:
            return _depthwise_nchwc(ctx, node, tail, pads, strides, dil, values)
        row_knobs = {k: values[k] for k in ("lanes", "parallel", "unroll_taps") if k in values}
        config = ReduceConfig(**row_knobs)
    red, post, extra = _conv_reduction(ctx, node, pads, strides, dil)
    return reduce_kernel(red, tail, post, extra, config)


def depthwise_workload(
    x_ty: Any, w_ty: Any, out_shape: tuple, pads: list, strides: list, dil: list
) -> dict[str, Any]:
    """The tuning workload of a depthwise conv2d (`x86.depthwise_conv2d`)."""
    n, c, h, wd = x_ty.shape
    r, s = w_ty.shape[2:]
    ends = pads_after(out_shape[2:], (r, s), pads, strides, dil, (h, wd))
    return {"n": n, "c": c, "h": h, "w": wd, "r": r, "s": s,
            "pads": [int(p) for p in [*pads, *ends]], "strides": [int(v) for v in strides],
            "dil": [int(v) for v in dil], "dtype": x_ty.dtype}  # fmt: skip


def _conv_reduction(
    ctx: GroupContext, node: Node, pads: list, strides: list, dil: list
) -> tuple[Tensor, Any, list[Tensor]]:
    """A (grouped) convolution as one reduction over NCHW: (the reduction, its bias add or
    None, the padding stages it reads)."""
    x, w = ctx.get(node.inputs[0]), ctx.get(node.inputs[1])
    k, cg, r, s = w.shape
    group = _attrs(node)["group"]
    per_group = k // group
    shape = ctx.type_of(node.outputs[0]).shape
    rc, ry, rx = (
        te.reduce_axis((0, cg), "rc"),
        te.reduce_axis((0, r), "ry"),
        te.reduce_axis((0, s), "rx"),
    )
    read, extra = window_source(x, shape, (r, s), pads, strides, dil, te.const(0, x.dtype))
    ci = rc if cg > 1 else 0

    def body(n: Any, kk: Any, y: Any, xx: Any) -> Any:
        if group == 1:
            c = ci
        elif per_group == 1 and cg == 1:
            c = kk  # depthwise
        else:
            c = (kk // per_group) * cg + ci
        iy = y * strides[0] + ry * dil[0] - pads[0]
        ix = xx * strides[1] + rx * dil[1] - pads[1]
        return te.sum(
            read(n, c, iy, ix) * w((kk, ci, ry, rx)), axis=[rc, ry, rx] if cg > 1 else [ry, rx]
        )

    red = te.compute(shape, body, name="conv")
    bias = ctx.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    post = (lambda v, i: v + bias((i[1],))) if bias is not None else None
    return red, post, extra


def _depthwise_nchwc(
    ctx: GroupContext, node: Node, tail: Tail, pads: list, strides: list, dil: list, values: dict
) -> Result:
    """A depthwise Conv through topi's NCHWc template (channels in vector lanes), its constant
    weights packed once here."""
    data = ctx.as_tensor(node.inputs[0])
    w = np.asarray(ctx.constant(node.inputs[1]))
    cb = channel_block(w.shape[0], int(values["cb"]))
    config = DepthwiseConfig(cb, int(values["reg_n"]), bool(values["parallel"]))
    packed = ctx.add_constant(
        f"{node.inputs[1]}.dw{config.cb}", pack_depthwise_kernel(w, config.cb)
    )
    has_bias = len(node.inputs) > 2 and node.inputs[2]
    bias = ctx.as_tensor(node.inputs[2]) if has_bias else None
    out_hw = ctx.type_of(node.outputs[0]).shape[2:]
    op = depthwise_conv2d_nchwc(data, packed, out_hw, pads, strides, dil, bias, _epilogue(tail))
    return schedule_depthwise_nchwc(op, config), [op.out]


# ---- dense and matmul ---------------------------------------------------------------------------


def packed_dense(
    ctx: GroupContext,
    data: Tensor,
    weight: str,
    layout: str,
    epilogue: Any,
    values: np.ndarray | None = None,
) -> Result:
    """topi's dense; constant float or integer weights are packed into its panels once, here,
    and the kernel reads them in place (`topi.x86.dense_prepacked`). `values`, when given, are
    the weights to pack instead of the constant `weight` (which then only names the packed
    copy), e.g. weights minus their zero point. Integer data (int8, int16, int32) accumulates in
    int32, as topi's dense does for int8. The knobs come from `dense_config`."""
    if ctx.gpu:
        return gpu_dense(ctx, data, weight, layout, epilogue, values)
    const = ctx.constant(weight) if values is None else values
    integer = data.dtype in ("int8", "int16", "int32")
    w_shape = ctx.type_of(weight).shape if values is None else values.shape
    n = w_shape[0] if layout == "NK" else w_shape[1]
    if values is None and (const is None or not integer and data.dtype not in FLOATS):
        config = dense_config(data, n, prepacked=False)
        op = dense(data, ctx.as_tensor(weight), None, epilogue, None, config, layout)
        return schedule_dense(op, config), [op.out]
    config = dense_config(data, n, prepacked=True)
    panels = pack_panels(np.asarray(const), config.bn, layout)
    stored = ctx.add_constant(f"{weight}.panels{config.bn}{layout}", panels)
    op = dense_prepacked(data, stored, n, epilogue)
    ctx.inline.append(op.packed)
    return schedule_dense(op, config), [op.out]


def gpu_dense(
    ctx: GroupContext,
    data: Tensor,
    weight: str,
    layout: str,
    epilogue: Any,
    values: np.ndarray | None = None,
) -> Result:
    """`packed_dense` for a GPU target: `topi.gpu.dense` with shared-memory tiles; constant
    weights are stored once as [K, N] (coalesced reads along N), others read in place. The knobs
    are the `gpu.dense` template's (tuned, or `default_config`)."""
    from ...codegen.gpu import Limits
    from ...target import Target
    from ...topi.gpu import dense as gpu

    const = ctx.constant(weight) if values is None else values
    transpose = False
    if const is not None:
        kn = np.asarray(const).T if layout == "NK" else np.asarray(const)
        b = ctx.add_constant(f"{weight}.kn", np.ascontiguousarray(kn))
    else:
        b, transpose = ctx.as_tensor(weight), layout == "NK"
    (m, k), n = (int(d) for d in data.shape), int(b.shape[0] if transpose else b.shape[1])
    limit = Limits.of(Target.parse(ctx.target)).max_threads
    wl = {"m": m, "n": n, "k": k, "dtype": data.dtype, "max_threads": limit}
    tuned = autotune_query("gpu.dense", wl)
    config = gpu.config_from(tuned) if tuned is not None else gpu.default_config(m, n, limit)
    acc, out = gpu.dense(data, b, epilogue, transpose)
    sched = te.create_schedule(out.op)
    gpu.schedule_dense(sched, out, None if acc is out else acc, config)
    return sched, [out]


def _materialize(ctx: GroupContext, lazy: Lazy, name: str) -> Tensor:
    t = te.compute(lazy.shape, lambda *i: lazy(i), name=name)
    ctx.inline.append(t)
    return t


def _gemm(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    attrs = _attrs(node)
    m, n = ctx.type_of(node.outputs[0]).shape
    if attrs["transA"]:
        a = ctx.get(node.inputs[0])
        lazy = Lazy((a.shape[1], a.shape[0]), a.dtype, lambda i: a((i[1], i[0])))
        data = _materialize(ctx, lazy, "a_t")
    else:
        data = ctx.as_tensor(node.inputs[0])
    c = ctx.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    alpha, beta = attrs["alpha"], attrs["beta"]

    def epilogue(v: Any, i: Any, j: Any) -> Any:
        if alpha != 1.0:
            v = v * alpha
        if c is not None and beta != 0.0:
            cv = broadcast_read(c, (m, n))((i, j))
            v = v + (cv * beta if beta != 1.0 else cv)
        return tail.epilogue(v, (i, j))

    simple = alpha == 1.0 and c is None and not tail.nodes
    layout = "NK" if attrs["transB"] else "KN"
    return packed_dense(ctx, data, node.inputs[1], layout, None if simple else epilogue)


def unravel(flat: Any, shape: tuple[int, ...]) -> Index:
    out, stride, total = [], 1, int(np.prod(shape))
    for d in reversed(shape):
        if d == 1:
            out.append(0)
        else:
            q = flat // stride if stride > 1 else flat
            out.append(q % d if stride * d < total else q)
        stride *= d
    return tuple(reversed(out))


def _matmul(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    a_ty, b_ty = ctx.type_of(node.inputs[0]), ctx.type_of(node.inputs[1])
    if len(a_ty.shape) < 2 or len(b_ty.shape) != 2:
        return _batch_matmul(ctx, node, tail)
    lead, k = a_ty.shape[:-1], a_ty.shape[-1]
    rows = int(np.prod(lead))
    data = ctx.as_tensor(node.inputs[0], (rows, k))
    epi = _epilogue(tail, lambda i, j: (*unravel(i, lead), j))
    return packed_dense(ctx, data, node.inputs[1], "KN", epi)


def batch_index(x: Lazy, idx: Index) -> Index:
    """The batch part of an operand's index, for output index `idx` of a batched matmul: numpy's
    broadcasting (missing leading dims dropped, size-1 dims read at 0)."""
    own, batch = len(x.shape) - 2, len(idx) - 2
    keep = idx[batch - own : batch] if own else ()
    return tuple(0 if d == 1 else i for d, i in zip(x.shape[:own], keep, strict=True))


def _as_matrix(x: Lazy, row: bool) -> Lazy:
    """A 1-D MatMul operand as numpy promotes it: [K] -> [1, K] (`row`) or [K, 1]."""
    if len(x.shape) != 1:
        return x
    if row:
        return Lazy((1, x.shape[0]), x.dtype, lambda i: x((i[-1],)))
    return Lazy((x.shape[0], 1), x.dtype, lambda i: x((i[-2],)))


def _batch_matmul(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """MatMul with numpy's semantics: batch dims broadcast; a 1-D operand gains a dim of 1 (in
    front for the first, behind for the second) that the output then drops."""
    a, b = ctx.get(node.inputs[0]), ctx.get(node.inputs[1])
    has_m, has_n = len(a.shape) > 1, len(b.shape) > 1
    a, b = _as_matrix(a, row=True), _as_matrix(b, row=False)
    shape = ctx.type_of(node.outputs[0]).shape
    batch = len(shape) - has_m - has_n
    if ctx.gpu and has_m and has_n and batch:
        return _gpu_batch_matmul(ctx, a, b, shape, tail)
    rk = te.reduce_axis((0, a.shape[-1]), "k")

    def body(*i: Any) -> Any:
        full = (*i[:batch], i[batch] if has_m else 0, i[-1] if has_n else 0)
        lhs, rhs = (
            a((*batch_index(a, full), full[-2], rk)),
            b((*batch_index(b, full), rk, full[-1])),
        )
        return te.sum(lhs * rhs, axis=rk)

    return reduce_kernel(te.compute(shape or (1,), body, name="matmul"), tail)


def _gpu_batch_matmul(ctx: GroupContext, a: Lazy, b: Lazy, shape: tuple, tail: Tail) -> Result:
    """A batched MatMul on a GPU: both operands viewed as [batch, rows, cols] (broadcast batch
    dims read in place, fused producers inlined) and `topi.gpu.dense`'s shared-memory tiles with
    the batch bound to the grid's z axis; the knobs are `gpu.dense`'s for one matrix."""
    from ...codegen.gpu import Limits
    from ...target import Target
    from ...topi.gpu import dense as gpu

    lead, (m, n), k = tuple(shape[:-2]), shape[-2:], a.shape[-1]
    nb = int(np.prod(lead))

    def operand(x: Lazy, rows: int, cols: int, name: str) -> Tensor:
        def read(q: Any, i: Any, j: Any) -> Any:
            full = (*unravel(q, lead), i, j)
            return x((*batch_index(x, full), i, j))

        t = te.compute((nb, rows, cols), read, name=name)
        ctx.inline.append(t)
        return t

    lhs, rhs = operand(a, m, k, "lhs"), operand(b, k, n, "rhs")
    epi = _epilogue(tail, lambda q, i, j: (*unravel(q, lead), i, j))
    limit = Limits.of(Target.parse(ctx.target)).max_threads
    wl = {"m": m, "n": n, "k": k, "batch": nb, "dtype": lhs.dtype, "max_threads": limit}
    tuned = autotune_query("gpu.dense", wl)
    config = gpu.config_from(tuned) if tuned is not None else gpu.default_config(m, n, limit)
    acc, out = gpu.batch_dense(lhs, rhs, epi)
    sched = te.create_schedule(out.op)
    gpu.schedule_dense(sched, out, None if acc is out else acc, config)
    return sched, [out]


# ---- pooling and reductions ---------------------------------------------------------------------


def _pool(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    attrs = _attrs(node)
    x_ty = ctx.type_of(node.inputs[0])
    kernel = tuple(attrs["kernel_shape"])
    kind = "max" if node.op == "MaxPool" else "avg"
    geometry = window_geometry(attrs, x_ty.shape[2:], kernel, attrs["ceil_mode"])
    begin, end, strides, dil, _ = geometry
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


def max_pool_separable(
    ctx: GroupContext, node: Node, tail: Tail, kernel: tuple, pads: list, st: list
) -> Result:
    """Max pooling as a column pass (contiguous rows: vector loads) then a row pass over it,
    computed per output row: 3 + 3 reads per output for a 3x3 window instead of 9 gathers."""
    x = ctx.get(node.inputs[0])
    n, c, h, w = x.shape
    shape = ctx.type_of(node.outputs[0]).shape
    low = te.min_value(x.dtype)
    ry, rx = te.reduce_axis((0, kernel[0]), "ry"), te.reduce_axis((0, kernel[1]), "rx")

    def fcol(nn: Any, cc: Any, y: Any, xx: Any) -> Any:
        iy = y * st[0] + ry - pads[0]
        read = x((nn, cc, te.min(te.max(iy, 0), h - 1), xx))
        return te.max(te.select(te.all_of(iy >= 0, iy < h), read, low), axis=ry)

    cols = te.compute((n, c, shape[2], w), fcol, name="cols")

    def frow(nn: Any, cc: Any, y: Any, xx: Any) -> Any:
        ix = xx * st[1] + rx - pads[1]
        read = cols[nn, cc, y, te.min(te.max(ix, 0), w - 1)]
        return te.max(te.select(te.all_of(ix >= 0, ix < w), read, low), axis=rx)

    red = te.compute(shape, frow, name="pool")
    out = red
    if tail.nodes:
        out = te.compute(shape, lambda *i: tail.epilogue(red[i], i), name="out")
    s = te.create_schedule(out.op)
    row = schedule_rows(s, out)
    for stage in (cols, red) if out is not red else (cols,):
        s[stage].compute_at(s[out], row)
    _, lanes = s[cols].split(cols.op.axis[-1], factor=16)
    s[cols].vectorize(lanes)
    return s, [out]


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
    low = te.min_value(x.dtype) if kind == "max" else te.const(0, x.dtype)
    read, extra = window_source(x, shape, kernel, begin, st, dil, low)

    def body(n: Any, c: Any, *o: Any) -> Any:
        pos = [i * s + r * d - p for i, s, r, d, p in zip(o, st, raxes, dil, begin, strict=True)]
        return (te.max if kind == "max" else te.sum)(read(n, c, *pos), axis=raxes)

    red = te.compute(shape, body, name="pool")
    post = None
    if kind == "avg":
        include = bool(_attrs(node)["count_include_pad"])
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
    attrs = _attrs(node)
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

    count = float(np.prod([x.shape[a] for a in axes])) if axes else 1.0
    post = (lambda v, i: v / count) if node.op == "ReduceMean" else None
    lead = len(x.shape) - len(axes)
    if ctx.gpu and set(axes) == set(range(lead, len(x.shape))) and count > gpu_reduce.MIN_ROW:
        return _gpu_reduce(ctx, node, tail, x, lead, post)
    red = te.compute(shape, body, name="reduce")
    return reduce_kernel(red, tail, post)


def _gpu_reduce(ctx: GroupContext, node: Node, tail: Tail, x: Lazy, lead: int, post: Any) -> Result:
    """A reduction over the trailing axes (more than `MIN_ROW` values per output) on a GPU: one
    thread block per output (`topi.gpu.reduce`), the fused producers read in the row's loads,
    the mean's division and the tail applied where the value is written."""
    rows, n = _rows(x.shape, lead)
    op = {"ReduceMean": "sum"}.get(node.op, node.op[len("Reduce") :].lower())
    config, _ = _gpu_row_config(ctx, rows, n, op, x.dtype)

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


# ---- softmax and layer normalization ------------------------------------------------------------


def _rows(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    return int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))


def _softmax(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    shape = ctx.type_of(node.inputs[0]).shape
    axis = _attrs(node)["axis"] % len(shape)
    if tail.nodes:
        raise LoweringError(f"{node.op} must be alone in its group (node {node.name!r})")
    if ctx.gpu and axis == len(shape) - 1 and shape[-1] > gpu_reduce.MIN_ROW:
        return _gpu_softmax(ctx, node, _rows(shape, axis))
    if node.op == "Softmax" and axis == len(shape) - 1:
        _, out = softmax(ctx.as_tensor(node.inputs[0], _rows(shape, axis)))
        return schedule_softmax(out), [out]
    return _softmax_axis(ctx, node, shape, axis, log=node.op == "LogSoftmax")


def _gpu_row_config(ctx: GroupContext, rows: int, n: int, op: str, dtype: str) -> Any:
    """The `gpu.row_reduce` knobs (tuned, or the default) and whether warp shuffles combine the
    last 32 partials (CUDA)."""
    from ...codegen.gpu import Limits
    from ...target import Target

    target = Target.parse(ctx.target)
    limit = Limits.of(target).max_threads
    wl = {"rows": rows, "n": n, "op": op, "dtype": dtype, "max_threads": limit}
    tuned = autotune_query("gpu.row_reduce", wl)
    config = gpu_reduce.config_from(tuned) if tuned else gpu_reduce.default_config(n, limit)
    return config, gpu_reduce.uses_warp(target.kind, dtype)


def _gpu_softmax(ctx: GroupContext, node: Node, rows_n: tuple[int, int]) -> Result:
    """(Log)softmax over a long last axis on a GPU: one thread block per row (`topi.gpu.reduce`)."""
    x = ctx.as_tensor(node.inputs[0], rows_n)
    op = "log_softmax" if node.op == "LogSoftmax" else "softmax"
    config, warp = _gpu_row_config(ctx, *rows_n, op, x.dtype)
    out, stages = gpu_reduce.softmax_rows(x, config, warp, log=node.op == "LogSoftmax")
    return gpu_reduce.schedule_rows(out, stages, config), [out]


def _softmax_axis(ctx: GroupContext, node: Node, shape: tuple, axis: int, log: bool) -> Result:
    """(Log)softmax over any axis: the tensor viewed as [outer, axis, inner], the max and the sum
    of exponentials computed per outer row."""
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
    attrs = _attrs(node)
    shape = ctx.type_of(node.inputs[0]).shape
    axis = attrs["axis"] % len(shape)
    rows, cols = _rows(shape, axis)
    x = ctx.as_tensor(node.inputs[0], (rows, cols))
    scale, bias = _ln_affine(ctx, node, cols)
    if ctx.gpu and cols > gpu_reduce.MIN_ROW:  # one thread block per row
        config, warp = _gpu_row_config(ctx, rows, cols, "layer_norm", x.dtype)
        affine = [None if f is None else (lambda j, f=f: f((j,))) for f in (scale, bias)]
        out, stages = gpu_reduce.layer_norm_rows(x, *affine, attrs["epsilon"], config, warp)
        return gpu_reduce.schedule_rows(out, stages, config), [out]
    k1, k2 = te.reduce_axis((0, cols), "k1"), te.reduce_axis((0, cols), "k2")
    inv_n, eps = 1.0 / cols, attrs["epsilon"]
    total = te.compute((rows,), lambda i: te.sum(x[i, k1], axis=k1), name="total")
    sq = te.compute(
        (rows,),
        lambda i: te.sum((x[i, k2] - total[i] * inv_n) * (x[i, k2] - total[i] * inv_n), axis=k2),
        name="sq",
    )

    def fout(i: Any, j: Any) -> Any:
        v = (x[i, j] - total[i] * inv_n) * te.rsqrt(sq[i] * inv_n + eps) * scale((j,))
        return v + bias((j,)) if bias is not None else v

    out = te.compute((rows, cols), fout, name="layer_norm")
    s = te.create_schedule(out.op)
    row, col = out.op.axis
    for t in (total, sq):
        s[t].compute_at(s[out], row)
    _, lanes = s[out].split(col, factor=16)
    s[out].vectorize(lanes)
    if rows * cols >= 2048:
        s[out].parallel(row)
    return s, [out]


def _ln_affine(ctx: GroupContext, node: Node, cols: int) -> tuple[Lazy, Lazy | None]:
    """LayerNormalization's scale and (optional) bias, each read as a row of `cols`."""
    scale = reshape_lazy(ctx.get(node.inputs[1]), (cols,))
    has_bias = len(node.inputs) > 2 and node.inputs[2]
    return scale, reshape_lazy(ctx.get(node.inputs[2]), (cols,)) if has_bias else None


def _layer_norm_stats(ctx: GroupContext, node: Node, wanted: Sequence[str]) -> Result:
    """LayerNormalization whose Mean or InvStdDev is used: the statistics are outputs of their
    own (one per row), computed in float32 (stash_type 1) as ONNX's function body does; Y is the
    normalized value cast back to the input dtype, then scaled and shifted in that dtype."""
    attrs = _attrs(node)
    x_ty = ctx.type_of(node.inputs[0])
    rows, cols = _rows(x_ty.shape, attrs["axis"] % len(x_ty.shape))
    x = ctx.as_tensor(node.inputs[0], (rows, cols))
    xf = (
        (lambda i, j: x[i, j]) if x.dtype == "float32" else (lambda i, j: x[i, j].astype("float32"))
    )
    k1, k2 = te.reduce_axis((0, cols), "k1"), te.reduce_axis((0, cols), "k2")
    total = te.compute((rows,), lambda i: te.sum(xf(i, k1), axis=k1), name="total")
    mean = te.compute((rows,), lambda i: total[i] * (1.0 / cols), name="mean")
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
    "Conv": _conv,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
    "ReduceSum": _reduce,
    "ReduceMean": _reduce,
    "ReduceMax": _reduce,
    "ReduceMin": _reduce,
    "ReduceProd": _reduce,
    "Softmax": _softmax,
    "LogSoftmax": _softmax,
    "LayerNormalization": _layer_norm,
}

"""Convolution anchors: NCHWc conv2d from the x86 library (pre-packed weights, the group's
elementwise tail as its epilogue), 1x1 convs as dense, depthwise NCHWc, the generic grouped
reduction, and the GPU conv templates."""

from typing import Any

import numpy as np

from ... import te
from ...autotune.dispatch import query as autotune_query
from ...te.tensor import Tensor
from ...tir.stmt import LoweringError
from ...topi.x86 import (  # the x86 operator library
    Conv2dConfig,
    conv2d_nchwc,
    dense,
    schedule_conv2d_nchwc,
    schedule_dense,
)
from ...topi.x86.conv2d import config_from as conv_config_from
from ...topi.x86.conv2d import default_config as conv_default
from ...topi.x86.conv2d import kernel_blocks, pack_kernel
from ...topi.x86.dense import config_from as dense_config_from
from ...topi.x86.dense import default_config as dense_default
from ...topi.x86.depthwise import (
    DepthwiseConfig,
    channel_block,
    depthwise_conv2d_nchwc,
    pack_depthwise_kernel,
    schedule_depthwise_nchwc,
)
from ..ir import Node
from ..lower_te import AnchorRule, GroupContext, Tail, unravel
from ..ops.nn import window_geometry
from .matmul import packed_dense
from .nn import (
    FLOATS,
    ReduceConfig,
    Result,
    depthwise_space,
    direct_conv_taps,
    full_attrs,
    pads_after,
    reduce_kernel,
    tail_epilogue,
    window_source,
)


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
    attrs = full_attrs(node)
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
    has_bias = len(node.inputs) > 2 and node.inputs[2]
    bias = ctx.get(node.inputs[2]) if has_bias else None
    if h * w <= SMALL_IMAGE:
        return _conv_small_image(ctx, node, tail, bias)
    weight = ctx.as_tensor(node.inputs[1], (k, c))
    ctx.as_tensor(node.inputs[0])  # the parameter keeps its NCHW shape (a residual reads it so)
    image = ctx.as_tensor(node.inputs[0], (c, h * w))  # a reshaping view of it, inlined

    def epilogue(v: Any, i: Any, j: Any) -> Any:
        v = v + bias((i,)) if bias is not None else v
        return tail.epilogue(v, (0, i, *unravel(j, (h, w)))) if tail.nodes else v

    wl = {"m": k, "n": h * w, "k": c, "dtype": weight.dtype, "prepacked": False}
    values = autotune_query("x86.dense", wl)
    config = dense_config_from(values) if values is not None else dense_default(k)
    op = dense(weight, image, None, epilogue, None, config, "KN")
    return schedule_dense(op, config), [op.out]


#: pointwise convs on images of at most this many pixels run as `_conv_small_image`
SMALL_IMAGE = 64


def _conv_small_image(ctx: GroupContext, node: Node, tail: Tail, bias: Any) -> Result:
    """A pointwise conv of a small image (7x7 and below; 1x1 is squeeze-excitation's) with the
    pixels as the rows, `out^T[H*W, K] = X^T[H*W, C] x W[K, C]^T`, its weights packed into
    panels once (`matmul.packed_dense`), each register tile stored transposed into the NCHW
    output. As the image-as-panels GEMM its 49 columns filled two 32-lane panels (64 computed)
    and a 1x1 image computed 32 lanes for one column; there were only as many parallel tasks
    as panels (2 on a 7x7 image)."""
    _, c, h, w = ctx.type_of(node.inputs[0]).shape
    k = ctx.type_of(node.inputs[1]).shape[0]
    image = ctx.as_tensor(node.inputs[0])  # the parameter keeps its NCHW shape
    rows = te.compute((h * w, c), lambda p, ci: image[0, ci, p // w, p % w], name="pixels")
    ctx.inline.append(rows)
    weights = np.asarray(ctx.constant(node.inputs[1])).reshape(k, c)

    def epilogue(v: Any, i: Any, j: Any) -> Any:
        v = v + bias((j,)) if bias is not None else v
        return tail.epilogue(v, (0, j, *unravel(i, (h, w)))) if tail.nodes else v

    return packed_dense(ctx, rows, node.inputs[1], "NK", epilogue, weights, h * w > 1)


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
    epilogue = tail_epilogue(tail)
    op = conv2d_nchwc(data, packed, stride, pad, dil, bias, epilogue, config, None, groups)
    return schedule_conv2d_nchwc(op, config), [op.out]


def _conv_generic(
    ctx: GroupContext, node: Node, tail: Tail, pads: list, strides: list, dil: list
) -> Result:
    x_ty, w_ty = ctx.type_of(node.inputs[0]), ctx.type_of(node.inputs[1])
    group = full_attrs(node)["group"]
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
    shape = ctx.type_of(node.outputs[0]).shape
    read, extra = window_source(x, shape, w.shape[2:], pads, strides, dil, te.const(0, x.dtype))
    axes, taps = direct_conv_taps(w.shape, full_attrs(node)["group"], pads, strides, dil)

    def body(n: Any, kk: Any, y: Any, xx: Any) -> Any:
        c, iy, ix, ci, ry, rx = taps(kk, y, xx)
        return te.sum(read(n, c, iy, ix) * w((kk, ci, ry, rx)), axis=axes)

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
    op = depthwise_conv2d_nchwc(data, packed, out_hw, pads, strides, dil, bias, tail_epilogue(tail))
    return schedule_depthwise_nchwc(op, config), [op.out]


ANCHORS: dict[str, AnchorRule] = {
    "Conv": _conv,
}

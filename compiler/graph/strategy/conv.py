"""Convolution anchors: NCHWc conv2d (2-D and 3-D) from the x86 library (pre-packed weights,
the group's elementwise tail as its epilogue), 1x1 convs as dense, depthwise NCHWc, the direct
(grouped) reduction over any number of spatial axes, and the GPU conv templates. A 1-D
convolution is lowered as a 2-D one of height 1 (`ConvView`), on the CPU and GPUs alike."""

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import te
from ...autotune.dispatch import peek as autotune_peek
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
from ...topi.x86.conv2d import default_blocked_config, kernel_blocks, pack_kernel
from ...topi.x86.conv2d import default_config as conv_default
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
from ..lower_te import AnchorRule, GroupContext, Index, Lazy, Tail, reshape_lazy, unravel
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


@dataclass(frozen=True)
class ConvView:
    """A Conv node as its lowerings see it: a 1-D one as a 2-D one of height 1 (no padding along
    the new axis, the real axis's stride and dilation), so that it takes the 2-D kernels; 2-D
    and 3-D ones as they are. Shapes and per-axis geometry are the view's."""

    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    begin: tuple[int, ...]  # padding before, per spatial axis
    end: tuple[int, ...]  # padding after
    strides: tuple[int, ...]
    dil: tuple[int, ...]
    group: int
    lifted: bool  # a 1-D convolution viewed as 2-D

    @property
    def stride(self) -> int | tuple[int, ...]:
        """The strides: one int when every axis has the same (as tuning workloads have it)."""
        return _one_if_alike(self.strides)

    @property
    def dilation(self) -> int | tuple[int, ...]:
        return _one_if_alike(self.dil)

    @property
    def padding(self) -> int | tuple[int, ...]:
        """One int when every side is padded alike, else ONNX's pads (before, then after)."""
        return _one_if_alike((*self.begin, *self.end))

    def index(self, idx: Index) -> Index:
        """The node's own output index of an index into the view's output."""
        return (*idx[:2], idx[3]) if self.lifted else tuple(idx)

    def tail(self, tail: Tail) -> Tail:
        """`tail` evaluated at view indices (the node's own when not lifted)."""
        return _ViewTail(tail, self) if self.lifted else tail

    def tensor(self, ctx: GroupContext, value: str, shape: tuple[int, ...]) -> Tensor:
        """Input or weight `value` as a te tensor of its view's `shape`: the parameter keeps its
        own shape (a residual reads it so) and a lifted view of it is inlined."""
        t = ctx.as_tensor(value)
        return ctx.as_tensor(value, shape) if self.lifted else t

    def lazy(self, ctx: GroupContext, value: str, shape: tuple[int, ...]) -> Lazy:
        """Input or weight `value` as a lazy of its view's `shape`."""
        lazy = ctx.get(value)
        return reshape_lazy(lazy, shape) if self.lifted else lazy


def _one_if_alike(values: tuple[int, ...]) -> int | tuple[int, ...]:
    return values[0] if len({*values}) == 1 else values


class _ViewTail(Tail):
    """A tail read at a lifted view's indices."""

    def __init__(self, tail: Tail, view: ConvView) -> None:
        super().__init__(tail.ctx, tail.anchor, tail.nodes, tail.output, tail.outputs)
        self.view = view

    def epilogue(self, value: Any, idx: Index) -> Any:
        return super().epilogue(value, self.view.index(idx))


def conv_view(ctx: GroupContext, node: Node, weight: int = 1) -> ConvView:
    """The `ConvView` of convolution `node` (Conv; QLinearConv with `weight` = 3, the position
    of its weights); LoweringError past 3 spatial axes."""
    x_ty, w_ty = ctx.type_of(node.inputs[0]), ctx.type_of(node.inputs[weight])
    if len(x_ty.shape) not in (3, 4, 5):
        where = "a GPU" if ctx.gpu else "the CPU back-end"
        raise LoweringError(f"{node.op} must be 1-D, 2-D or 3-D on {where}, not "
                            f"{len(x_ty.shape) - 2}-D (node {node.name!r})")  # fmt: skip
    attrs = full_attrs(node)
    begin, end, strides, dil, _ = window_geometry(attrs, x_ty.shape[2:], w_ty.shape[2:])
    spans = [begin, end, strides, dil]
    shapes = [x_ty.shape, w_ty.shape, ctx.type_of(node.outputs[0]).shape]
    shapes = [tuple(int(d) for d in shape) for shape in shapes]
    lifted = len(x_ty.shape) == 3
    if lifted:
        # the new axis: no padding, and the real axis's stride and dilation, which change
        # nothing over one row and one tap but keep them uniform (as the tuner's conv2d
        # workloads have them: a 1-D conv is tuned as the 2-D one it runs as)
        spans = [[first, *span] for first, span in zip((0, 0, *strides, *dil), spans, strict=True)]
        shapes = [(*shape[:2], 1, shape[2]) for shape in shapes]
    return ConvView(*shapes, *(tuple(int(v) for v in span) for span in spans),
                    group=int(attrs["group"]), lifted=lifted)  # fmt: skip


def _conv(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    if ctx.gpu:
        return _gpu_conv(ctx, node, tail)
    view = conv_view(ctx, node)
    dtype = ctx.type_of(node.inputs[0]).dtype
    weight = ctx.constant(node.inputs[1])
    k, cg = view.w_shape[:2]
    depthwise = view.group > 1 and k == view.group and cg == 1
    blocked = weight is not None and not depthwise
    if blocked and view.group == 1 and _pointwise(view, dtype):
        return _conv_pointwise(ctx, node, tail)
    if blocked and (view.group == 1 or dtype in FLOATS):
        return _conv_topi(ctx, node, tail, view, np.asarray(weight).reshape(view.w_shape))
    return _conv_generic(ctx, node, tail, view)


def _gpu_conv(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """A 1-D, 2-D or 3-D (grouped) convolution on a GPU by the template
    `topi.gpu.conv2d.template_for` picks: direct, implicit GEMM or depthwise; a 1-D one as a
    2-D one of height 1 (`ConvView`); bias and tail fused; the knobs tuned, or the default."""
    from ...codegen.gpu import Limits
    from ...target import Target
    from ...topi.gpu import conv2d as gpu_conv

    view = conv_view(ctx, node)
    geo, x_shape, w_shape = _gpu_geometry(view), view.x_shape, view.w_shape
    x, w = view.tensor(ctx, node.inputs[0], x_shape), view.tensor(ctx, node.inputs[1], w_shape)
    bias = ctx.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    tail = view.tail(tail)

    def epilogue(v: Any, *i: Any) -> Any:
        v = v + bias((i[1],)) if bias is not None else v
        return tail.epilogue(v, i)

    limits = Limits.of(Target.parse(ctx.target))
    limit, dtype = limits.max_threads, x.dtype
    template = gpu_conv.template_for(w_shape, geo.groups, geo.out)
    default = gpu_conv.default_of(template, w_shape, geo, limit, dtype)
    if not gpu_conv.fits_shared(template, w_shape, geo, default, dtype, limits.max_shared):
        template = "gpu.conv2d_gemm"  # even its smallest window would not fit: tiles that do
        default = gpu_conv.default_of(template, w_shape, geo, limit, dtype)
    wl = gpu_conv.workload_of(template, x_shape, w_shape, geo, dtype, limit)
    tuned = autotune_query(template, wl)
    config = gpu_conv.config_of(template, tuned) if tuned else default
    if not gpu_conv.fits_shared(template, w_shape, geo, config, dtype, limits.max_shared):
        config = default  # tuned for a target with more shared memory (`-max_shared`)
    epi = epilogue if bias is not None or tail.nodes else None
    out, s = gpu_conv.conv2d(template, x, w, geo, config, epi)
    return s, [out]


def _gpu_geometry(view: ConvView) -> Any:
    """The GPU templates' `Geometry` of a convolution's view."""
    from ...topi.gpu.conv2d import Geometry

    spans = (view.begin, view.strides, view.dil, view.out_shape[2:])
    return Geometry(*(tuple(span) for span in spans), groups=view.group)


def _pointwise(view: ConvView, dtype: str) -> bool:
    pads = (*view.begin, *view.end)
    return is_pointwise_gemm(view.x_shape, view.w_shape, pads, view.strides, dtype)


def is_pointwise_gemm(
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    pads: Sequence[int],
    strides: Sequence[int],
    dtype: str,
) -> bool:
    """Whether a convolution is a 1x1 (1x1x1, 1) one that runs as a GEMM on NCHW as it lies
    (`_conv_pointwise`): batch 1, stride 1, no padding, float."""
    one = set(w_shape[2:]) == {1} and x_shape[0] == 1
    return one and not any(pads) and set(strides) == {1} and dtype in FLOATS


def _conv_pointwise(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """A pointwise conv as topi's dense, out[K, P] = W[K, C] x X[C, P] over the P output
    positions of any rank: the NCHW input and output are that GEMM's operand and result as
    they lie in memory, so nothing is packed to NCHWc and back (1.1-1.9x faster than
    `conv2d_nchwc` on MobileNetV2/EfficientNet 1x1 layers of 14x14 and more); the image operand
    is packed into panels inside the kernel. Small images (`SMALL_IMAGE` positions and fewer)
    take `_conv_small_image`."""
    _, c, *spatial = ctx.type_of(node.inputs[0]).shape
    k, p = ctx.type_of(node.inputs[1]).shape[0], int(np.prod(spatial))
    has_bias = len(node.inputs) > 2 and node.inputs[2]
    bias = ctx.get(node.inputs[2]) if has_bias else None
    if p <= SMALL_IMAGE:
        return _conv_small_image(ctx, node, tail, bias)
    weight = ctx.as_tensor(node.inputs[1], (k, c))
    ctx.as_tensor(node.inputs[0])  # the parameter keeps its NCHW shape (a residual reads it so)
    image = ctx.as_tensor(node.inputs[0], (c, p))  # a reshaping view of it, inlined

    def epilogue(v: Any, i: Any, j: Any) -> Any:
        v = v + bias((i,)) if bias is not None else v
        return tail.epilogue(v, (0, i, *unravel(j, tuple(spatial)))) if tail.nodes else v

    wl = {"m": k, "n": p, "k": c, "dtype": weight.dtype, "prepacked": False}
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
    _, c, *spatial = ctx.type_of(node.inputs[0]).shape
    k, p = ctx.type_of(node.inputs[1]).shape[0], int(np.prod(spatial))
    image = ctx.as_tensor(node.inputs[0])  # the parameter keeps its NCHW shape
    rows = te.compute((p, c), lambda q, ci: image[(0, ci, *unravel(q, tuple(spatial)))],
                      name="pixels")  # fmt: skip
    ctx.inline.append(rows)
    weights = np.asarray(ctx.constant(node.inputs[1])).reshape(k, c)

    def epilogue(v: Any, i: Any, j: Any) -> Any:
        v = v + bias((j,)) if bias is not None else v
        return tail.epilogue(v, (0, j, *unravel(i, tuple(spatial)))) if tail.nodes else v

    return packed_dense(ctx, rows, node.inputs[1], "NK", epilogue, weights, p > 1)


def conv_config(
    data: Tensor,
    w_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    stride: int | tuple[int, ...],
    pad: int | tuple[int, ...],
    dil: int | tuple[int, ...],
    groups: int = 1,
) -> Conv2dConfig:
    """The knobs of topi's NCHWc conv2d for this layer: the tuned config when a tuning log is
    applied and has this workload (`compiler.autotune`; the tuner's workloads are 2-D and pad
    every side alike, with one stride and dilation), else `topi.x86.conv2d.default_config` (of
    one group's channels, for a grouped convolution)."""
    ints = isinstance(stride, int) and isinstance(pad, int) and isinstance(dil, int)
    if ints and len(data.shape) == 4:
        wl = conv_workload(data, w_shape, stride, pad, dil, groups)
        values = autotune_query("x86.conv2d_nchwc", wl)
        if values is not None:
            return conv_config_from(values)
    return conv_default(w_shape[1], w_shape[0] // groups, tuple(out_shape[2:]))


def blocked_conv_config(
    data: Tensor,
    w_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    stride: int | tuple[int, ...],
    pad: int | tuple[int, ...],
    dil: int | tuple[int, ...],
    layout: str,
    blocks: tuple[int, int],
) -> Conv2dConfig:
    """The knobs of topi's conv2d_nchwc for a layer of a blocked chain (`ConvNCHWc`: `layout`
    "NCHWc", or "NCHW-NCHWc" for a stem that packs its NCHW input; `data` its NCHW view): the
    tuned config of its blocked workload, whose channel blocks are the chain's `blocks` (the
    space has no other), else `topi.x86.conv2d.default_blocked_config`. A log's config of the
    layer's NCHW kernel does not apply (it was measured with its own blocks and a pack and
    unpack): a warning names it."""
    ints = isinstance(stride, int) and isinstance(pad, int) and isinstance(dil, int)
    if ints:
        wl = conv_workload(data, w_shape, stride, pad, dil, layout=layout, blocks=blocks)
        values = autotune_query("x86.conv2d_nchwc", wl)
        if values is not None:
            return conv_config_from(values)
        nchw = {k: v for k, v in wl.items() if k not in ("layout", "blocks")}
        if autotune_peek("x86.conv2d_nchwc", nchw) is not None:
            warnings.warn(f"the tuning log's config of the NCHW conv2d {nchw} is not applied: "
                          f"the layer runs blocked ({layout}, blocks {list(blocks)}), tune its "
                          f"blocked task", stacklevel=2)  # fmt: skip
    return default_blocked_config(w_shape[1], w_shape[0], tuple(out_shape[2:]), blocks)


def conv_workload(
    data: Tensor,
    w_shape: tuple[int, ...],
    stride: int,
    pad: int,
    dil: int,
    groups: int = 1,
    layout: str | None = None,
    blocks: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The tuning workload of an NCHWc conv2d (`compiler.autotune.templates`), `data` its NCHW
    shape; `groups` only when above 1, `layout` and `blocks` only for a blocked kernel (the keys
    of ungrouped NCHW workloads stay as they were)."""
    n, c, h, w = (int(d) for d in data.shape)
    k, _, r, s_ = (int(d) for d in w_shape)
    wl = {"n": n, "c": c, "h": h, "w": w, "k": k, "r": r, "s": s_, "stride": int(stride),
          "pad": int(pad), "dil": int(dil), "dtype": data.dtype}  # fmt: skip
    if groups > 1:
        wl["groups"] = int(groups)
    if layout is not None and blocks is not None:
        wl.update(layout=layout, blocks=[int(blocks[0]), int(blocks[1])])
    return wl


def _conv_topi(ctx: GroupContext, node: Node, tail: Tail, view: ConvView, w: np.ndarray) -> Result:
    """A 2-D (or lifted 1-D) or 3-D convolution through topi's NCHWc conv2d, `w` its view's
    constant weights, packed once here."""
    stride, pad, dil, groups = view.stride, view.padding, view.dilation, view.group
    data = view.tensor(ctx, node.inputs[0], view.x_shape)
    config = conv_config(data, w.shape, view.out_shape, stride, pad, dil, groups)
    ic_bn, oc_bn = kernel_blocks(w.shape[1], w.shape[0] // groups, config)
    packed = ctx.add_constant(
        f"{node.inputs[1]}.nchwc{ic_bn}x{oc_bn}", pack_kernel(w, ic_bn, oc_bn)
    )
    has_bias = len(node.inputs) > 2 and node.inputs[2]
    bias = ctx.as_tensor(node.inputs[2]) if has_bias else None
    epilogue = tail_epilogue(view.tail(tail))
    op = conv2d_nchwc(data, packed, stride, pad, dil, bias, epilogue, config, None, groups)
    return schedule_conv2d_nchwc(op, config), [op.out]


def _conv_generic(ctx: GroupContext, node: Node, tail: Tail, view: ConvView) -> Result:
    """A depthwise 2-D (or lifted 1-D) convolution through its tunable template, any other
    through the direct reduction (`_conv_reduction`)."""
    tail, config = view.tail(tail), None
    k, cg = view.w_shape[:2]
    if cg == 1 and view.group == k > 1 and len(view.x_shape) == 4:  # depthwise: a template
        wl = depthwise_workload(view, ctx.type_of(node.inputs[0]).dtype)
        values = autotune_query("x86.depthwise_conv2d", wl)
        values = dict(values if values is not None else depthwise_space(wl).default.values)
        blocked = values.get("layout") == "nchwc" and wl["dtype"] in FLOATS
        if blocked and ctx.constant(node.inputs[1]) is not None:
            return _depthwise_nchwc(ctx, node, tail, view, values)
        row_knobs = {k: values[k] for k in ("lanes", "parallel", "unroll_taps") if k in values}
        config = ReduceConfig(**row_knobs)
    red, post, extra = _conv_reduction(ctx, node, view)
    return reduce_kernel(red, tail, post, extra, config)


def depthwise_workload(view: ConvView, dtype: str, block: int | None = None) -> dict[str, Any]:
    """The tuning workload of a depthwise conv2d (`x86.depthwise_conv2d`); with `block`, of the
    blocked kernel of a chain (`layout` "NCHWc", input and output in blocks of `block`
    channels)."""
    n, c, h, wd = view.x_shape
    r, s = view.w_shape[2:]
    ends = pads_after(view.out_shape[2:], (r, s), view.begin, view.strides, view.dil, (h, wd))
    wl = {"n": n, "c": c, "h": h, "w": wd, "r": r, "s": s,
          "pads": [*view.begin, *(int(e) for e in ends)], "strides": list(view.strides),
          "dil": list(view.dil), "dtype": dtype}  # fmt: skip
    return wl if block is None else {**wl, "layout": "NCHWc", "block": int(block)}


def blocked_depthwise_config(
    view: ConvView, dtype: str, block: int, target: str = "llvm"
) -> DepthwiseConfig:
    """The knobs of topi's depthwise kernel for a layer of a blocked chain (channel block
    `block`, the chain's): the tuned config of its blocked workload, else the default
    `reg_n` and `parallel` of `depthwise_space`; register tiles one of `target`'s vectors
    wide. A log's config of the NCHW kernel does not apply (a warning names it)."""
    wl = depthwise_workload(view, dtype, block)
    values = autotune_query("x86.depthwise_conv2d", wl)
    if values is None:
        nchw = depthwise_workload(view, dtype)
        if autotune_peek("x86.depthwise_conv2d", nchw) is not None:
            warnings.warn(f"the tuning log's config of the NCHW depthwise conv2d {nchw} is not "
                          f"applied: the layer runs blocked (NCHW{block}c), tune its blocked "
                          f"task", stacklevel=2)  # fmt: skip
        values = depthwise_space(wl).default.values
    from ...codegen.llvm_jit import vector_registers  # llvmlite: only when compiling for a CPU

    vec = max(1, vector_registers(target)[0] * 4 // np.dtype(dtype).itemsize)
    return DepthwiseConfig(block, int(values["reg_n"]), bool(values["parallel"]), vec)


def _conv_reduction(
    ctx: GroupContext, node: Node, view: ConvView
) -> tuple[Tensor, Any, list[Tensor]]:
    """A (grouped) convolution of 1 to 3 spatial axes as one reduction over NCHW: (the
    reduction, its bias add or None, the padding stages it reads)."""
    x = view.lazy(ctx, node.inputs[0], view.x_shape)
    w = view.lazy(ctx, node.inputs[1], view.w_shape)
    shape, pads, strides, dil = view.out_shape, view.begin, view.strides, view.dil
    read, extra = window_source(x, shape, w.shape[2:], pads, strides, dil, te.const(0, x.dtype))
    axes, taps = direct_conv_taps(w.shape, view.group, pads, strides, dil)

    def body(n: Any, kk: Any, *pos: Any) -> Any:
        c, at, ci, tap = taps(kk, *pos)
        return te.sum(read(n, c, *at) * w((kk, ci, *tap)), axis=axes)

    red = te.compute(shape, body, name="conv")
    bias = ctx.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    post = (lambda v, i: v + bias((i[1],))) if bias is not None else None
    return red, post, extra


def _depthwise_nchwc(
    ctx: GroupContext, node: Node, tail: Tail, view: ConvView, values: dict
) -> Result:
    """A depthwise Conv through topi's NCHWc template (channels in vector lanes), its constant
    weights packed once here."""
    data = view.tensor(ctx, node.inputs[0], view.x_shape)
    w = np.asarray(ctx.constant(node.inputs[1])).reshape(view.w_shape)
    cb = channel_block(w.shape[0], int(values["cb"]))
    config = DepthwiseConfig(cb, int(values["reg_n"]), bool(values["parallel"]))
    packed = ctx.add_constant(
        f"{node.inputs[1]}.dw{config.cb}", pack_depthwise_kernel(w, config.cb)
    )
    has_bias = len(node.inputs) > 2 and node.inputs[2]
    bias = ctx.as_tensor(node.inputs[2]) if has_bias else None
    out_hw, pads, strides, dil = view.out_shape[2:], view.begin, view.strides, view.dil
    op = depthwise_conv2d_nchwc(data, packed, out_hw, pads, strides, dil, bias, tail_epilogue(tail))
    return schedule_depthwise_nchwc(op, config), [op.out]


ANCHORS: dict[str, AnchorRule] = {
    "Conv": _conv,
}

"""Native lowerings of the blocked-layout ops of `passes.alter_layout`: LayoutTransform (lazy:
an index remap that inlines into its reader, or a transpose kernel of its own) and ConvNCHWc
(an anchor: topi's `conv2d_nchwc`, grouped too, or `depthwise_conv2d_nchwc` from and to the
blocked layout, its tail in that layout)."""

from __future__ import annotations

from typing import Any

from ... import te
from ...topi.x86 import conv2d_nchwc, schedule_conv2d_nchwc
from ...topi.x86.conv2d import with_blocks
from ...topi.x86.depthwise import depthwise_conv2d_nchwc, schedule_depthwise_nchwc
from ..ir import Node
from ..lower_te import AnchorRule, GroupContext, Index, Lazy, Rule, Tail
from ..ops.layout import is_depthwise_nchwc
from ..ops.nn import window_geometry
from .conv import ConvView, blocked_conv_config, blocked_depthwise_config, conv_config
from .nn import Result, full_attrs, tail_epilogue


def _layout_transform(ctx: GroupContext, node: Node) -> list[Lazy]:
    src = ctx.get(node.inputs[0])
    out = ctx.type_of(node.outputs[0])
    block = int(node.attr("block"))
    channels = int(ctx.type_of(node.inputs[0]).shape[1])  # the padded ones read zeros

    def to_blocked(idx: Index) -> object:  # (n, c/b, *pos, b) <- (n, c, *pos)
        n, co, *pos, ci = idx
        if out.shape[1] * block == channels:
            return src((n, co * block + ci, *pos))
        c = co * block + ci
        return te.if_then_else(c < channels, src((n, c, *pos)), te.const(0, out.dtype))

    def to_plain(idx: Index) -> object:  # (n, c, *pos) <- (n, c/b, *pos, b)
        n, c, *pos = idx
        return src((n, c // block, *pos, c % block))

    blocked = node.attr("dst") == "NCHWc"
    return [Lazy(out.shape, out.dtype, to_blocked if blocked else to_plain)]


def _conv_nchwc(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """ConvNCHWc: the input, the output and the tail stay in the blocked layout (no pack or
    unpack inside the kernel; an NCHW input, a stem's, is packed inside it); the blocks are the
    graph's (its packed weight's), the other knobs the layer's tuned or default
    `conv2d_nchwc` (`depthwise_conv2d_nchwc`) config."""
    x_ty = ctx.type_of(node.inputs[0])
    ko, cb, r, s, bi, bo = (int(d) for d in ctx.type_of(node.inputs[1]).shape)
    n, _, h, w = (int(d) for d in x_ty.shape[:4])  # blocked, or NCHW (a stem)
    attrs = full_attrs(node)
    begin, end, strides, dils, outs = window_geometry(attrs, (h, w), (r, s))
    group = int(attrs["group"])
    w_shape = (ko, cb, r, s, bi, bo)
    if is_depthwise_nchwc(tuple(int(d) for d in x_ty.shape), w_shape, group):
        c, spans = ko * bo, (tuple(v) for v in (begin, end, strides, dils))
        view = ConvView((n, c, h, w), (c, 1, r, s), (n, c, *outs), *spans, c, False)
        return _depthwise_nchwc(ctx, node, tail, view)
    plain = te.placeholder((n, cb * bi * group, h, w), x_ty.dtype, name="shape_only")
    w_nchw, out_nchw = (ko * bo, cb * bi, r, s), (n, ko * bo, *outs)
    stride, pad, dil = _one(strides), _one([*begin, *end]), _one(dils)
    if group == 1:  # tunable: the blocked workload with the chain's blocks
        layout = "NCHWc" if len(x_ty.shape) == 5 else "NCHW-NCHWc"  # a stem packs its NCHW input
        config = blocked_conv_config(plain, w_nchw, out_nchw, stride, pad, dil, layout, (bi, bo))
    else:  # a grouped layer of a chain: one group's default config on the chain's blocks
        config = conv_config(plain, w_nchw, out_nchw, stride, pad, dil, group)
        config = with_blocks(config, (bi, bo), outs[1], ko * bo // group)
    data, kernel = ctx.as_tensor(node.inputs[0]), ctx.as_tensor(node.inputs[1])
    has_bias = len(node.inputs) > 2 and node.inputs[2]
    bias = ctx.as_tensor(node.inputs[2], (ko * bo,)) if has_bias else None
    epilogue = _real_channels(int(attrs.get("channels", 0)), ko * bo, bo, tail_epilogue(tail))
    op = conv2d_nchwc(data, kernel, tuple(strides), (*begin, *end), tuple(dils), bias,
                      epilogue, config, None, group, blocked=True)  # fmt: skip
    return schedule_conv2d_nchwc(op, config), [op.out]


def _real_channels(real: int, channels: int, bo: int, epilogue: Any) -> Any:
    """`epilogue` (at the blocked index `(v, n, ko, y, x, ki)`) after the padded output
    channels, from `real` on, are set to 0: computed they are 0 x the input, NaN where that is
    infinite, which the next conv's zero weights would carry into its real outputs."""
    if not real or real >= channels:
        return epilogue

    def masked(v: Any, n: Any, ko: Any, y: Any, x: Any, ki: Any) -> Any:
        v = te.select(ko * bo + ki < real, v, te.const(0, v.dtype))
        return epilogue(v, n, ko, y, x, ki) if epilogue is not None else v

    return masked


def _depthwise_nchwc(ctx: GroupContext, node: Node, tail: Tail, view: ConvView) -> Result:
    """A depthwise ConvNCHWc: topi's depthwise template on the blocked layout as it lies, the
    channel block the graph's, `reg_n` and `parallel` tuned or by default."""
    n, c, _, _ = view.x_shape
    r, s = view.w_shape[2:]
    cb = int(ctx.type_of(node.inputs[1]).shape[-1])  # the input's block, or NCHW packed to it
    config = blocked_depthwise_config(view, "float32", cb, ctx.target)
    data = ctx.as_tensor(node.inputs[0])
    kernel = ctx.as_tensor(node.inputs[1], (c // cb, r, s, cb))
    has_bias = len(node.inputs) > 2 and node.inputs[2]
    bias = ctx.as_tensor(node.inputs[2], (c,)) if has_bias else None
    op = depthwise_conv2d_nchwc(data, kernel, view.out_shape[2:], view.begin, view.strides,
                                view.dil, bias, tail_epilogue(tail), blocked=True)  # fmt: skip
    return schedule_depthwise_nchwc(op, config), [op.out]


def _one(values: list[int]) -> int | tuple[int, ...]:
    return values[0] if len(set(values)) == 1 else tuple(values)


ELEMENTWISE: dict[str, Rule] = {"LayoutTransform": _layout_transform}
ANCHORS: dict[str, AnchorRule] = {"ConvNCHWc": _conv_nchwc}

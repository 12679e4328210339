"""Lowerings of the int8 graph ops, bit-exact with their numpy kernels (compiler/quantize).

tf.quantize, tf.dequantize and tf.qadd are elementwise lazies (tf.qadd is opaque to fusion but
computes element by element); tf.qconv2d, tf.qdense and tf.qmaxpool are anchors. The integer
semantics follow ``hw.isa.alu_apply`` at a 32-bit accumulator: int8 x int8 products summed in
wrapping int32 (LLVM's ``add``/``mul`` wrap), the int32 bias added with wrapping, then the node's
requantization steps, each one ALU instruction with an immediate:

    ADD imm  ->  x + imm (wraps)           MUL imm  ->  x * imm (wraps)
    SHR k>=0 ->  x >> min(k, 31)           SHR -k   ->  x << k (wraps; 0 once k >= 32)
    MAX imm  ->  max(x, imm)               MIN imm  ->  min(x, imm)

and the result's low 8 bits as int8. Shifts are the ``te.shift_left``/``te.shift_right``
intrinsics, which the affine simplifier keeps whole (a floor division by ``2**k`` would let it
move terms across the shift, exact only without wrapping).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ....hw.isa import AluOp
from ... import te
from ...quantize.requant import AluStep, RequantParams
from ...quantize.scheme import qrange
from ...te.tensor import Tensor
from ...tir.stmt import LoweringError
from ...topi.x86 import conv2d_nchwc, schedule_conv2d_nchwc
from ...topi.x86.conv2d import kernel_blocks, pack_kernel
from ..ir import Node
from ..lower_te import AnchorRule, GroupContext, Index, Lazy, Rule, Tail
from ..ops.nn import window_geometry
from ..ops.qnn import add_from_attrs, requant_from_attrs
from ..registry import get_op
from .conv import conv_config
from .matmul import packed_dense
from .nn import Result, pad_image, reduce_kernel
from .reduce import max_pool_separable

ACC = "int32"
ACC_WIDTH = 32
Q_MIN, Q_MAX = qrange(8)  # the narrow int8 range every quantized tensor uses


def _attrs(node: Node) -> dict[str, Any]:
    return get_op(node.op).full_attrs(node)


def _requant(node: Node, attrs: dict[str, Any]) -> RequantParams:
    """The node's requantization, refused unless it runs on a 32-bit accumulator."""
    params = requant_from_attrs(attrs)
    if params.acc_width != ACC_WIDTH:
        raise LoweringError(
            f"{node.op} node {node.name!r}: acc_width must be {ACC_WIDTH} on the CPU back-end "
            f"(not built yet for other widths), not {params.acc_width}"
        )
    return params


def alu_step(x: Any, step: AluStep) -> Any:
    """One ALU instruction with an immediate on an int32 value, as ``alu_apply`` at 32 bits."""
    op, imm = step.op, int(step.imm)
    if op == AluOp.ADD:
        return x + te.const(imm, ACC)
    if op == AluOp.MUL:
        return x * te.const(imm, ACC)
    if op == AluOp.MAX:
        return te.max(x, te.const(imm, ACC))
    if op == AluOp.MIN:
        return te.min(x, te.const(imm, ACC))
    if op == AluOp.SHR and imm >= 0:
        return te.shift_right(x, min(imm, ACC_WIDTH - 1)) if imm else x
    if op == AluOp.SHR and -imm < ACC_WIDTH:
        return te.shift_left(x, -imm)
    if op == AluOp.SHR:  # 0, written as two shifts: x stays read (a kernel must use its inputs)
        return te.shift_left(te.shift_left(x, ACC_WIDTH - 1), 1)
    raise LoweringError(f"ALU op {op!r} has no CPU lowering")


def requantize(acc: Any, params: RequantParams) -> Any:
    """The requantization steps on an int32 accumulator, then its low 8 bits as int8 (a
    per-channel requantization's multipliers are the caller's: it knows the channel)."""
    if params.channel_multipliers:
        raise LoweringError("requantize: apply the per-channel multipliers first")
    for step in params.steps:
        acc = alu_step(acc, step)
    return acc.astype("int8")


# ---- elementwise: the float boundaries and the residual add ------------------------------------


def _quantize(ctx: GroupContext, node: Node) -> list[Lazy]:
    """``clip(rint(float64(x) / scale), -127, 127)`` as int8; NaN becomes 0 (numpy's cast of NaN
    to int8 on x86)."""
    x = ctx.get(node.inputs[0])
    scale = te.const(float(_attrs(node)["scale"]), "float64")
    shape = ctx.type_of(node.outputs[0]).shape

    def fn(idx: Index) -> Any:
        v = te.round(x(idx).astype("float64") / scale)
        v = te.min(te.max(v, te.const(float(Q_MIN), "float64")), te.const(float(Q_MAX), "float64"))
        return te.select(v == v, v, te.const(0.0, "float64")).astype("int8")

    return [Lazy(shape, "int8", fn)]


def _dequantize(ctx: GroupContext, node: Node) -> list[Lazy]:
    """``float64(q) * scale`` rounded once to float32."""
    q = ctx.get(node.inputs[0])
    scale = te.const(float(_attrs(node)["scale"]), "float64")
    shape = ctx.type_of(node.outputs[0]).shape
    return [
        Lazy(shape, "float32", lambda idx: (q(idx).astype("float64") * scale).astype("float32"))
    ]


def _qadd(ctx: GroupContext, node: Node) -> list[Lazy]:
    """``requant(scale_a(a) + scale_b(b))``: each operand widened to int32 and scaled by its
    own ALU step (or none), the two summed with wrapping, then requantized."""
    attrs = _attrs(node)
    params, requant = add_from_attrs(attrs), _requant(node, attrs)
    a, b = ctx.get(node.inputs[0]), ctx.get(node.inputs[1])
    shape = ctx.type_of(node.outputs[0]).shape

    def operand(x: Lazy, step: AluStep | None, idx: Index) -> Any:
        v = x(idx).astype(ACC)
        return v if step is None else alu_step(v, step)

    def fn(idx: Index) -> Any:
        return requantize(operand(a, params.lhs, idx) + operand(b, params.rhs, idx), requant)

    return [Lazy(shape, "int8", fn)]


# ---- anchors: convolution, dense, max pooling --------------------------------------------------


def _bias(ctx: GroupContext, node: Node) -> Lazy | None:
    return ctx.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None


def _finish(ctx: GroupContext, node: Node, tail: Tail) -> Any:
    """``(acc, *index) -> output``: bias (wrapping), the pre-shift and per-channel multiplier
    (wrapping) where the weights have per-channel scales, requantization, then the group's
    tail."""
    bias, requant = _bias(ctx, node), _requant(node, _attrs(node))
    table = None
    if requant.channel_multipliers:
        multipliers = np.asarray(requant.channel_multipliers, dtype=np.int32)
        table = ctx.add_constant(f"{node.name}.multipliers", multipliers)
    pre = requant.pre_shift
    requant = replace(requant, channel_multipliers=(), pre_shift=0)

    def fn(acc: Any, *idx: Any) -> Any:
        if bias is not None:
            acc = acc + bias((idx[1],)).astype(ACC)
        if table is not None:
            acc = alu_step(acc, AluStep(AluOp.SHR, pre)) if pre else acc
            acc = acc * table[idx[1]]
        return tail.epilogue(requantize(acc, requant), tuple(idx))

    return fn


def _qconv2d(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """topi's NCHW[x]c conv2d with int8 weights packed once; asymmetric padding is a zero-padded
    copy first; grouped convs reduce over their group's channel blocks (topi's ``groups``).
    Unequal strides: a direct reduction, row by row."""
    attrs = _attrs(node)
    x_ty, w_ty = ctx.type_of(node.inputs[0]), ctx.type_of(node.inputs[1])
    begin, end, strides, _, _ = window_geometry(attrs, x_ty.shape[2:], w_ty.shape[2:])
    weight = ctx.constant(node.inputs[1])
    finish = _finish(ctx, node, tail)
    if weight is None or strides[0] != strides[1]:
        return _qconv2d_direct(ctx, node, finish, begin, end, strides)
    w = np.asarray(weight)
    data, pad = ctx.as_tensor(node.inputs[0]), begin[0]
    uneven = begin != end or begin[0] != begin[1]
    if uneven:
        data, pad = _zero_padded(ctx, node, begin, end), 0
    groups = attrs["group"]
    out_shape = ctx.type_of(node.outputs[0]).shape
    config = conv_config(data, w.shape, out_shape, strides[0], pad, 1, groups)
    if uneven:
        config = replace(config, pack_data=True)  # pack from the padded copy, not in the loop
    ic_bn, oc_bn = kernel_blocks(w.shape[1], w.shape[0] // groups, config)
    packed = ctx.add_constant(
        f"{node.inputs[1]}.nchwc{ic_bn}x{oc_bn}", pack_kernel(w, ic_bn, oc_bn)
    )
    op = conv2d_nchwc(data, packed, strides[0], pad, 1, None, finish, config, ACC, groups)
    return schedule_conv2d_nchwc(op, config), [op.out]


def _zero_padded(ctx: GroupContext, node: Node, begin: list, end: list) -> Tensor:
    """The input with zeros around it (0 is the zero point), inlined into topi's packing."""
    padded = pad_image(ctx.get(node.inputs[0]), begin, end, te.const(0, "int8"))
    ctx.inline.append(padded)
    return padded


def _qconv2d_direct(
    ctx: GroupContext, node: Node, finish: Any, begin: list, end: list, strides: list
) -> Result:
    x, w = ctx.get(node.inputs[0]), ctx.get(node.inputs[1])
    o, c, kh, kw = w.shape  # c: the input channels of a group
    per_group = o // _attrs(node)["group"]
    shape = ctx.type_of(node.outputs[0]).shape
    padded = pad_image(x, begin, end, te.const(0, "int8")) if any(begin + end) else None
    rc, ry, rx = (te.reduce_axis((0, n), name) for n, name in ((c, "rc"), (kh, "ry"), (kw, "rx")))

    def body(n: Any, k: Any, y: Any, xx: Any) -> Any:
        iy, ix = y * strides[0] + ry, xx * strides[1] + rx
        ic = rc if per_group == o else k // per_group * c + rc  # the input channel of k's group
        v = padded[n, ic, iy, ix] if padded is not None else x((n, ic, iy, ix))
        return te.sum(v.astype(ACC) * w((k, rc, ry, rx)).astype(ACC), axis=[rc, ry, rx])

    red = te.compute(shape, body, name="qconv")
    no_tail = Tail(ctx, node, [], node.outputs[0])
    return reduce_kernel(red, no_tail, lambda v, i: finish(v, *i), [padded] if padded else [])


def _qdense(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """topi's dense with the int8 weights packed into panels once, int32 accumulation."""
    finish = _finish(ctx, node, tail)
    data = ctx.as_tensor(node.inputs[0])
    return packed_dense(ctx, data, node.inputs[1], "NK", finish)


def _qmaxpool(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """The separable max pooling of the float graph: padding reads as -128, below every value."""
    attrs = _attrs(node)
    kernel = tuple(attrs["kernel_shape"])
    begin, _, strides, _, _ = window_geometry(attrs, ctx.type_of(node.inputs[0]).shape[2:], kernel)
    return max_pool_separable(ctx, node, tail, kernel, begin, strides)


ELEMENTWISE: dict[str, Rule] = {
    "tf.quantize": _quantize,
    "tf.dequantize": _dequantize,
    "tf.qadd": _qadd,
}

ANCHORS: dict[str, AnchorRule] = {
    "tf.qconv2d": _qconv2d,
    "tf.qdense": _qdense,
    "tf.qmaxpool": _qmaxpool,
}

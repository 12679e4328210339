"""Lowerings of ONNX's quantized ops, bit-exact with their numpy kernels (graph/ops/quant.py),
which follow onnxruntime's float32 arithmetic.

QuantizeLinear and DequantizeLinear are elementwise lazies (scale and zero point per tensor, per
axis or per block); QLinearConv and QLinearMatMul are anchors, and so are ConvInteger and
MatMulInteger (onnxruntime's dynamic quantization), which are their int32 sums without the
requantization (DynamicQuantizeLinear is expanded into reductions and a QuantizeLinear:
ops/quant.py). The anchors sum the products of the *centered* integers, the input minus its
zero point and the weights minus theirs (9-bit values), in int32 (wrapping, as onnxruntime's
int32 sums do), add the int32 bias, and requantize the sum as MLAS does it (below). Constant
weights are centered (and packed) once at compile time. An ungrouped convolution or a 2-D
`b` of a matmul with constant weights and weight zero point takes one of three integer
kernels (`int8_dot.int8_kernel`: by the target CPU's features, TF_INT8_KERNEL forces one),
all topi's NCHWc conv2d or dense micro-kernel with another product (the first two are
`strategy/int8_dot.py`'s):

- "quads" (CPUs with AVX-512 VNNI or AVX-VNNI): int32 *words* of four consecutive input
  channels (K of a matmul), the input's bytes as unsigned (uint8 as they are, int8 plus 128)
  and the centered weights' as signed bytes (where they fit: else "pairs"), summed by
  `te.dot_u8i8x4`, one non-saturating vpdpbusd per 64 products. The input is not centered, so
  its padding holds its zero point `zu` (as the bytes hold it) and every position adds
  ``zu * w``: the epilogue subtracts ``zu * sum(w)`` per output channel (the sums over
  channels and taps computed once; a zero point given at run time multiplies them in the
  kernel), in wrapping int32 like the sums;
- "pairs" (any other x86-64 CPU): words of two channels of the centered input and weights as
  int16 halves, summed by `te.dot_i16x2` (pmaddwd; LLVM folds the accumulating add into
  vpdpwssd on VNNI CPUs);
- "centered" (other targets; GPU targets always): the centered input as int32 times the
  weights as int16 (int32 rather than int16 input because the conv2d micro-kernel then
  broadcasts it without a sign extension), an int32 multiply (vpmulld) per product.

All three give the same int32 sums bit for bit, wraps included: each word's products and
their sum are exact (pairs: |255 * 255| twice < 2**17, and pmaddwd wraps only for -32768 *
-32768 twice, which 9-bit values never reach; quads: four products of at most 255 * 128, and
vpdpbusd, unlike vpdpbusds, adds each word's sum to the accumulator as a wrapping int32 add),
and int32 sums are exact modulo 2**32 in any order. Channels past the words' last multiple of
2 (4) are zero words in the weights and zero bytes in the input. See docs/cpu_backend.md,
"Integer convolutions and matmuls on dot-product instructions".

The requantization:

    y = rint(clamp(float32(acc) * M, min - y_zero, max - y_zero)) + y_zero

with ``M = float32(x_scale * w_scale) / y_scale`` computed once with numpy
(`ops.quant.requant_multiplier`), per output channel (column) where the weight scale is.
QuantizeLinear is ``rint(clamp(float32(x) / scale, ...)) + zero`` the same way, NaN giving the
type's minimum. Every float operation is one correctly rounded IEEE float32 operation in LLVM,
as in numpy and MLAS; inside these ops no multiply feeds an add (which LLVM may contract into an
FMA). A float op fused after a DequantizeLinear, as in any float group, may be.

Scales and zero points of QLinearConv/QLinearMatMul are usually constants (initializers in
every exporter's output): then the multiplier is computed once with numpy and the weights are
centered (and packed) once. Where any is computed at run time the kernel reads it: the
multiplier is then computed per output in float32, ``(x_scale * w_scale) / y_scale``, the same
two correctly rounded operations, and the weights are centered as they are read (a direct
reduction). Per tensor, and per axis where ONNX allows it: QLinearConv's weight parameters per
output channel, QLinearMatMul's `a` parameters per row and `b`'s per column.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from ....runtime.dtypes import is_narrow, storage_dtype
from ... import te
from ...te import narrow
from ...te.tensor import Tensor
from ...tir.stmt import LoweringError
from ...topi.x86 import conv2d_nchwc, schedule_conv2d_nchwc
from ...topi.x86.conv2d import kernel_blocks, pack_kernel
from ..ir import Node
from ..lower_te import AnchorRule, GroupContext, Index, Lazy, Rule, Tail, reshape_lazy, unravel
from ..ops.quant import requant_multiplier
from ..registry import get_op
from .conv import ConvView, conv_config, conv_view
from .int8_dot import WordInput, conv_words, int8_kernel, matmul_words
from .matmul import batch_index, packed_dense
from .nn import Result, direct_conv_taps, pad_image, reduce_kernel, window_source

F32 = "float32"
ACC = "int32"
CENTERED = "int32"  # an input minus its zero point (9 bits)

Reader = Callable[[Index], Any]  # index of the quantized tensor -> its scale or zero point


def _attrs(node: Node) -> dict[str, Any]:
    return get_op(node.op).full_attrs(node)


def _input(node: Node, position: int) -> str:
    return node.inputs[position] if len(node.inputs) > position else ""


def _constant(ctx: GroupContext, node: Node, position: int, what: str) -> np.ndarray | None:
    """The constant at input `position` (None when the optional input is absent)."""
    value = _input(node, position)
    if not value:
        return None
    const = ctx.constant(value)
    if const is None:
        raise LoweringError(
            f"{node.op} node {node.name!r}: {what} ({value!r}) must be a constant on the CPU "
            f"back-end (not built yet for values computed at run time)"
        )
    return np.asarray(const)


def round_saturate(v: Any, zero: Any, dtype: str) -> Any:
    """``rint(clamp(v, min - zero, max - zero)) + zero`` as `dtype` (float32 `v`, `zero` a float32
    expression or None); NaN gives the type's minimum. Mirrors ``ops.quant.round_saturate``."""
    info = np.iinfo(dtype)
    return _round_clamp(v, zero, int(info.min), int(info.max)).astype(dtype)


def _round_clamp(v: Any, zero: Any, lowest: int, highest: int) -> Any:
    """`round_saturate` in float32, to the range [lowest, highest]."""
    low, high = te.const(float(lowest), F32), te.const(float(highest), F32)
    if zero is not None:
        low, high = low - zero, high - zero
    value = te.round(te.min(te.max(v, low), high))
    if zero is not None:
        value = value + zero
    return te.select(v == v, value, te.const(float(lowest), F32))


# ---- QuantizeLinear, DequantizeLinear -----------------------------------------------------------


def _param(
    ctx: GroupContext, node: Node, position: int, shape: tuple, axis: int | None, block: int = 0
) -> Reader | None:
    """A reader of the scale or zero point at `position` (a constant or a value computed at run
    time), for a tensor of `shape`: one value, or one per index of `axis` (not None) or one per
    block of `block` along it. A one-value constant reads as an immediate."""
    value = _input(node, position)
    if not value:
        return None
    p = ctx.get(value)
    size = int(np.prod(p.shape))
    if size == 1 and not block:
        first = (0,) * len(p.shape)
        return lambda idx: p(first)
    if axis is not None:
        axis %= max(1, len(shape))
        if block and len(p.shape) == len(shape):
            return lambda idx: p(tuple(i // block if k == axis else i for k, i in enumerate(idx)))
        if not block and p.shape == (shape[axis],):
            return lambda idx: p((idx[axis],))
    allowed = "one value" if axis is None else f"one value, one per index of axis {axis}"
    allowed += " or one per block" if block else ""
    raise LoweringError(
        f"{node.op} node {node.name!r}: {value!r} of shape {list(p.shape)} must be {allowed}, "
        f"for input shape {list(shape)}"
    )


def _quantize_linear(ctx: GroupContext, node: Node) -> list[Lazy]:
    """``round_saturate(float32(x) / scale, zero)``."""
    attrs = _attrs(node)
    x = ctx.get(node.inputs[0])
    dtype = ctx.type_of(node.outputs[0]).dtype
    scale = _param(ctx, node, 1, x.shape, attrs["axis"], attrs["block_size"])
    zero = _param(ctx, node, 2, x.shape, attrs["axis"], attrs["block_size"])
    assert scale is not None  # the registry requires it

    if is_narrow(dtype):
        return [_quantize_narrow(x, scale, zero, dtype, bool(attrs["saturate"]))]

    def fn(idx: Index) -> Any:
        v = x(idx).astype(F32) / scale(idx).astype(F32)
        return round_saturate(v, zero(idx).astype(F32) if zero else None, dtype)

    return [Lazy(x.shape, dtype, fn)]


def _quantize_narrow(
    x: Lazy, scale: Reader, zero: Reader | None, dtype: str, saturate: bool
) -> Lazy:
    """QuantizeLinear to a narrow type, as ONNX's reference: int4/uint4 like int8 (their own
    range); a float type rounds ``x / scale`` to nearest even (plus a float4e2m1 zero point;
    a float8 one must be 0 and is not added), saturating as Cast does."""

    def fn(idx: Index) -> Any:
        v = x(idx).astype(F32) / scale(idx).astype(F32)
        z = None if zero is None else narrow.decode(zero(idx), dtype).astype(F32)
        if dtype in narrow.INT4:
            low, high = (-8, 7) if narrow.INT4[dtype] else (0, 15)
            return narrow.encode(_round_clamp(v, z, low, high).astype("int32"), dtype)
        if z is not None and not dtype.startswith("float8"):
            v = v + z
        return narrow.encode(v, dtype, saturate and dtype.startswith("float8"))

    return Lazy(x.shape, storage_dtype(dtype), fn)


def _dequantize_linear(ctx: GroupContext, node: Node) -> list[Lazy]:
    """``float32(int32(x) - zero) * scale`` (the difference wraps in int32, as onnxruntime's)."""
    attrs = _attrs(node)
    x = ctx.get(node.inputs[0])
    dtype = ctx.type_of(node.outputs[0]).dtype
    scale = _param(ctx, node, 1, x.shape, attrs["axis"], attrs["block_size"])
    zero = _param(ctx, node, 2, x.shape, attrs["axis"], attrs["block_size"])
    assert scale is not None

    src = ctx.type_of(node.inputs[0]).dtype

    def fn(idx: Index) -> Any:
        if is_narrow(src) and src not in narrow.INT4:  # float8, float4e2m1: float32 values
            q = narrow.decode(x(idx), src)
            if zero is not None and not src.startswith("float8"):  # (float8's must be 0)
                q = q - narrow.decode(zero(idx), src)
            v = q * scale(idx).astype(F32)
            return v if dtype == F32 else v.astype(dtype)
        q = narrow.decode(x(idx), src) if is_narrow(src) else x(idx).astype(ACC)
        if zero is not None:
            q = q - (narrow.decode(zero(idx), src) if is_narrow(src) else zero(idx).astype(ACC))
        v = q.astype(F32) * scale(idx).astype(F32)
        return v if dtype == F32 else v.astype(dtype)

    return [Lazy(x.shape, dtype, fn)]


# ---- the shared integer part of QLinearConv and QLinearMatMul ----------------------------------


def _is_runtime(ctx: GroupContext, node: Node, position: int) -> bool:
    """Whether input `position` is present and computed at run time (not a constant)."""
    value = _input(node, position)
    return bool(value) and ctx.constant(value) is None


def _centered(ctx: GroupContext, node: Node, data: int, zero: int, axis: int | None) -> Lazy:
    """Input `data` minus its zero point (one value, or one per index of `axis`), as int32."""
    x = ctx.get(node.inputs[data])
    z = _param(ctx, node, zero, x.shape, axis)
    if z is None:
        return Lazy(x.shape, CENTERED, lambda idx: x(idx).astype(CENTERED))
    return Lazy(x.shape, CENTERED, lambda idx: x(idx).astype(CENTERED) - z(idx).astype(CENTERED))


def _centered_weights(w: np.ndarray, zero: np.ndarray | None, axis: int) -> np.ndarray:
    """`w` minus its zero point (one, or one per index of `axis`), as int16 (9 bits)."""
    centered = w.astype(np.int16)
    if zero is None:
        return centered
    z = zero.astype(np.int16)
    z = z.reshape(()) if z.size == 1 else z.reshape([-1 if k == axis else 1 for k in range(w.ndim)])
    return centered - z


def _requantizer(
    ctx: GroupContext, node: Node, axes: tuple[int | None, int]
) -> Callable[[Any, Index], Any]:
    """``(acc, output index) -> output``: MLAS's requantization of an int32 sum. The scales are
    inputs 1 (input), 4 (weight) and 6 (output), the output zero point input 7; `axes` are the
    output axes along which the input's and the weight's scale may vary (None: one value)."""
    out = ctx.type_of(node.outputs[0])
    _param(ctx, node, 6, out.shape, None)  # one value: refuses others before numpy sees them
    x_scale = ctx.constant(node.inputs[1])
    if (
        x_scale is not None
        and x_scale.size == 1
        and not any(_is_runtime(ctx, node, k) for k in (4, 6))
    ):
        scale = _constant_multiplier(ctx, node, axes[1])
    else:
        xs, ws, ys = (
            _param(ctx, node, k, out.shape, a)
            for k, a in zip((1, 4, 6), (*axes, None), strict=True)
        )
        assert xs is not None and ws is not None and ys is not None  # the registry requires them

        def scale(idx: Index) -> Any:  # float32(x_scale * w_scale) / y_scale, as numpy's
            return (xs(idx).astype(F32) * ws(idx).astype(F32)) / ys(idx).astype(F32)

    zero = _param(ctx, node, 7, out.shape, None)
    const = ctx.constant(_input(node, 7)) if zero is not None else None
    if const is not None and not const.any():
        zero = None
    return lambda acc, idx: round_saturate(
        acc.astype(F32) * scale(idx), zero(idx).astype(F32) if zero else None, out.dtype
    )


def _constant_multiplier(ctx: GroupContext, node: Node, axis: int) -> Reader:
    """The requantization multiplier of constant scales, computed once with numpy: an
    immediate, or a table by the output's `axis` (per-channel weight scales)."""
    product = np.asarray(ctx.constant(node.inputs[1]), np.float32) * np.asarray(
        ctx.constant(node.inputs[4]), np.float32
    )
    multiplier = requant_multiplier(product, ctx.constant(node.inputs[6])).reshape(-1)
    channels = ctx.type_of(node.outputs[0]).shape[axis]
    if multiplier.size not in (1, channels):
        raise LoweringError(
            f"{node.op} node {node.name!r}: the weight scale must be one value or one per output "
            f"channel ({channels}), not shape {list(ctx.type_of(node.inputs[4]).shape)}"
        )
    if multiplier.size == 1:
        m = te.const(float(multiplier[0]), F32)
        return lambda idx: m
    table = ctx.add_constant(f"{node.name}.multiplier", multiplier)
    return lambda idx: table[idx[axis]]


# ---- QLinearConv --------------------------------------------------------------------------------


#: input positions of (data, its zero point, weights, their zero point)
_QLINEAR_SLOTS = (0, 2, 3, 5)
_INTEGER_SLOTS = (0, 2, 1, 3)  # ConvInteger, MatMulInteger


def _qlinear_conv(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """QLinearConv: the centered convolution (`_centered_conv`), its bias added and requantized."""
    requant = _requantizer(ctx, node, (None, 1))
    bias = ctx.get(node.inputs[8]) if _input(node, 8) else None

    def finish(acc: Any, idx: Index) -> Any:
        return requant(acc + bias((idx[1],)).astype(ACC) if bias is not None else acc, idx)

    return _centered_conv(ctx, node, tail, _QLINEAR_SLOTS, finish)


def _conv_integer(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """ConvInteger: the centered convolution's int32 sums as they are."""
    return _centered_conv(ctx, node, tail, _INTEGER_SLOTS, lambda acc, idx: acc)


def _centered_conv(
    ctx: GroupContext,
    node: Node,
    tail: Tail,
    slots: tuple[int, int, int, int],
    finish: Callable[[Any, Index], Any],
) -> Result:
    """topi's NCHW[x]c conv (2-D or 3-D) on the centered input with the centered weights packed
    once (ungrouped, constant weights and weight zero point); otherwise a direct reduction, row
    by row (grouped and depthwise convolutions among them). A 1-D one as a 2-D one of height 1
    (`ConvView`). `finish(int32 sum, output index)` makes the output."""
    data, data_zero, weights, weights_zero = slots
    view = conv_view(ctx, node, weight=weights)
    x = _centered(ctx, node, data, data_zero, None)
    x = reshape_lazy(x, view.x_shape) if view.lifted else x

    def viewed(acc: Any, idx: Index) -> Any:
        return finish(acc, view.index(idx))

    tail = view.tail(tail)
    weight = ctx.constant(node.inputs[weights])
    if weight is None or _is_runtime(ctx, node, weights_zero):
        w_lazy = _centered(ctx, node, weights, weights_zero, 0)
        w_lazy = reshape_lazy(w_lazy, view.w_shape) if view.lifted else w_lazy
        return _conv_direct(ctx, x, lambda *i: w_lazy(i), viewed, tail, view)
    zero = _constant(ctx, node, weights_zero, "the weight zero point")
    w = _centered_weights(np.asarray(weight), zero, 0).reshape(view.w_shape)
    if view.group == 1:
        kernel = _dot_kernel(ctx, w)
        if kernel != "centered":
            raw = ctx.get(node.inputs[data])
            raw = reshape_lazy(raw, view.x_shape) if view.lifted else raw
            inp = _word_input(ctx, node, data, data_zero, raw, None)
            return conv_words(ctx, node.name, inp, w, viewed, tail, view, kernel)
        return _conv_topi(ctx, node, x, w, viewed, tail, view)
    table = ctx.add_constant(f"{node.name}.w_centered", w)
    return _conv_direct(ctx, x, lambda *i: table[i], viewed, tail, view)


def _conv_topi(
    ctx: GroupContext, node: Node, x: Lazy, w: np.ndarray, finish: Any, tail: Tail, view: ConvView
) -> Result:
    stride, dil = view.stride, view.dilation
    if isinstance(view.padding, int):
        data, pad = _materialize(ctx, x), view.padding
    else:
        data, pad = pad_image(x, view.begin, view.end, te.const(0, CENTERED)), 0
        ctx.inline.append(data)
    config = conv_config(data, w.shape, view.out_shape, stride, pad, dil)
    config = replace(config, pack_data=True)  # center the input once, while packing it
    ic_bn, oc_bn = kernel_blocks(w.shape[1], w.shape[0], config)
    packed = ctx.add_constant(f"{node.name}.w.nchwc{ic_bn}x{oc_bn}", pack_kernel(w, ic_bn, oc_bn))

    def epilogue(acc: Any, *idx: Any) -> Any:
        return tail.epilogue(finish(acc, idx), tuple(idx))

    op = conv2d_nchwc(data, packed, stride, pad, dil, None, epilogue, config, ACC)
    return schedule_conv2d_nchwc(op, config), [op.out]


def _dot_kernel(ctx: GroupContext, w: np.ndarray) -> str:
    """`int8_dot.int8_kernel` of the target, for the centered weights `w`: pairs where quads
    would need them as signed bytes and they do not all fit."""
    kernel = int8_kernel(ctx.target)
    if kernel == "quads" and (w.min() < -128 or w.max() > 127):
        return "pairs"
    return kernel


def _word_input(
    ctx: GroupContext, node: Node, data: int, zero: int, x: Lazy, axis: int | None
) -> WordInput:
    """Input `data` (`x`: it, or its view) and its zero point at `zero` (one value, or one per
    index of `axis`) as the dot-product kernels take them."""
    z = _param(ctx, node, zero, x.shape, axis)
    const = ctx.constant(_input(node, zero)) if z is not None else None
    signed = ctx.type_of(node.inputs[data]).dtype == "int8"
    return WordInput(x, z, None if const is None else np.asarray(const), signed)


def _materialize(ctx: GroupContext, lazy: Lazy) -> Tensor:
    t = te.compute(lazy.shape, lambda *i: lazy(i), name="centered")
    ctx.inline.append(t)
    return t


def _conv_direct(
    ctx: GroupContext, x: Lazy, read_w: Any, finish: Any, tail: Tail, view: ConvView
) -> Result:
    """The (grouped) convolution as one reduction over any number of spatial axes; `read_w(k,
    c, *taps)` reads the centered weights."""
    shape, pads, strides, dil = view.out_shape, view.begin, view.strides, view.dil
    zero = te.const(0, CENTERED)
    read, extra = window_source(x, shape, view.w_shape[2:], pads, strides, dil, zero)
    axes, taps = direct_conv_taps(view.w_shape, view.group, pads, strides, dil)

    def body(n: Any, kk: Any, *pos: Any) -> Any:
        c, at, ci, tap = taps(kk, *pos)
        product = read(n, c, *at).astype(ACC) * read_w(kk, ci, *tap).astype(ACC)
        return te.sum(product, axis=axes)

    red = te.compute(shape, body, name="qlinearconv")
    return reduce_kernel(red, tail, finish, extra)


# ---- QLinearMatMul ------------------------------------------------------------------------------


def _qlinear_matmul(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """QLinearMatMul: the centered product (`_centered_matmul`) requantized."""
    return _centered_matmul(ctx, node, tail, _QLINEAR_SLOTS, _requantizer(ctx, node, (-2, -1)))


def _matmul_integer(ctx: GroupContext, node: Node, tail: Tail) -> Result:
    """MatMulInteger: the centered product's int32 sums as they are."""
    return _centered_matmul(ctx, node, tail, _INTEGER_SLOTS, lambda acc, idx: acc)


def _centered_matmul(
    ctx: GroupContext,
    node: Node,
    tail: Tail,
    slots: tuple[int, int, int, int],
    finish: Callable[[Any, Index], Any],
) -> Result:
    """topi's dense (leading dims of `a` folded into rows) with the centered `b` packed into its
    panels once, when `b` and its zero point are constants and `b` is 2-D; otherwise a direct
    reduction with numpy's broadcasting of the batch dims. `a`'s parameters may be per row, `b`'s
    per column. `finish(int32 sum, output index)` makes the output."""
    a_pos, a_zero, b_pos, b_zero_pos = slots
    a_ty, b_ty = ctx.type_of(node.inputs[a_pos]), ctx.type_of(node.inputs[b_pos])
    if len(a_ty.shape) < 2 or len(b_ty.shape) < 2:
        raise LoweringError(
            f"{node.op} operands must be at least 2-D on the CPU back-end (not built yet for "
            f"1-D), not {list(a_ty.shape)} x {list(b_ty.shape)} (node {node.name!r})"
        )
    a = _centered(ctx, node, a_pos, a_zero, -2)
    b = ctx.constant(node.inputs[b_pos])
    if b is None or len(b_ty.shape) > 2 or _is_runtime(ctx, node, b_zero_pos):
        b_lazy = _centered(ctx, node, b_pos, b_zero_pos, -1)
        return _matmul_direct(ctx, node, a, b_lazy, finish, tail)
    b_zero = _constant(ctx, node, b_zero_pos, "the weight zero point")
    n = b_ty.shape[-1]
    if b_zero is not None and b_zero.size not in (1, n):
        raise LoweringError(
            f"{node.op} node {node.name!r}: b's zero point must be one value or one per "
            f"column ({n}), not shape {list(b_zero.shape)}"
        )
    lead, k = a_ty.shape[:-1], a_ty.shape[-1]
    rows = int(np.prod(lead))
    centered = _centered_weights(np.asarray(b), b_zero, 1)
    kernel = _dot_kernel(ctx, centered)
    if kernel != "centered":
        raw = ctx.get(node.inputs[a_pos])
        inp = _word_input(ctx, node, a_pos, a_zero, raw, -2)
        return matmul_words(ctx, node.name, inp, centered, finish, tail, kernel)
    data = _materialize(ctx, reshape_lazy(a, (rows, k)))

    def epilogue(acc: Any, i: Any, j: Any) -> Any:
        idx = (*unravel(i, lead), j) if len(lead) > 1 else (i, j)
        return tail.epilogue(finish(acc, idx), idx)

    name = f"{node.name}.b_centered"
    return packed_dense(ctx, data, name, "KN", epilogue, values=centered)


def _matmul_direct(
    ctx: GroupContext, node: Node, a: Lazy, b: Lazy, requant: Any, tail: Tail
) -> Result:
    shape = ctx.type_of(node.outputs[0]).shape
    rk = te.reduce_axis((0, a.shape[-1]), "k")

    def body(*i: Any) -> Any:
        lhs = a((*batch_index(a, i), i[-2], rk)).astype(ACC)
        return te.sum(lhs * b((*batch_index(b, i), rk, i[-1])).astype(ACC), axis=rk)

    red = te.compute(shape, body, name="qlinearmatmul")
    return reduce_kernel(red, tail, requant)


ELEMENTWISE: dict[str, Rule] = {
    "QuantizeLinear": _quantize_linear,
    "DequantizeLinear": _dequantize_linear,
}

ANCHORS: dict[str, AnchorRule] = {
    "ConvInteger": _conv_integer,
    "MatMulInteger": _matmul_integer,
    "QLinearConv": _qlinear_conv,
    "QLinearMatMul": _qlinear_matmul,
}

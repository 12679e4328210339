"""Quantized ops: QuantizeLinear, DequantizeLinear, QLinearConv, QLinearMatMul, and those of
onnxruntime's dynamic quantization: DynamicQuantizeLinear, ConvInteger, MatMulInteger.

The float arithmetic is onnxruntime's (MLAS), in float32, so results equal its bit for bit,
ties included: QuantizeLinear divides in float32 (``x / scale``), clamps to the output range
shifted by the zero point, rounds half to even and adds the zero point (NaN becomes the type's
minimum); QLinearConv/QLinearMatMul sum exactly in int32 (bias added with wrapping), convert the
sum to float32, multiply it in float32 by ``float32(x_scale * w_scale) / y_scale`` and round the
same way. Integer sums are computed in float64 (exact below 2**53)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ..ir import GraphBuilder, Node, TensorType, check_dtype
from ..registry import Pattern, register
from .elemwise import _cast
from .emit import Emitter
from .nn import _CONV_ATTRS, _conv_type, conv

#: the narrow types QuantizeLinear may produce and DequantizeLinear read (runtime/dtypes.py)
QUANT_NARROW = (
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn",
    "int4", "uint4",
)  # fmt: skip
_QUANT_ATTRS = {"axis": 1, "block_size": 0, "saturate": 1, "output_dtype": None}


def expand_param(p: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point broadcast against a tensor: scalar, per-axis (1-D) or blocked."""
    p = np.asarray(p)
    if p.ndim == 0 or p.size == 1 and not block_size:
        return p.reshape(())
    axis %= len(shape)
    if block_size:
        return np.repeat(p, block_size, axis=axis)[tuple(slice(0, d) for d in shape)]
    if p.ndim != 1 or p.shape[0] != shape[axis]:
        raise ValueError(f"per-axis parameter must have {shape[axis]} values, not shape {p.shape}")
    return p.reshape([-1 if i == axis else 1 for i in range(len(shape))])


def round_saturate(values: np.ndarray, zero: Any, dtype: str) -> np.ndarray:
    """``rint(clip(values, min - zero, max - zero)) + zero`` as `dtype`, in the values' float
    type (MLAS's order: clamp, round half to even, add the zero point); NaN gives the minimum."""
    info = ml_dtypes.iinfo(dtype)  # (int4 and uint4 too)
    z = np.asarray(zero, values.dtype)
    clamped = np.clip(values, info.min - z, info.max - z)
    out = np.where(np.isnan(values), info.min, np.rint(clamped) + z)
    return out.astype(dtype)


def _quant_dtype(attrs: dict[str, Any], types: list) -> str:
    if len(types) > 2 and types[2] is not None:
        return types[2].dtype
    return check_dtype(attrs.get("output_dtype") or "uint8", "QuantizeLinear.output_dtype")


def _quantize_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    dtype = _quant_dtype(attrs, types)
    if np.dtype(dtype).kind not in "iu" and dtype not in QUANT_NARROW:
        raise ValueError(
            f"QuantizeLinear output dtype must be an integer, float8 or float4e2m1 type, "
            f"not {dtype!r}"
        )
    return [TensorType(types[0].shape, dtype)]


def quantize_linear(
    attrs: dict[str, Any], x: np.ndarray, scale: np.ndarray, zero: Any = None
) -> np.ndarray:
    dtype = str(zero.dtype) if zero is not None else attrs.get("output_dtype") or "uint8"
    axis, block = attrs["axis"], attrs["block_size"]
    s = expand_param(scale, x.shape, axis, block).astype(np.float32)
    z = 0 if zero is None else expand_param(zero, x.shape, axis, block).astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        y = x.astype(np.float32) / s
        if dtype in QUANT_NARROW and dtype not in ("int4", "uint4"):
            # ONNX's reference: a float8 zero point must be 0 and is not added; float4's is
            if zero is not None and not dtype.startswith("float8"):
                y = y + z
            return _cast({"to": dtype, "saturate": attrs["saturate"]}, y)
        return round_saturate(y, z, dtype)


def _dequantize_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    return [TensorType(types[0].shape, types[1].dtype)]


def dequantize_linear(
    attrs: dict[str, Any], x: np.ndarray, scale: np.ndarray, zero: Any = None
) -> np.ndarray:
    axis, block = attrs["axis"], attrs["block_size"]
    s = expand_param(scale, x.shape, axis, block).astype(np.float32)
    if str(x.dtype).startswith("float"):  # float8, float4e2m1 (a float8 zero point is 0)
        z = 0 if zero is None else expand_param(zero, x.shape, axis, block).astype(np.float32)
        centered = x.astype(np.float32) - (0 if str(x.dtype).startswith("float8") else z)
        return (centered * s).astype(scale.dtype)
    z = 0 if zero is None else expand_param(zero, x.shape, axis, block).astype(np.int64)
    centered = (x.astype(np.int64) - z).astype(np.int32)  # onnxruntime's int32 difference
    return (centered.astype(np.float32) * s).astype(scale.dtype)


register(
    "QuantizeLinear",
    Pattern.ELEMWISE,
    _quantize_type,
    quantize_linear,
    inputs=(2, 3),
    attrs=_QUANT_ATTRS,
)
register(
    "DequantizeLinear",
    Pattern.ELEMWISE,
    _dequantize_type,
    dequantize_linear,
    inputs=(2, 3),
    attrs={k: v for k, v in _QUANT_ATTRS.items() if k != "saturate"},
)


def _centered(x: np.ndarray, zero: Any, axis: int = 0) -> np.ndarray:
    values = x.astype(np.float64)
    if zero is None:
        return values
    return values - expand_param(zero, x.shape, axis, 0)


def requant_multiplier(scale: np.ndarray, y_scale: Any) -> np.ndarray:
    """``scale / y_scale`` in float32, where `scale` is the float32 product of the input scales
    (onnxruntime's order of operations)."""
    return (np.asarray(scale, np.float32) / np.asarray(y_scale, np.float32).reshape(())).astype(
        np.float32
    )


def _requantize(acc: np.ndarray, scale: np.ndarray, y_scale: Any, y_zero: Any) -> np.ndarray:
    wrapped = acc.astype(np.int64).astype(np.int32)  # the int32 sum, wrapped as in int32
    values = wrapped.astype(np.float32) * requant_multiplier(scale, y_scale)
    dtype = str(y_zero.dtype) if y_zero is not None else "uint8"
    return round_saturate(values, 0 if y_zero is None else y_zero, dtype)


def _qconv_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    (out,) = _conv_type(attrs, [types[0], types[3]], [])
    return [TensorType(out.shape, types[7].dtype if types[7] is not None else types[0].dtype)]


def qlinear_conv(
    attrs: dict[str, Any], x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias=None
):
    acc = conv(attrs, _centered(x, x_zero), _centered(w, w_zero), None)
    if bias is not None:
        acc = acc + bias.astype(np.float64).reshape(1, -1, *(1,) * (x.ndim - 2))
    scale = np.asarray(x_scale, np.float32) * np.asarray(w_scale, np.float32)
    scale = scale.reshape(1, -1, *(1,) * (x.ndim - 2)) if scale.ndim == 1 else scale
    return _requantize(acc, scale, y_scale, y_zero)


register(
    "QLinearConv",
    Pattern.OPAQUE,
    _qconv_type,
    qlinear_conv,
    inputs=(8, 9),
    attrs=_CONV_ATTRS,
)


def _qmatmul_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    from .nn import matmul_shape

    return [TensorType(matmul_shape(types[0].shape, types[3].shape), types[7].dtype)]


def qlinear_matmul(attrs: dict[str, Any], a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero):
    # a's parameters may be per row (a column vector), b's per column (a row vector)
    acc = np.matmul(a.astype(np.float64) - _rows(a_zero), b.astype(np.float64) - _cols(b_zero))
    scale = _rows(a_scale).astype(np.float32) * _cols(b_scale).astype(np.float32)
    return _requantize(acc, scale, y_scale, y_zero)


def _rows(p: Any) -> np.ndarray:
    p = np.asarray(0.0 if p is None else p, np.float64)
    return p.reshape(-1, 1) if p.size > 1 else p.reshape(())


def _cols(p: Any) -> np.ndarray:
    p = np.asarray(0.0 if p is None else p, np.float64)
    return p.reshape(-1) if p.size > 1 else p.reshape(())


register("QLinearMatMul", Pattern.OPAQUE, _qmatmul_type, qlinear_matmul, inputs=(8, 8))


# ---- onnxruntime's dynamic quantization: DynamicQuantizeLinear, ConvInteger, MatMulInteger ------


def _wrapped_int32(acc: np.ndarray) -> np.ndarray:
    return acc.astype(np.int64).astype(np.int32)  # the exact sum, wrapped as in int32


def _integer_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    (out,) = _conv_type(attrs, types[:2], [])
    return [TensorType(out.shape, "int32")]


def conv_integer(attrs: dict[str, Any], x, w, x_zero=None, w_zero=None):  # noqa: ANN001, ANN201
    """The int32 convolution of the inputs minus their zero points (the weights' may be one
    per output channel)."""
    return _wrapped_int32(conv(attrs, _centered(x, x_zero), _centered(w, w_zero), None))


def _matmul_integer_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    from .nn import matmul_shape

    return [TensorType(matmul_shape(types[0].shape, types[1].shape), "int32")]


def matmul_integer(attrs: dict[str, Any], a, b, a_zero=None, b_zero=None):  # noqa: ANN001, ANN201
    """`(a - a_zero) @ (b - b_zero)` in int32; `a`'s zero point may be per row, `b`'s per
    column."""
    acc = np.matmul(a.astype(np.float64) - _rows(a_zero), b.astype(np.float64) - _cols(b_zero))
    return _wrapped_int32(acc)


def _dynamic_quantize_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    return [TensorType(types[0].shape, "uint8"), TensorType((), "float32"), TensorType((), "uint8")]


def dynamic_quantize_linear(attrs: dict[str, Any], x: np.ndarray) -> tuple[np.ndarray, ...]:
    """uint8 quantization with the scale and zero point that map [min(x, 0), max(x, 0)] onto
    [0, 255]: ``scale = (max - min) / 255`` (1 where that is 0, as onnxruntime), zero point
    ``round(saturate(0 - min / scale))``, then QuantizeLinear."""
    x = x.astype(np.float32)
    low = np.minimum(x.min(initial=np.float32(0)), np.float32(0))
    high = np.maximum(x.max(initial=np.float32(0)), np.float32(0))
    scale = np.float32((high - low) / np.float32(255))
    scale = np.float32(1) if scale == 0 else scale
    with np.errstate(invalid="ignore", over="ignore"):
        zero = round_saturate(np.float32(0) - low / scale, 0, "uint8")
        y = round_saturate(x / scale, zero.astype(np.float32), "uint8")
    return y, np.asarray(scale, np.float32), np.asarray(zero, np.uint8)


def expand_dynamic_quantize(b: GraphBuilder, node: Node) -> None:
    """DynamicQuantizeLinear as reductions, scalar arithmetic and a QuantizeLinear."""
    e = Emitter(b, node)
    (x,) = node.inputs
    zero_f, one, levels = (e.const(v, hint, "float32") for v, hint in
                           ((0.0, "zero"), (1.0, "one"), (255.0, "levels")))  # fmt: skip
    low = e.add("Min", [e.add("ReduceMin", [x], {"keepdims": 0}), zero_f])
    high = e.add("Max", [e.add("ReduceMax", [x], {"keepdims": 0}), zero_f])
    span = e.add("Div", [e.add("Sub", [high, low]), levels])
    is_zero = e.add("Equal", [span, zero_f])
    y_out, scale_out, zero_out = node.outputs
    scale = e.add("Where", [is_zero, one, span], outputs=[scale_out or b.fresh("scale")])
    shifted = e.add("Sub", [zero_f, e.add("Div", [low, scale])])
    clipped = e.add("Clip", [shifted, zero_f, levels])
    zero = e.add("Cast", [e.add("Round", [clipped])], {"to": "uint8"},
                 outputs=[zero_out or b.fresh("zero_point")])  # fmt: skip
    e.add("QuantizeLinear", [x, scale, zero], outputs=[y_out or b.fresh("y")])


register("ConvInteger", Pattern.OPAQUE, _integer_type, conv_integer, inputs=(2, 4),
         attrs=_CONV_ATTRS)  # fmt: skip
register("MatMulInteger", Pattern.OPAQUE, _matmul_integer_type, matmul_integer, inputs=(2, 4))
register("DynamicQuantizeLinear", Pattern.OPAQUE, _dynamic_quantize_type,
         dynamic_quantize_linear, outputs=(3, 3), expand=expand_dynamic_quantize)  # fmt: skip

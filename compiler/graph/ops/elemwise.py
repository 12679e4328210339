"""Elementwise and broadcasting ops: activations, arithmetic, rounding, comparisons, logic,
integer bitwise ops and shifts, Clip, Cast, Where, Identity."""

from __future__ import annotations

import functools
import math
from typing import Any

import ml_dtypes
import numpy as np

from ..ir import TensorType, broadcast_shapes, check_dtype
from ..registry import REQUIRED, Pattern, register

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """Elementwise error function (numpy has none), computed in double precision."""
    return np.asarray(_erf(np.asarray(x, np.float64)), np.float64)  # (a 0-d one gives a float)


def same_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    return [types[0]]


def broadcast_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    shape = broadcast_shapes(*(t.shape for t in types if t is not None))
    return [TensorType(shape, types[0].dtype)]


def _float_unary(fn: Any) -> Any:
    def compute(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(attrs, x.astype(np.float64))).astype(x.dtype)

    return compute


def _sigmoid(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _gelu(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    if attrs["approximate"] == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if attrs["approximate"] != "none":
        raise ValueError(f"Gelu approximate must be 'none' or 'tanh', not {attrs['approximate']!r}")
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _hard_swish(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)


def _leaky_relu(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, x, attrs["alpha"] * x)


def _softplus(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _elu(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, x, attrs["alpha"] * np.expm1(x))


def _selu(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return attrs["gamma"] * np.where(x > 0, x, attrs["alpha"] * np.expm1(x))


def _celu(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    alpha = attrs["alpha"]
    return np.maximum(x, 0.0) + np.minimum(0.0, alpha * np.expm1(x / alpha))


_UNARY_FLOAT = {
    "Sigmoid": (_sigmoid, {}),
    "Softplus": (_softplus, {}),
    "Softsign": (lambda a, x: x / (1.0 + np.abs(x)), {}),
    "Mish": (lambda a, x: x * np.tanh(_softplus(a, x)), {}),
    "Elu": (_elu, {"alpha": 1.0}),
    "Selu": (_selu, {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "Celu": (_celu, {"alpha": 1.0}),
    "ThresholdedRelu": (lambda a, x: np.where(x > a["alpha"], x, 0.0), {"alpha": 1.0}),
    **{
        name: (lambda a, x, fn=fn: fn(x), {})
        for name, fn in (
            ("Sin", np.sin),
            ("Cos", np.cos),
            ("Tan", np.tan),
            ("Asin", np.arcsin),
            ("Acos", np.arccos),
            ("Atan", np.arctan),
            ("Sinh", np.sinh),
            ("Cosh", np.cosh),
            ("Asinh", np.arcsinh),
            ("Acosh", np.arccosh),
            ("Atanh", np.arctanh),
        )
    },  # fmt: skip
    "Tanh": (lambda a, x: np.tanh(x), {}),
    "Erf": (lambda a, x: erf(x), {}),
    "Gelu": (_gelu, {"approximate": "none"}),
    "HardSwish": (_hard_swish, {}),
    "HardSigmoid": (
        lambda a, x: np.clip(a["alpha"] * x + a["beta"], 0.0, 1.0),
        {"alpha": 0.2, "beta": 0.5},
    ),
    "LeakyRelu": (_leaky_relu, {"alpha": 0.01}),
    "Sqrt": (lambda a, x: np.sqrt(x), {}),
    "Exp": (lambda a, x: np.exp(x), {}),
    "Log": (lambda a, x: np.log(x), {}),
    "Reciprocal": (lambda a, x: 1.0 / x, {}),
    "Floor": (lambda a, x: np.floor(x), {}),
    "Ceil": (lambda a, x: np.ceil(x), {}),
    "Round": (lambda a, x: np.round(x), {}),  # half to even, as ONNX
}


def _celu_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    if attrs["alpha"] == 0:  # onnxruntime gives NaN for every x >= 0
        raise ValueError("Celu attribute alpha must be non-zero (x / alpha), not 0.0")
    return same_type(attrs, types, consts)


for _name, (_fn, _attrs) in _UNARY_FLOAT.items():
    _infer = _celu_type if _name == "Celu" else same_type
    register(_name, Pattern.ELEMWISE, _infer, _float_unary(_fn), attrs=_attrs)

register("Relu", Pattern.ELEMWISE, same_type, lambda a, x: np.maximum(x, np.zeros((), x.dtype)))


def _shrink(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    lambd, bias = attrs["lambd"], attrs["bias"]
    with np.errstate(all="ignore"):
        wide = x.astype(np.float64)
        out = np.where(wide < -lambd, wide + bias, np.where(wide > lambd, wide - bias, 0.0))
    return out.astype(x.dtype)


register("Shrink", Pattern.ELEMWISE, same_type, _shrink, attrs={"bias": 0.0, "lambd": 0.5})


def _bool_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    return [TensorType(types[0].shape, "bool")]


def _is_inf(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return (np.isposinf(x) & bool(attrs["detect_positive"])) | (
        np.isneginf(x) & bool(attrs["detect_negative"])
    )


register("IsNaN", Pattern.ELEMWISE, _bool_type, lambda a, x: np.isnan(x))
register("IsInf", Pattern.ELEMWISE, _bool_type, _is_inf,
         attrs={"detect_negative": 1, "detect_positive": 1})  # fmt: skip
register("Identity", Pattern.ELEMWISE, same_type, lambda a, x: x.copy())
register("Neg", Pattern.ELEMWISE, same_type, lambda a, x: np.negative(x))
register("Abs", Pattern.ELEMWISE, same_type, lambda a, x: np.abs(x))
register("Sign", Pattern.ELEMWISE, same_type, lambda a, x: np.sign(x).astype(x.dtype))
register("Not", Pattern.ELEMWISE, same_type, lambda a, x: np.logical_not(x))


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    quotient = np.floor_divide(a, b)
    # ONNX (C) integer division truncates toward zero; numpy floors.
    fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return quotient + fix.astype(quotient.dtype)


def _div(attrs: dict[str, Any], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        with np.errstate(all="ignore"):
            return _int_div(a, b).astype(a.dtype)
    return np.divide(a, b).astype(a.dtype)


def _pow(attrs: dict[str, Any], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if a.dtype == np.float32 and b.dtype.kind == "f":
            return np.power(a, b.astype(np.float32))
        return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)


def _binary(fn: Any) -> Any:
    def compute(attrs: dict[str, Any], a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(a, b).astype(a.dtype)

    return compute


for _name, _fn in {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}.items():
    register(_name, Pattern.BROADCAST, broadcast_type, _binary(_fn), inputs=(2, 2))
register("Div", Pattern.BROADCAST, broadcast_type, _div, inputs=(2, 2))
register("Pow", Pattern.BROADCAST, broadcast_type, _pow, inputs=(2, 2))


def _mod(attrs: dict[str, Any], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """fmod=1: C's remainder (the dividend's sign); fmod=0: the divisor's sign (numpy's mod).
    An integer remainder by zero is 0, as numpy gives."""
    if attrs["fmod"] not in (0, 1):
        raise ValueError(f"Mod fmod must be 0 or 1, not {attrs['fmod']!r}")
    with np.errstate(all="ignore"):
        return (np.fmod if attrs["fmod"] else np.mod)(a, b).astype(a.dtype)


register("Mod", Pattern.BROADCAST, broadcast_type, _mod, inputs=(2, 2), attrs={"fmod": 0})


def bool_broadcast_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    return [TensorType(broadcast_shapes(*(t.shape for t in types)), "bool")]


_COMPARE = {
    "Equal": np.equal,
    "Less": np.less,
    "Greater": np.greater,
    "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal,
}
_LOGIC = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}
for _name, _fn in {**_COMPARE, **_LOGIC}.items():
    register(
        _name,
        Pattern.BROADCAST,
        bool_broadcast_type,
        lambda a, x, y, fn=_fn: fn(x, y),
        inputs=(2, 2),
    )


def _integer_operands(op: str, types: list) -> None:
    for t in types:
        if t is not None and not t.dtype.startswith(("int", "uint")):
            raise ValueError(f"{op} inputs must be integers, not {t.dtype}")


def _bitwise_type(op: str) -> Any:
    def infer(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
        _integer_operands(op, types)
        return broadcast_type(attrs, types, consts)

    return infer


# ONNX's integer bitwise ops (opset 18: every signed and unsigned integer type, no bool; And, Or,
# Xor and Not are the bool ones)
for _name, _fn in {
    "BitwiseAnd": np.bitwise_and,
    "BitwiseOr": np.bitwise_or,
    "BitwiseXor": np.bitwise_xor,
}.items():
    register(_name, Pattern.BROADCAST, _bitwise_type(_name), _binary(_fn), inputs=(2, 2))
register("BitwiseNot", Pattern.ELEMWISE, _bitwise_type("BitwiseNot"), lambda a, x: np.invert(x))


def _bitshift_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    if attrs["direction"] not in ("LEFT", "RIGHT"):
        raise ValueError(f"BitShift direction must be LEFT or RIGHT, not {attrs['direction']!r}")
    return _bitwise_type("BitShift")(attrs, types, consts)


def _bitshift(attrs: dict[str, Any], x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """numpy's shifts, which define every amount as ONNX's BitShift-28 does (and onnxruntime
    gives): Y read as unsigned, one of the width or more shifts every bit out (0, or -1 for a
    right shift of a negative X). BitShift-11 has unsigned types only; 28 adds the signed."""
    shift = np.left_shift if attrs["direction"] == "LEFT" else np.right_shift
    return shift(x, y).astype(x.dtype)


register("BitShift", Pattern.BROADCAST, _bitshift_type, _bitshift, inputs=(2, 2),
         attrs={"direction": REQUIRED})  # fmt: skip


def _variadic(fn: Any) -> Any:
    def compute(attrs: dict[str, Any], *xs: np.ndarray) -> np.ndarray:
        return functools.reduce(fn, xs).astype(xs[0].dtype)

    return compute


register("Max", Pattern.BROADCAST, broadcast_type, _variadic(np.maximum), inputs=(1, 1 << 16))
register("Sum", Pattern.BROADCAST, broadcast_type, _variadic(np.add), inputs=(1, 1 << 16))


def _mean(attrs: dict[str, Any], *xs: np.ndarray) -> np.ndarray:
    return (functools.reduce(np.add, xs) / np.asarray(len(xs), xs[0].dtype)).astype(xs[0].dtype)


register("Mean", Pattern.BROADCAST, broadcast_type, _mean, inputs=(1, 1 << 16))


def _prelu(attrs: dict[str, Any], x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.where(x < 0, x * slope, x).astype(x.dtype)


register("PRelu", Pattern.BROADCAST, broadcast_type, _prelu, inputs=(2, 2))
register("Min", Pattern.BROADCAST, broadcast_type, _variadic(np.minimum), inputs=(1, 1 << 16))


def _clip(attrs: dict[str, Any], x: np.ndarray, lo: Any = None, hi: Any = None) -> np.ndarray:
    if x.dtype.kind == "f":  # absent bounds: the lowest and largest finite values (ONNX)
        info = np.finfo(x.dtype)
        lo, hi = (info.min if lo is None else lo), (info.max if hi is None else hi)
    if lo is not None:
        x = np.maximum(x, np.asarray(lo, x.dtype))
    if hi is not None:
        x = np.minimum(x, np.asarray(hi, x.dtype))
    return np.array(x, x.dtype)


register("Clip", Pattern.ELEMWISE, same_type, _clip, inputs=(1, 3))


def _cast_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    if attrs.get("round_mode", "up") not in ("up", "down", "nearest"):
        raise ValueError(
            f"Cast round_mode must be up, down or nearest, not {attrs['round_mode']!r}"
        )
    return [TensorType(types[0].shape, check_dtype(attrs["to"], "Cast.to"))]


def _cast(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """numpy's (ml_dtypes') `astype`; to a float8 type with `saturate` (Cast-19, default on),
    values past the type's range (infinities too) become its largest finite value of their
    sign, as in ONNX's reference (`numpy_helper.saturate_cast`)."""
    to = attrs["to"]
    if to == "float8_e8m0fnu":
        return _to_e8m0(x, bool(attrs.get("saturate", 1)), attrs.get("round_mode", "up"))
    with np.errstate(all="ignore"):
        if to.startswith("float8") and attrs.get("saturate", 1):
            info = ml_dtypes.finfo(to)
            x = np.clip(x.astype(np.float32), np.float32(info.min), np.float32(info.max))
        return x.astype(to)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """Cast-24 to float8e8m0: |x|'s float32 exponent field, rounded by the mantissa per
    `round_mode` (see `te.narrow.encode_e8m0`); NaN and inf give 0xFF."""
    with np.errstate(all="ignore"):
        bits = np.asarray(x).astype(np.float32).view(np.uint32)
    exp = (bits >> 23) & 0xFF
    if round_mode == "up":
        bump = (bits & 0x7FFFFF) != 0
    elif round_mode == "nearest":
        bump = ((bits & 0x400000) != 0) & (((bits & 0x3FFFFF) != 0) | (exp > 0))
    elif round_mode == "down":
        bump = np.zeros(exp.shape, bool)
    else:
        raise ValueError(f"Cast round_mode must be up, down or nearest, not {round_mode!r}")
    if saturate:
        bump &= exp != 0xFE
    code = np.where(exp == 0xFF, exp, exp + bump)
    return code.astype(np.uint8).view("float8_e8m0fnu")


_CAST_ATTRS = {"saturate": 1, "round_mode": "up"}
register("Cast", Pattern.ELEMWISE, _cast_type, _cast, attrs={"to": REQUIRED, **_CAST_ATTRS})
register(
    "CastLike",
    Pattern.ELEMWISE,
    lambda a, t, c: _cast_type({**a, "to": t[1].dtype}, t, c),
    lambda a, x, like: _cast({**a, "to": str(like.dtype)}, x),
    inputs=(2, 2),
    attrs=_CAST_ATTRS,
)


def _where_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    shape = broadcast_shapes(*(t.shape for t in types))
    return [TensorType(shape, types[1].dtype)]


register(
    "Where",
    Pattern.BROADCAST,
    _where_type,
    lambda a, c, x, y: np.where(c, x, y).astype(x.dtype),
    inputs=(3, 3),
)

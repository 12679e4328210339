"""Math intrinsics on float expressions (`exp`, `log`, `sqrt`, `tanh`, `erf`, `pow`, ...) and
integer shifts (`shift_left`, `shift_right`), dot products of packed integers (`dot_i16x2`,
`dot_u8i8x4`)."""

from __future__ import annotations

from typing import Any

from .expr import Expr, abs_expr, call_dot, call_math, call_reinterpret, call_shift


def exp(x: Any) -> Expr:
    return call_math("exp", x)


def exp2(x: Any) -> Expr:
    return call_math("exp2", x)


def log(x: Any) -> Expr:
    return call_math("log", x)


def log2(x: Any) -> Expr:
    return call_math("log2", x)


def log1p(x: Any) -> Expr:
    return call_math("log1p", x)


def sqrt(x: Any) -> Expr:
    return call_math("sqrt", x)


def rsqrt(x: Any) -> Expr:
    return call_math("rsqrt", x)


def tanh(x: Any) -> Expr:
    return call_math("tanh", x)


def sigmoid(x: Any) -> Expr:
    return call_math("sigmoid", x)


def erf(x: Any) -> Expr:
    return call_math("erf", x)


def sin(x: Any) -> Expr:
    return call_math("sin", x)


def cos(x: Any) -> Expr:
    return call_math("cos", x)


def tan(x: Any) -> Expr:
    return call_math("tan", x)


def asin(x: Any) -> Expr:
    return call_math("asin", x)


def acos(x: Any) -> Expr:
    return call_math("acos", x)


def atan(x: Any) -> Expr:
    return call_math("atan", x)


def sinh(x: Any) -> Expr:
    return call_math("sinh", x)


def cosh(x: Any) -> Expr:
    return call_math("cosh", x)


def asinh(x: Any) -> Expr:
    return call_math("asinh", x)


def acosh(x: Any) -> Expr:
    return call_math("acosh", x)


def atanh(x: Any) -> Expr:
    return call_math("atanh", x)


def floor(x: Any) -> Expr:
    return call_math("floor", x)


def ceil(x: Any) -> Expr:
    return call_math("ceil", x)


def round(x: Any) -> Expr:  # noqa: A001 - the intrinsic's name
    return call_math("round", x)


def trunc(x: Any) -> Expr:
    return call_math("trunc", x)


def power(x: Any, y: Any) -> Expr:
    return call_math("pow", x, y)


def fmod(x: Any, y: Any) -> Expr:
    """C's fmod: `x - trunc(x / y) * y` computed exactly (the sign of `x`)."""
    return call_math("fmod", x, y)


def abs(x: Any) -> Expr:  # noqa: A001 - the intrinsic's name
    """|x| for any numeric dtype."""
    return abs_expr(x)


def reinterpret(x: Any, dtype: str) -> Expr:
    """`x`'s bits read as `dtype` of the same width (ONNX BitCast): float32 1.0 as int32 is
    0x3F800000."""
    return call_reinterpret(x, dtype)


def shift_left(x: Any, n: Any) -> Expr:
    """`x << n` for an integer `x`: the low bits of `x * 2**n`; `n` must be in [0, bits)."""
    return call_shift("shift_left", x, n)


def shift_right(x: Any, n: Any) -> Expr:
    """`x >> n`: arithmetic (floor of `x / 2**n`) for signed `x`, logical for unsigned; `n` must
    be in [0, bits)."""
    return call_shift("shift_right", x, n)


def dot_i16x2(a: Any, b: Any) -> Expr:
    """The int32 dot product of the two int16 halves of int32 words `a` and `b` (low half
    first): ``lo16(a) * lo16(b) + hi16(a) * hi16(b)``, x86's pmaddwd lane."""
    return call_dot("dot_i16x2", a, b)


def dot_u8i8x4(a: Any, b: Any) -> Expr:
    """The int32 dot product of the four bytes of int32 words `a` (read unsigned) and `b` (read
    signed), low byte first: x86's vpdpbusd lane without its accumulator (always exact)."""
    return call_dot("dot_u8i8x4", a, b)

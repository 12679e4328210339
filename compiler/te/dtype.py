"""Scalar data types of tensor expressions: names, classes, promotion and limits."""

from __future__ import annotations

import math

import numpy as np

# The dtypes every layer understands, by name. Vectors are loop kinds, never dtypes.
DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
INDEX_DTYPE = "int32"


def check_dtype(dtype: str) -> str:
    """Return `dtype` if it is a supported scalar type name, else raise TypeError."""
    if dtype not in DTYPES:
        raise TypeError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return dtype


def is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def is_uint(dtype: str) -> bool:
    """Unsigned integers: they wrap modulo 2**bits and compare, divide and shift as unsigned."""
    return dtype.startswith("uint")


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def is_bool(dtype: str) -> bool:
    return dtype == "bool"


def bits(dtype: str) -> int:
    return 1 if dtype == "bool" else np.dtype(dtype).itemsize * 8


def promote(a: str, b: str) -> str:
    """The common dtype of a binary operation: numpy's promotion restricted to DTYPES."""
    if a == b:
        return a
    result = str(np.promote_types(a, b))
    if result not in DTYPES:
        raise TypeError(f"no common dtype for {a!r} and {b!r} (numpy gives {result!r})")
    return result


def max_value(dtype: str) -> int | float | bool:
    """The largest finite value of `dtype`."""
    if is_bool(dtype):
        return True
    info = np.iinfo(dtype) if is_int(dtype) else np.finfo(dtype)
    return int(info.max) if is_int(dtype) else float(info.max)


def min_value(dtype: str) -> int | float | bool:
    """The lowest finite value of `dtype` (the identity of a max-reduction, as in TVM)."""
    if is_bool(dtype):
        return False
    info = np.iinfo(dtype) if is_int(dtype) else np.finfo(dtype)
    return int(info.min) if is_int(dtype) else float(info.min)


def lowest(dtype: str) -> int | float | bool:
    """The identity of a max-reduction: -inf for a float dtype (a row of -inf has max -inf,
    not the lowest finite value that TVM's identity gives), `min_value` otherwise."""
    return -math.inf if is_float(dtype) else min_value(dtype)


def highest(dtype: str) -> int | float | bool:
    """The identity of a min-reduction: +inf for a float dtype, `max_value` otherwise."""
    return math.inf if is_float(dtype) else max_value(dtype)


def wrap_int(value: int, dtype: str) -> int:
    """Two's-complement wrap of a Python int to the width of an integer dtype."""
    width = bits(dtype)
    mask = (1 << width) - 1
    if is_uint(dtype):
        return value & mask
    half = 1 << (width - 1)
    return ((value + half) & mask) - half


def shift_int(x: int, n: int, dtype: str, left: bool) -> int:
    """numpy's `x << n` (`left`) or `x >> n` for integers of `dtype`, at every amount: `n` is
    read as unsigned (a negative one is huge), and `n >= bits` shifts every bit out, giving 0,
    or -1 for a right shift of a negative `x` (its sign bits). A left shift wraps at the width;
    a right shift is arithmetic for signed `x`, logical for unsigned (whose values are >= 0).
    onnxruntime's BitShift gives the same (ONNX BitShift-28 specifies it)."""
    if 0 <= n < bits(dtype):
        return wrap_int(x << n, dtype) if left else x >> n
    return -1 if not left and x < 0 else 0

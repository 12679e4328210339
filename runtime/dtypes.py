"""The element types tensors may have, and the plain integer each narrow type is held as.

The narrow types (bfloat16, the float8 family with float8e8m0, int4/uint4, float4e2m1) are
ml_dtypes' numpy types; importing this module registers their names with numpy
(``np.dtype("bfloat16")``). Arrays of them are ordinary numpy arrays, one element a byte (two
for bfloat16): int4, uint4 and float4e2m1 are *not* packed two a byte in memory (only ONNX
files pack them; the importer unpacks them); the value sits in the low 4 bits of its byte as
ml_dtypes writes it (high bits 0). Kernels never compute on a narrow type: they read and write
its bits as the storage integer (`storage_dtype`), and Cast, QuantizeLinear and
DequantizeLinear convert them to and from wider types with integer bit arithmetic
(compiler/te/narrow.py)."""

from __future__ import annotations

import ml_dtypes  # noqa: F401  (registers bfloat16, float8_*, int4, ... with numpy)

#: the types every layer computes with
NUMERIC = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
)  # fmt: skip
#: narrow storage types -> the unsigned integer of their width that kernels move them as
NARROW = {
    "bfloat16": "uint16",
    "float8_e4m3fn": "uint8",
    "float8_e4m3fnuz": "uint8",
    "float8_e5m2": "uint8",
    "float8_e5m2fnuz": "uint8",
    "float4_e2m1fn": "uint8",
    "float8_e8m0fnu": "uint8",  # a power of two (MX scales): exponent bits alone, no sign
    "int4": "uint8",
    "uint4": "uint8",
}
#: every element type a tensor, graph value, constant or artifact array may have
DTYPES = NUMERIC + tuple(NARROW)


def is_narrow(dtype: str) -> bool:
    return dtype in NARROW


def is_floating(dtype: str) -> bool:
    """A floating-point type: float16/32/64, bfloat16, the float8 family, float4e2m1."""
    return dtype.startswith(("float", "bfloat"))


def storage_dtype(dtype: str) -> str:
    """The dtype kernels hold `dtype` as: its storage integer for a narrow type, else itself."""
    return NARROW.get(dtype, dtype)


def wide_dtype(dtype: str) -> str:
    """The type ops on a narrow `dtype` compute in: int8/uint8 for int4/uint4, else float32."""
    return {"int4": "int8", "uint4": "uint8"}.get(dtype, "float32") if dtype in NARROW else dtype


__all__ = ["DTYPES", "NARROW", "NUMERIC", "is_floating", "is_narrow", "storage_dtype", "wide_dtype"]

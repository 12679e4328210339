"""Conversions between the narrow storage types and float32/int32, as integer bit arithmetic.

Kernels hold a bfloat16, float8, float4e2m1, int4 or uint4 value as the bits of its storage
integer (`runtime.dtypes.storage_dtype`: uint16 for bfloat16, uint8 for the rest, a 4-bit value
in the low bits). `decode` turns those bits into a float32 (exact: float32 holds every value of
these types) or an int32 (int4/uint4); `encode` rounds a float32 to the type, to nearest even,
as ml_dtypes' `astype` and ONNX's Cast do. Only integer operations, comparisons, selects, one
`reinterpret` and one `round` are used, so every back-end (LLVM, OpenCL C, CUDA C, the loop-IR
interpreter) compiles them as it compiles any integer expression.

Special values (ONNX Cast-19's tables; ml_dtypes agrees):

- bfloat16 and float8e5m2 are IEEE-like: infinities, NaN (kept, with its sign), overflow to inf;
- float8e4m3fn has no infinity, NaN is S.1111.111; float8e4m3fnuz and float8e5m2fnuz have no
  infinity, no negative zero, and one NaN, 0x80;
- without `saturate` an overflow (after rounding) is inf where the type has one, else NaN; with
  it (float8 only: Cast's `saturate`, QuantizeLinear's) it and +-inf become the largest finite
  value of the sign; NaN stays NaN;
- float4e2m1 has neither: overflow and inf saturate, and NaN becomes a zero (ml_dtypes' choice:
  its sign flipped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...runtime.dtypes import is_narrow
from .expr import Expr, const, select
from .math import reinterpret
from .math import round as round_even

F32, U32, I32 = "float32", "uint32", "int32"


@dataclass(frozen=True)
class Minifloat:
    """A narrow float format: exponent and mantissa widths, exponent bias, and how it spells
    infinity and NaN (`nan`: "ieee" exponent all ones, "fn" all bits but the sign ones, "fnuz"
    the single code 0x80 (no negative zero), "none")."""

    ebits: int
    mbits: int
    bias: int
    nan: str

    @property
    def width(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def has_inf(self) -> bool:
        return self.nan == "ieee"

    @property
    def max_code(self) -> int:
        """The magnitude bits of the largest finite value."""
        all_ones = (1 << (self.ebits + self.mbits)) - 1
        if self.nan == "ieee":
            return all_ones - (1 << self.mbits)
        return all_ones - 1 if self.nan == "fn" else all_ones

    @property
    def max_value(self) -> float:
        exp, man = self.max_code >> self.mbits, self.max_code & ((1 << self.mbits) - 1)
        return (1 + man / (1 << self.mbits)) * 2.0 ** (exp - self.bias)


FORMATS = {
    "bfloat16": Minifloat(8, 7, 127, "ieee"),
    "float8_e4m3fn": Minifloat(4, 3, 7, "fn"),
    "float8_e4m3fnuz": Minifloat(4, 3, 8, "fnuz"),
    "float8_e5m2": Minifloat(5, 2, 15, "ieee"),
    "float8_e5m2fnuz": Minifloat(5, 2, 16, "fnuz"),
    "float4_e2m1fn": Minifloat(2, 1, 1, "none"),
}
#: float8e8m0 (MX block scales): an exponent alone, its own conversions
E8M0 = "float8_e8m0fnu"
#: the narrow integers: dtype -> signed
INT4 = {"int4": True, "uint4": False}


def _u(value: int) -> Expr:
    return const(value, U32)


def _f32_nan(sign: Any) -> Expr:
    return reinterpret((sign << 31) | _u(0x7FC00000), F32)


def decode(bits: Any, dtype: str) -> Expr:
    """The value of storage `bits` of narrow `dtype`: float32 for a float type, int32 for
    int4/uint4 (exact in both)."""
    s = bits.astype(U32)
    if dtype in INT4:
        nibble = (s & _u(0xF)).astype(I32)
        return (nibble ^ const(8, I32)) - const(8, I32) if INT4[dtype] else nibble
    if dtype == "bfloat16":
        return reinterpret(s << _u(16), F32)
    if dtype == E8M0:  # 2**(s - 127); 0 is 2**-127, a float32 subnormal; 0xFF is NaN
        value = select(s == _u(0), _u(0x00400000), s << _u(23))
        return select(s == _u(0xFF), _f32_nan(_u(0)), reinterpret(value, F32))
    f = FORMATS[dtype]
    top = f.ebits + f.mbits
    sign, mag = (s >> _u(top)) & _u(1), s & _u((1 << top) - 1)
    normal = reinterpret((mag << _u(23 - f.mbits)) + _u((127 - f.bias) << 23), F32)
    tiny = (mag & _u((1 << f.mbits) - 1)).astype(F32) * const(2.0 ** (1 - f.bias - f.mbits), F32)
    value = select(mag < _u(1 << f.mbits), tiny, normal)
    value = reinterpret(reinterpret(value, U32) | (sign << _u(31)), F32)  # (-0.0 kept)
    exp_ones = _u(((1 << f.ebits) - 1) << f.mbits)
    if f.nan == "ieee":
        inf = reinterpret((sign << _u(31)) | _u(0x7F800000), F32)
        value = select(mag == exp_ones, inf, value)
        return select(mag > exp_ones, _f32_nan(sign), value)
    if f.nan == "fn":
        return select(mag == _u((1 << top) - 1), _f32_nan(sign), value)
    if f.nan == "fnuz":
        return select(s == _u(1 << top), _f32_nan(_u(0)), value)
    return value


def encode(value: Any, dtype: str, saturate: bool = False) -> Expr:
    """`value` (float32, or an integer for int4/uint4) as the storage bits of narrow `dtype`,
    rounded to nearest even; see the module docstring for overflow, infinities and NaN."""
    storage = "uint16" if dtype == "bfloat16" else "uint8"
    if dtype in INT4:  # an integer wraps to its low 4 bits, as C casts and ml_dtypes do
        return (value.astype(I32) & const(0xF, I32)).astype(storage)
    u = reinterpret(value, U32)
    sign, a = u >> _u(31), u & _u(0x7FFFFFFF)
    is_nan = a > _u(0x7F800000)
    if dtype == "bfloat16":
        rounded = (u + _u(0x7FFF) + ((u >> _u(16)) & _u(1))) >> _u(16)
        return select(is_nan, (sign << _u(15)) | _u(0x7FC0), rounded).astype(storage)
    f = FORMATS[dtype]
    shift = 23 - f.mbits
    normal = (a + _u((1 << (shift - 1)) - 1) + ((a >> _u(shift)) & _u(1))) >> _u(shift)
    normal = normal - _u((127 - f.bias) << f.mbits)
    scaled = reinterpret(a, F32) * const(2.0 ** (f.bias - 1 + f.mbits), F32)
    tiny = round_even(scaled).astype(U32)  # a subnormal, or the smallest normal when it rounds up
    min_normal = _u((128 - f.bias) << 23)
    code = select(a < min_normal, tiny, normal)
    top = f.ebits + f.mbits
    exp_ones = ((1 << f.ebits) - 1) << f.mbits
    over = code > _u(f.max_code)
    if saturate or f.nan == "none":
        code = select(over, _u(f.max_code), code)
    elif f.has_inf:
        code = select(over, _u(exp_ones), code)
    elif f.nan == "fn":
        code = select(over, _u((1 << top) - 1), code)  # NaN
    sign_bit = sign << _u(top)
    if f.nan == "fnuz":  # one NaN, 0x80, and no negative zero
        nan = _u(1 << top)
        code = select(code == _u(0), code, code | sign_bit)
        if not saturate:
            code = select(over, nan, code)
        return select(is_nan, nan, code).astype(storage)
    code = code | sign_bit
    if f.nan == "ieee":
        nan = sign_bit | _u(exp_ones | (1 << (f.mbits - 1)))
    elif f.nan == "fn":
        nan = sign_bit | _u((1 << top) - 1)
    else:  # float4e2m1: ml_dtypes gives the zero of the other sign
        nan = (sign ^ _u(1)) << _u(top)
    return select(is_nan, nan, code).astype(storage)


def encode_e8m0(value: Any, saturate: bool, round_mode: str) -> Expr:
    """float32 `value` as float8e8m0 bits, as ONNX Cast-24 defines it: the exponent field of
    |value| (NaN and inf give 0xFF, NaN), moved up by a nonzero mantissa ("up"), by round to
    nearest ("nearest": the top dropped bit, ties up unless the value is a denormal), or not
    ("down"); with `saturate` never past 0xFE, the largest finite value."""
    u = reinterpret(value, U32)
    exp = (u >> _u(23)) & _u(0xFF)
    if round_mode == "up":
        bump = (u & _u(0x7FFFFF)) != _u(0)
    elif round_mode == "nearest":
        rest = (u & _u(0x3FFFFF)) != _u(0)
        bump = ((u & _u(0x400000)) != _u(0)) & (rest | (exp > _u(0)))
    else:
        bump = const(False, "bool")  # "down"
    if saturate:
        bump = bump & (exp != _u(0xFE))
    code = select(exp == _u(0xFF), exp, select(bump, exp + _u(1), exp))
    return code.astype("uint8")


def cast_narrow(
    value: Any, src: str, dst: str, saturate: bool = True, round_mode: str = "up"
) -> Expr:
    """`value` (of `src`, a narrow one given as its storage bits) cast to `dst` (a narrow one
    returned as its bits): through float32, or int32 for int4/uint4 (int4 from a float: the
    truncated int32, wrapped). `saturate` is Cast-19's, for float8 results only; `round_mode`
    Cast-24's, for float8e8m0 results only."""
    if src == dst:
        return value
    if is_narrow(src):
        value = decode(value, src)
    if not is_narrow(dst):
        return value.astype(dst)
    if dst in INT4:
        return encode(value.astype(I32), dst)
    if dst == E8M0:
        return encode_e8m0(value.astype(F32), saturate, round_mode)
    return encode(value.astype(F32), dst, saturate and dst.startswith("float8"))


__all__ = ["E8M0", "FORMATS", "INT4", "Minifloat", "cast_narrow", "decode", "encode", "encode_e8m0"]

"""Math functions written out in LLVM IR, so that they stay vector code: LLVM has no vector
library here, and a `llvm.exp` on a vector becomes one libm call per lane (about 10x slower
than the polynomial below on 16 lanes; it made every sigmoid/SiLU epilogue the slowest part of
its kernel).

`exp_f32`: Cody-Waite range reduction x = n*ln2 + r (|r| <= ln2/2, ln2 in two parts), a degree-6
polynomial for e^r (Cephes' expf coefficients, about 1 ulp), and the scale 2^n applied as two
exact powers of two built from exponent bits, so that results overflow to inf and underflow
through the subnormals to 0 as libm's do; NaN stays NaN.

`tanh_f32`: Cephes' tanhf: an odd polynomial below |x| = 0.625, `1 - 2 / (e^2|x| + 1)` with
`exp_f32` above (|x| clamped to 9.5: float32 tanh rounds to 1 from 9.02 on), the sign put
back; per lane libm `tanhf` made every tanh-GELU (GPT-2's, BERT's `approximate="tanh"`,
onnxruntime's FastGelu) the slowest kernel of its model, 3 to 10 times onnxruntime's.
"""

from __future__ import annotations

from llvmlite import ir

F32, I32 = ir.FloatType(), ir.IntType(32)
_FLAGS = ("contract",)  # never reassociated: the two-part ln2 relies on the order written

LOG2E = 1.44269504088896341
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
            1.6666665459e-1, 5.0000001201e-1)  # fmt: skip
X_MAX, X_MIN = 89.0, -104.0  # beyond: inf and 0 (n stays in [-150, 129], halves normal)


def _splat(ty: ir.Type, value: float | int) -> ir.Constant:
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [value] * ty.count)
    return ir.Constant(ty, value)


def _int_type(ty: ir.Type) -> ir.Type:
    return ir.VectorType(I32, ty.count) if isinstance(ty, ir.VectorType) else I32


def _intrinsic(bld: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
    ty = x.type
    suffix = f"v{ty.count}f32" if isinstance(ty, ir.VectorType) else "f32"
    full = f"llvm.{name}.{suffix}"
    module = bld.module
    fn = module.globals.get(full) or ir.Function(module, ir.FunctionType(ty, [ty]), name=full)
    return bld.call(fn, [x])


def _pow2(bld: ir.IRBuilder, n: ir.Value, float_ty: ir.Type) -> ir.Value:
    """2^n for integer n in [-126, 127], from its exponent bits."""
    biased = bld.add(n, _splat(n.type, 127))
    return bld.bitcast(bld.shl(biased, _splat(n.type, 23)), float_ty)


def _exp_parts(bld: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(e^r, n) with e^x = e^r * 2^n, of an `x` already clamped to [X_MIN, X_MAX]."""
    ty = x.type
    c = lambda v: _splat(ty, v)  # noqa: E731
    nf = _intrinsic(bld, "roundeven", bld.fmul(x, c(LOG2E), flags=_FLAGS))
    r = bld.fsub(x, bld.fmul(nf, c(LN2_HI), flags=_FLAGS), flags=_FLAGS)
    r = bld.fsub(r, bld.fmul(nf, c(LN2_LO), flags=_FLAGS), flags=_FLAGS)
    p = c(EXP_POLY[0])
    for coef in EXP_POLY[1:]:
        p = bld.fadd(bld.fmul(p, r, flags=_FLAGS), c(coef), flags=_FLAGS)
    r2 = bld.fmul(r, r, flags=_FLAGS)
    e = bld.fadd(bld.fadd(bld.fmul(p, r2, flags=_FLAGS), r, flags=_FLAGS), c(1.0), flags=_FLAGS)
    return e, bld.fptosi(nf, _int_type(ty))


def _clamp(bld: ir.IRBuilder, x: ir.Value, low: float, high: float) -> ir.Value:
    """`x` limited to [low, high]; NaN stays NaN (ordered compares)."""
    c = lambda v: _splat(x.type, v)  # noqa: E731
    x = bld.select(bld.fcmp_ordered(">", x, c(high)), c(high), x)
    return bld.select(bld.fcmp_ordered("<", x, c(low)), c(low), x)


def exp_f32(bld: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """e^x of a float32 scalar or vector `x`, as vector arithmetic."""
    ty = x.type
    e, n = _exp_parts(bld, _clamp(bld, x, X_MIN, X_MAX))
    half = bld.ashr(n, _splat(n.type, 1))
    e = bld.fmul(e, _pow2(bld, half, ty), flags=_FLAGS)
    e = bld.fmul(e, _pow2(bld, bld.sub(n, half), ty), flags=_FLAGS)
    return bld.select(bld.fcmp_unordered("uno", x, x), x, e)


#: |x| beyond which sigmoid_f32 saturates: e^-80 is still a normal float32 (e^-87.3 is the
#: smallest), and 1 / (1 + e^-80) rounds to 1.0 as the exact value does
SIGMOID_X_MAX = 80.0


def sigmoid_f32(bld: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """1 / (1 + e^-x) of a float32 scalar or vector `x`, its exponent clamped to +-80 so that no
    lane computes a subnormal: past 87 e^-x scaled into the subnormals, arithmetic that takes a
    slow microcode path on x86 (a SiLU epilogue over activations of magnitude ~100 ran 2x
    slower). Saturated lanes: 1.0 above 80 (exact in float32) and 1.8e-35 below -80 (exact
    values under 1.8e-35); NaN stays NaN."""
    ty = x.type
    c = lambda v: _splat(ty, v)  # noqa: E731
    neg = bld.fsub(c(0.0), x, flags=_FLAGS)
    # within +-80 the scale 2^n (|n| <= 116) is one normal power of two: no clamps or split
    # scaling of exp_f32's full range (a SiLU over 512k floats: 0.31 -> 0.19 ns each, onnxruntime
    # 0.16)
    e, n = _exp_parts(bld, _clamp(bld, neg, -SIGMOID_X_MAX, SIGMOID_X_MAX))
    e = bld.fmul(e, _pow2(bld, n, ty), flags=_FLAGS)
    s = bld.fdiv(c(1.0), bld.fadd(c(1.0), e, flags=_FLAGS), flags=_FLAGS)
    return bld.select(bld.fcmp_unordered("uno", x, x), x, s)


# Cephes' tanhf: tanh(x) = x + x^3 * P(x^2) for |x| < 0.625 (P's coefficients, highest first)
TANH_POLY = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
             -3.33332819422e-1)  # fmt: skip
TANH_SMALL, TANH_X_MAX = 0.625, 9.5  # at 9, 1 - 2 / (e^18 + 1) rounds to 0.99999994


def tanh_f32(bld: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """tanh of a float32 scalar or vector `x`, as vector arithmetic (both branches computed,
    one selected per lane); +-1 beyond |x| = 9.02 (and for +-inf), NaN stays NaN."""
    ty = x.type
    c = lambda v: _splat(ty, v)  # noqa: E731
    mag = _intrinsic(bld, "fabs", x)
    z = bld.fmul(x, x, flags=_FLAGS)
    poly = c(TANH_POLY[0])
    for coeff in TANH_POLY[1:]:
        poly = bld.fadd(bld.fmul(poly, z, flags=_FLAGS), c(coeff), flags=_FLAGS)
    small = bld.fadd(bld.fmul(bld.fmul(poly, z, flags=_FLAGS), x, flags=_FLAGS), x, flags=_FLAGS)
    clamped = _clamp(bld, mag, 0.0, TANH_X_MAX)
    e = exp_f32(bld, bld.fadd(clamped, clamped, flags=_FLAGS))
    big = bld.fsub(c(1.0), bld.fdiv(c(2.0), bld.fadd(e, c(1.0), flags=_FLAGS), flags=_FLAGS))
    signed = bld.select(bld.fcmp_ordered("<", x, c(0.0)), bld.fsub(c(0.0), big), big)
    out = bld.select(bld.fcmp_ordered("<", mag, c(TANH_SMALL)), small, signed)
    return bld.select(bld.fcmp_unordered("uno", x, x), x, out)

"""Every expression kind compiled by the LLVM back-end equals the loop-IR interpreter.

Each expression runs element-wise over a prime-length array, once with a serial loop and once
with a vectorized inner loop (vector lanes + a peeled scalar tail); integer results are
bit-exact, float results agree to rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
from compiler_ops import (
    INTEGERS,
    UNSIGNED,
    bitwise_inputs,
    bitwise_ops,
    unsigned_inputs,
    unsigned_ops,
)

from tensorforge.compiler import te, tir
from tensorforge.compiler.build import build

N = 37  # prime: the vectorized split by 8 leaves a tail

INT_EXPRS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "c_div": lambda a, b: a / (b * b + 1),
    "floordiv": lambda a, b: a // (b * b + 1) - (a // 3),
    "floormod": lambda a, b: a % (b * b + 1) + a % 5,
    "min_max": lambda a, b: te.min(a, b) * 2 + te.max(a, b),
    "compare_select": lambda a, b: te.select(a < b, a, b) + te.select(a >= b, 1, 0),
    "logic": lambda a, b: te.select((a > 0) & ~(b > 0) | (a == b), a, -b),
    "abs": lambda a, b: te.abs(a - b),
}

FLOAT_EXPRS = {
    "arith": lambda a, b: a * b + a / (b * b + 1.0) - b,
    "floordiv_mod": lambda a, b: a // 0.3 + b % 0.7,
    "min_max": lambda a, b: te.min(a, b) + te.max(a, b) * 2.0,
    "exp_log": lambda a, b: te.exp(a) + te.log(b * b + 1.0) + te.log2(b * b + 2.0),
    "sqrt_rsqrt": lambda a, b: te.sqrt(a * a) + te.rsqrt(b * b + 1.0),
    "transcendental": lambda a, b: te.tanh(a) + te.sigmoid(b) + te.erf(a) + te.log1p(b * b),
    "trig_pow": lambda a, b: te.sin(a) * te.cos(b) + te.power(a * a + 1.0, b) + te.exp2(a),
    "rounding": lambda a, b: (
        te.floor(a * 3.0) + te.ceil(b * 3.0) + te.round(a * 4.0) + te.trunc(b * 3.0)
    ),
    "cast_roundtrip": lambda a, b: (a * 10.0).astype("int32").astype(a.dtype) + b,
}


def _compile_pair(fexpr, dtype: str, vectorize: bool, out_dtype: str | None = None):
    A = te.placeholder((N,), dtype, name="A")
    B = te.placeholder((N,), dtype, name="B")
    C = te.compute((N,), lambda i: fexpr(A[i], B[i]), name="C")
    s = te.create_schedule(C.op)
    if vectorize:
        _, inner = s[C].split(C.op.axis[0], factor=8)
        s[C].vectorize(inner)
    func = tir.lower(s, [A, B, C], name="ew")
    return func, C.dtype


def _inputs(dtype: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype.startswith("float"):
        return [rng.uniform(-2, 2, N).astype(dtype) for _ in range(2)]
    lo, hi = (0, 16) if dtype.startswith("uint") else (-20, 20)
    return [rng.integers(lo, hi, N).astype(dtype) for _ in range(2)]


def _run_both(fexpr, dtype: str, vectorize: bool) -> tuple[np.ndarray, np.ndarray]:
    func, out_dtype = _compile_pair(fexpr, dtype, vectorize)
    a, b = _inputs(dtype)
    interp, native = np.zeros(N, out_dtype), np.zeros(N, out_dtype)
    tir.interpret(func, [a, b, interp])
    build(func)(a, b, native)
    return native, interp


INT_CASES = [
    (name, dtype)
    for name in INT_EXPRS
    for dtype in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
]


@pytest.mark.parametrize("vectorize", [False, True], ids=["serial", "vector"])
@pytest.mark.parametrize(("name", "dtype"), INT_CASES)
def test_integer_expressions_are_bit_exact(name: str, dtype: str, vectorize: bool) -> None:
    native, interp = _run_both(INT_EXPRS[name], dtype, vectorize)
    np.testing.assert_array_equal(native, interp)


@pytest.mark.parametrize("vectorize", [False, True], ids=["serial", "vector"])
@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unsigned_integers_wrap_divide_and_compare_like_numpy(dtype: str, vectorize: bool) -> None:
    inputs, outs, reference = unsigned_ops(dtype, N)
    _check_native_and_interpreted(inputs, outs, unsigned_inputs(dtype, N), reference, vectorize)


@pytest.mark.parametrize("vectorize", [False, True], ids=["serial", "vector"])
@pytest.mark.parametrize("dtype", INTEGERS)
def test_bitwise_operators_match_numpy_at_every_shift_amount(dtype: str, vectorize: bool) -> None:
    """& | ^ ~ << >> of every integer type: negative values, shifts by the width or more and by
    negative amounts (numpy's 0 or sign bits, where LLVM's shl/lshr/ashr are poison)."""
    inputs, outs, reference = bitwise_ops(dtype, N)
    _check_native_and_interpreted(inputs, outs, bitwise_inputs(dtype, N), reference, vectorize)


def _check_native_and_interpreted(inputs, outs, arrays, reference, vectorize: bool) -> None:
    s = te.create_schedule([t.op for t in outs])
    if vectorize:
        for t in outs:
            _, inner = s[t].split(t.op.axis[0], factor=8)
            s[t].vectorize(inner)
    func = tir.lower(s, [*inputs, *outs], name="ops")
    native, interp = ([np.zeros(N, t.dtype) for t in outs] for _ in range(2))
    build(func)(*arrays, *native)
    tir.interpret(func, [*arrays, *interp])
    for t, got_n, got_i, want in zip(outs, native, interp, reference(*arrays), strict=True):
        np.testing.assert_array_equal(got_n, want, err_msg=f"native {t.name}")
        np.testing.assert_array_equal(got_i, want, err_msg=f"interpreter {t.name}")


@pytest.mark.parametrize("vectorize", [False, True], ids=["serial", "vector"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(FLOAT_EXPRS))
def test_float_expressions_match_interpreter(name: str, dtype: str, vectorize: bool) -> None:
    native, interp = _run_both(FLOAT_EXPRS[name], dtype, vectorize)
    tol = 2e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(native, interp, rtol=tol, atol=tol)


@pytest.mark.parametrize("vectorize", [False, True], ids=["serial", "vector"])
def test_float16_is_computed_and_stored_as_half(vectorize: bool) -> None:
    native, interp = _run_both(lambda a, b: a * b + te.exp(a), "float16", vectorize)
    np.testing.assert_allclose(native.astype("float32"), interp.astype("float32"), rtol=2e-3)


def test_bool_buffers_are_bytes_like_numpy() -> None:
    A = te.placeholder((N,), "int32", name="A")
    M = te.compute((N,), lambda i: A[i] > 3, name="M")
    C = te.compute((N,), lambda i: te.select(M[i], A[i], 0), name="C")
    f = build(tir.lower(te.create_schedule([M.op, C.op]), [A, M, C], name="mask"))
    a = np.arange(N, dtype="int32") - 10
    m, c = np.zeros(N, bool), np.zeros(N, "int32")
    f(a, m, c)
    np.testing.assert_array_equal(m, a > 3)
    np.testing.assert_array_equal(c, np.where(a > 3, a, 0))


def test_if_then_else_does_not_evaluate_the_untaken_branch() -> None:
    # Padding reads A[i - 2] only where 2 <= i < N + 2: the other branch would be out of bounds.
    A = te.placeholder((N,), name="A")
    P = te.compute(
        (N + 4,), lambda i: te.if_then_else(te.all_of(i >= 2, i < N + 2), A[i - 2], -1.0), name="P"
    )
    f = build(tir.lower(te.create_schedule(P.op), [A, P], name="pad"))
    a, p = np.random.default_rng(1).random(N).astype("float32"), np.zeros(N + 4, "float32")
    f(a, p)
    np.testing.assert_array_equal(p, np.pad(a, 2, constant_values=-1.0))


def test_a_guarded_load_at_a_modulo_index_reads_each_lanes_element() -> None:
    # torch.nn.Unfold with padding (benchmarks/torch_catalog.py): rows and columns are a
    # Gather table's entries at o//3%3*4 + i//4 and o%3*4 + i%4, the column read under the
    # padding's bounds test. LLVM 22's loop vectorizer read the column entries of lanes 0..7
    # as one contiguous masked load (lanes 4..7 took entries 4..7, not 0..3): wrong values,
    # or a crash past the table's end (padded here so that the failure is a wrong value)
    table = np.array([0, 2, 4, 6, 2, 4, 6, 8, 4, 6, 8, 10] + [3] * 20, np.int64)
    A = te.placeholder((121,), name="A")
    T = te.placeholder(table.shape, dtype="int64", name="T")

    def unfold(o, i):  # noqa: ANN001, ANN202
        row = te.cast(T[o // 3 % 3 * 4 + i // 4], "int32")
        col = te.cast(T[o % 3 * 4 + i % 4], "int32")
        return te.if_then_else(row - 1 >= 0, A[row * 11 + col], 0.0)

    C = te.compute((18, 16), unfold, name="C")
    f = build(tir.lower(te.create_schedule(C.op), [A, T, C], name="unfold"))
    a = np.random.default_rng(2).standard_normal(121).astype("float32")
    c = np.zeros((18, 16), "float32")
    f(a, table, c)
    o, i = np.meshgrid(np.arange(18), np.arange(16), indexing="ij")
    row, col = table[o // 3 % 3 * 4 + i // 4], table[o % 3 * 4 + i % 4]
    np.testing.assert_array_equal(c, np.where(row >= 1, a[row * 11 + col], 0.0))


SHIFT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


@pytest.mark.parametrize("vectorize", [False, True], ids=["serial", "vector"])
@pytest.mark.parametrize("dtype", SHIFT_DTYPES)
def test_shifts_wrap_left_and_fill_the_sign_right_like_numpy(dtype: str, vectorize: bool) -> None:
    bits = np.iinfo(dtype).bits
    rng = np.random.default_rng(bits)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
    amount = rng.integers(0, bits, N).astype(dtype)  # any amount in [0, bits), per element
    A = te.placeholder((N,), dtype, name="A")
    S = te.placeholder((N,), dtype, name="S")
    L = te.compute((N,), lambda i: te.shift_left(A[i], S[i]), name="L")
    R = te.compute((N,), lambda i: te.shift_right(A[i], S[i]), name="R")
    K = te.compute(
        (N,), lambda i: te.shift_right(A[i], bits - 1) + te.shift_left(A[i], 3), name="K"
    )
    s = te.create_schedule([L.op, R.op, K.op])
    if vectorize:
        for t in (L, R, K):
            _, inner = s[t].split(t.op.axis[0], factor=8)
            s[t].vectorize(inner)
    func = tir.lower(s, [A, S, L, R, K], name="shifts")
    native, interp = ([np.zeros(N, dtype) for _ in range(3)] for _ in range(2))
    build(func)(a, amount, *native)
    tir.interpret(func, [a, amount, *interp])
    with np.errstate(over="ignore"):
        want = [a << amount, a >> amount, (a >> (bits - 1)) + (a << 3)]  # numpy wraps, as C
    for got_n, got_i, w in zip(native, interp, want, strict=True):
        np.testing.assert_array_equal(got_n, w)
        np.testing.assert_array_equal(got_i, w)


def test_shift_amounts_out_of_range_are_refused() -> None:
    x = te.var("x", "int32")
    with pytest.raises(
        ValueError, match=r"shift_left amount must be in \[0, 32\) for int32, not 32"
    ):
        te.shift_left(x, 32)
    with pytest.raises(TypeError, match="shift_right needs an integer operand, not 'float32'"):
        te.shift_right(te.var("f", "float32"), 1)
    A = te.placeholder((N,), "int8", name="A")
    C = te.compute((N,), lambda i: te.shift_right(A[i], A[i]), name="C")
    func = tir.lower(te.create_schedule(C.op), [A, C], name="bad")
    with pytest.raises(tir.InterpretError, match=r"shift_right amount must be in \[0, 8\), not -1"):
        tir.interpret(func, [np.full(N, -1, np.int8), np.zeros(N, np.int8)])


@pytest.mark.parametrize("vectorize", [False, True], ids=["serial", "vector"])
@pytest.mark.parametrize(
    ("src", "dst"), [("float32", "int32"), ("uint32", "float32"), ("float64", "int64"),
                     ("float16", "uint16")]
)  # fmt: skip
def test_reinterpret_keeps_the_bits_like_numpy_view(src: str, dst: str, vectorize: bool) -> None:
    """te.reinterpret (ONNX BitCast) natively and in the interpreter: the bits of -0.0,
    infinities, a NaN with a payload and a subnormal survive, as numpy's view keeps them."""
    width = np.dtype(src).itemsize
    unsigned = np.dtype(f"u{width}")
    special = np.array([0.0, -0.0, np.inf, -np.inf, 1.0, -2.5], src if src[0] == "f" else "f4")
    raw = np.random.default_rng(3).integers(0, np.iinfo(unsigned).max, N - 6, dtype=unsigned)
    raw[0] = {2: 0x7E01, 4: 0x7FC00001, 8: 0x7FF8000000000001}[width]  # a NaN with a payload
    raw[1] = 1  # the smallest subnormal
    values = np.concatenate([special.view(unsigned) if src[0] == "f" else special.view("u4"),
                             raw]).view(src)  # fmt: skip
    A = te.placeholder((N,), src, name="A")
    C = te.compute((N,), lambda i: te.reinterpret(A[i], dst), name="C")
    s = te.create_schedule(C.op)
    if vectorize:
        _, inner = s[C].split(C.op.axis[0], factor=8)
        s[C].vectorize(inner)
    func = tir.lower(s, [A, C], name="bits")
    native, interp = np.zeros(N, dst), np.zeros(N, dst)
    build(func)(values, native)
    tir.interpret(func, [values, interp])
    np.testing.assert_array_equal(native.view(unsigned), values.view(unsigned))
    np.testing.assert_array_equal(interp.view(unsigned), values.view(unsigned))


def test_reinterpret_of_another_width_is_refused() -> None:
    with pytest.raises(TypeError, match="reinterpret needs non-bool dtypes of one width"):
        te.reinterpret(te.var("f", "float32"), "int64")


@pytest.mark.parametrize("vectorize", [False, True], ids=["serial", "vector"])
def test_round_breaks_ties_to_even_like_numpy_rint(vectorize: bool) -> None:
    halves = np.arange(-40, 41, dtype=np.float64) + 0.5
    values = np.concatenate([halves, np.nextafter(halves, 0), [0.0, -0.0, 1e300, -1e300]])
    A = te.placeholder((values.size,), "float64", name="A")
    C = te.compute(A.shape, lambda i: te.round(A[i]), name="C")
    s = te.create_schedule(C.op)
    if vectorize:
        _, inner = s[C].split(C.op.axis[0], factor=8)
        s[C].vectorize(inner)
    func = tir.lower(s, [A, C], name="rint")
    native, interp = np.zeros_like(values), np.zeros_like(values)
    build(func)(values, native)
    tir.interpret(func, [values, interp])
    np.testing.assert_array_equal(native, np.rint(values))
    np.testing.assert_array_equal(interp, np.rint(values))


def _unary_kernel(fn, x: np.ndarray, lanes: int, name: str):  # noqa: ANN001, ANN202
    """A kernel B[i] = fn(A[i]) over `x`'s shape, vectorized by `lanes` when more than 1."""
    A = te.placeholder(x.shape, name="A")
    B = te.compute(x.shape, lambda i: fn(A[i]), name="B")
    s = te.create_schedule(B.op)
    if lanes > 1:
        s[B].vectorize(s[B].split(B.op.axis[0], factor=lanes)[1])
    return build(s, [A, B], name=name)


@pytest.mark.parametrize("lanes", [1, 16])
def test_float32_exp_is_vector_code_within_an_ulp_of_numpy(lanes: int) -> None:
    """float32 exp is a polynomial in vector registers (no libm call per lane): within 1 ulp of
    numpy's (double-precision) exp across the whole range, inf/0 beyond it, NaN kept."""
    specials = [np.inf, -np.inf, np.nan, 0.0, -0.0, 88.72, 88.73, -87.3, -103.9, -104.5, -200.0]
    x = np.concatenate([np.linspace(-110, 95, 20011), specials]).astype(np.float32)
    f = _unary_kernel(te.exp, x, lanes, "exp32")
    got = np.empty_like(x)
    f(x, got)
    assert "expf" not in f.assembly()
    want = np.exp(x.astype(np.float64))
    normal = (want > np.finfo(np.float32).tiny) & (want < np.finfo(np.float32).max)
    np.testing.assert_allclose(got[normal], want[normal], rtol=2**-23, atol=0)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got[~normal & ~np.isnan(x) & (x > 0)], np.inf)
        assert np.all(got[~normal & (x < 0)] <= np.finfo(np.float32).tiny)
    assert np.isnan(got[np.isnan(x)]).all()


@pytest.mark.parametrize("lanes", [1, 16])
def test_float32_sigmoid_saturates_without_subnormals(lanes: int) -> None:
    """float32 sigmoid matches numpy's (double) 1 / (1 + e^-x) closely for |x| <= 80 and
    saturates beyond: exactly 1.0 above (as the exact value rounds), at most e^-80 below, never
    a subnormal (a slow path on x86); monotone; NaN kept."""
    specials = [np.inf, -np.inf, np.nan, 0.0, 79.9, 80.0, 87.5, 104.0, -80.0, -87.5, -104.0]
    x = np.concatenate([np.linspace(-300, 300, 30011), specials]).astype(np.float32)
    got = np.empty_like(x)
    _unary_kernel(te.sigmoid, x, lanes, "sigmoid32")(x, got)
    with np.errstate(over="ignore"):
        want = 1 / (1 + np.exp(-x.astype(np.float64)))
    inside = np.abs(x) <= 80
    np.testing.assert_allclose(got[inside], want[inside], rtol=4 * 2**-23, atol=0)
    np.testing.assert_array_equal(got[x > 80], 1.0)
    low = got[x < -80]
    assert np.all((low > 0) & (low <= np.float32(np.exp(-80.0)) * 1.001))
    finite = got[~np.isnan(x)]
    assert not np.any((finite != 0) & (np.abs(finite) < np.finfo(np.float32).tiny))
    order = np.argsort(x[~np.isnan(x)], kind="stable")
    assert np.all(np.diff(finite[order]) >= 0)
    assert np.isnan(got[np.isnan(x)]).all()


@pytest.mark.parametrize("lanes", [1, 16])
def test_float32_tanh_is_vector_code_close_to_numpy(lanes: int) -> None:
    """float32 tanh is vector arithmetic (no libm tanhf per lane: it made tanh-GELU models 3 to
    10 times onnxruntime's time): within a few ulp of numpy's (double) tanh, small arguments
    included (the polynomial branch keeps their relative error), +-1 far out, NaN kept."""
    specials = [np.inf, -np.inf, np.nan, 0.0, 1e-30, -1e-7, 0.6249, 0.625, -0.6251, 9.0, 30.0]
    x = np.concatenate([np.linspace(-12, 12, 24011), specials]).astype(np.float32)
    f = _unary_kernel(te.tanh, x, lanes, "tanh32")
    got = np.empty_like(x)
    f(x, got)
    assert "tanhf" not in f.assembly()
    want = np.tanh(x.astype(np.float64))
    finite = ~np.isnan(x)
    np.testing.assert_allclose(got[finite], want[finite], rtol=4 * 2**-23, atol=0)
    assert np.isnan(got[np.isnan(x)]).all()

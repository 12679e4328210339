"""The index-expression simplifier and interval analysis."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorforge.compiler import te
from tensorforge.compiler.tir import Analyzer, InterpretError
from tensorforge.compiler.tir.interp import _Compiler

i, j, k = te.var("i"), te.var("j"), te.var("k")
ANA = Analyzer({i: (0, 3), j: (0, 7)})


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ((i * 8 + j) // 8, "i"),
        ((i * 8 + j) % 8, "j"),
        ((k * 8 + j) // 8, "k"),
        ((i * 8 + j) // 4 // 2, "i"),
        ((i + 1) * 2 - i * 2, "2"),
        (k - 1 - k * 2, "-1 - k"),
        ((k * 4 + j) // 8 * 8 + (k * 4 + j) % 8, "k*4 + j"),
        # a split loop's index over a multiple of its factor: the outer variables alone
        ((k * 6 + i * 2 + 1) // 4, "(k*3 + i)//2"),
        ((k * 2 + 2) // 4, "(k*2 + 2)//4"),  # the remainder 2 is not below the factor 2
        (te.max(i * 8, i * 8 + 7), "i*8 + 7"),
        (te.min(k, k + 1), "k"),
        (i * 8 + j < 32, "True"),
        (i * 8 + j < 10, "i*8 + j < 10"),
        (j * 2 < 7, "j < 4"),
        (1 + k * 3 > 4, "k >= 2"),
        (3 - j >= 0, "j < 4"),
        (te.select(i < 4, k, j), "k"),
        (te.all_of(i >= 0, k < 3), "k < 3"),
        (te.const(2.0) * 3.0 + te.var("x", "float32") * 1.0, "6.0f + x"),
        (te.cast(te.const(300), "int8"), "int8(44)"),
    ],
)
def test_simplify_cases(expr: te.Expr, expected: str) -> None:
    assert repr(ANA.simplify(expr)) == expected


def test_intervals_follow_bounds() -> None:
    assert ANA.interval(i * 8 + j) == (0, 31)
    assert ANA.interval((i * 8 + j) % 5) == (0, 4)
    assert ANA.interval(k + 1) == (None, None)
    assert ANA.interval(te.cast(te.var("c", "int8"), "int32") + 0) == (None, None)


def test_symbolic_interval_relaxes_only_the_given_variables() -> None:
    lo, hi = ANA.symbolic_interval((k * 8 + j) * 2 + 1, [j])
    assert (repr(lo), repr(hi)) == ("k*16 + 1", "k*16 + 15")
    lo, hi = ANA.symbolic_interval((k * 4 + j) // 8, [j])
    assert (repr(lo), repr(hi)) == ("k//2", "(k*4 + 7)//8")


def _evaluate(expr: te.Expr, values: dict[te.Var, int]) -> object:
    compiler = _Compiler()
    fn = compiler.expr(expr)
    env = [None] * 8
    for var, value in values.items():
        env[compiler.slot(var)] = value
    return fn(env)


VARS = [te.var("a"), te.var("b"), te.var("c")]


@st.composite
def index_exprs(draw: st.DrawFn, depth: int = 3) -> te.Expr:
    if depth == 0 or draw(st.booleans()):
        if draw(st.booleans()):
            return draw(st.sampled_from(VARS))
        return te.const(draw(st.integers(-9, 9)))
    op = draw(st.sampled_from(["+", "-", "*", "//", "%", "min", "max", *BITWISE]))
    a = draw(index_exprs(depth - 1))
    if op in ("//", "%", "*"):
        c = draw(st.integers(1, 6))
        return {"//": a // c, "%": a % c, "*": a * c}[op]
    if op in BITWISE:
        return _bitwise(draw, op, a, index_exprs(depth - 1), "int32")
    b = draw(index_exprs(depth - 1))
    return {"+": a + b, "-": a - b, "min": te.min(a, b), "max": te.max(a, b)}[op]


BITWISE = ("&", "|", "^", "~", "<<", ">>")


def _bitwise(draw: st.DrawFn, op: str, a: te.Expr, other: st.SearchStrategy, dtype: str):
    """`a <op> b`: b another expression, a constant (a mask, 0, all ones), or for shifts an
    amount in or past the width (or negative: numpy reads it as unsigned). For int32, which
    the simplifier takes as exact (its overflow is outside the IR's contract), a left shift
    stays small: by 0 to 3, or by the width or more (0), or by another expression % 4."""
    if op == "~":
        return ~a
    bits = np.iinfo(dtype).bits
    exact = dtype == "int32"
    if op in ("<<", ">>"):
        big = [] if exact and op == "<<" else [bits - 1]
        amounts = st.sampled_from([0, 1, 3, *big, bits, bits + 5, -1])
        if draw(st.booleans()):
            b = te.const(draw(amounts), dtype)
        else:
            b = draw(other) % 4 if exact and op == "<<" else draw(other)
        return a << b if op == "<<" else a >> b
    masks = st.sampled_from([0, 1, 6, 255, -1, -8])
    b = te.const(draw(masks), dtype) if draw(st.booleans()) else draw(other)
    return {"&": a & b, "|": a | b, "^": a ^ b}[op]


@settings(max_examples=200, deadline=None)
@given(expr=index_exprs(), values=st.lists(st.integers(0, 20), min_size=3, max_size=3))
def test_simplify_preserves_values_and_intervals_contain_them(expr, values) -> None:
    env = dict(zip(VARS, values, strict=True))
    ana = Analyzer({v: (0, 20) for v in VARS})
    expected = _evaluate(expr, env)
    assert _evaluate(ana.simplify(expr), env) == expected
    lo, hi = ana.interval(expr)
    assert lo is None or lo <= expected
    assert hi is None or expected <= hi
    cmp = expr < 7
    assert _evaluate(ana.simplify(cmp), env) == _evaluate(cmp, env)


def test_division_by_zero_is_reported_by_the_interpreter() -> None:
    z = te.var("z")
    with pytest.raises(InterpretError, match="division by zero"):
        _evaluate(k // z, {k: 1, z: 0})


# Integers that wrap where values live: (u, v) of each dtype.
WRAPPING = {t: (te.var("u", t), te.var("v", t)) for t in ("uint32", "uint8", "int8", "int16")}


@st.composite
def wrapping_exprs(draw: st.DrawFn, dtype: str, depth: int = 3) -> te.Expr:
    """Expressions of `dtype` (constants 0..9 of that dtype) with + - * // % min max and the
    bitwise operators."""
    if depth == 0 or draw(st.booleans()):
        if draw(st.booleans()):
            return draw(st.sampled_from(WRAPPING[dtype]))
        return te.const(draw(st.integers(0, 9)), dtype)
    op = draw(st.sampled_from(["+", "-", "*", "//", "%", "min", "max", *BITWISE]))
    a = draw(wrapping_exprs(dtype, depth - 1))
    if op in ("//", "%"):
        c = draw(st.integers(1, 6))
        return a // c if op == "//" else a % c
    if op in BITWISE:
        return _bitwise(draw, op, a, wrapping_exprs(dtype, depth - 1), dtype)
    b = draw(wrapping_exprs(dtype, depth - 1))
    table = {"+": a + b, "-": a - b, "*": a * b, "min": te.min(a, b), "max": te.max(a, b)}
    return table[op]


@st.composite
def wrapping_cases(draw: st.DrawFn) -> tuple[te.Expr, dict[te.Var, int], int]:
    """(expression, values of u and v, a bound) over the whole range of one wrapping dtype."""
    dtype = draw(st.sampled_from(list(WRAPPING)))
    info = np.iinfo(dtype)
    values = st.integers(int(info.min), int(info.max))
    env = dict(zip(WRAPPING[dtype], draw(st.lists(values, min_size=2, max_size=2)), strict=True))
    return draw(wrapping_exprs(dtype)), env, draw(values)


@settings(max_examples=300, deadline=None)
@given(case=wrapping_cases())
def test_simplify_keeps_the_wraparound_of_narrow_and_unsigned_integers(case) -> None:
    # e.g. uint32 `u - v < 7` is not `u < v + 7` once u - v wraps; int8 `100 < -100` is not
    # `100 - -100 < 0` (the difference wraps to -56)
    expr, env, bound = case
    for e in (expr, expr < bound, expr >= 3):
        assert _evaluate(ANA.simplify(e), env) == _evaluate(e, env)


def test_wrapping_comparisons_are_not_rewritten_as_differences() -> None:
    u, v = WRAPPING["uint32"]
    assert repr(ANA.simplify(u < v)) == "u < v"
    assert repr(ANA.simplify(u - v < te.const(5, "uint32"))) == "u - v < uint32(5)"
    assert ANA.interval(u + 1) == (None, None)
    a, b = WRAPPING["int8"]
    assert _evaluate(ANA.simplify(a < b), {a: 100, b: -100}) is False


INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_NUMPY_BITWISE = {
    "&": np.bitwise_and,
    "|": np.bitwise_or,
    "^": np.bitwise_xor,
    "<<": np.left_shift,
    ">>": np.right_shift,
}


@st.composite
def constant_bitwise_cases(draw: st.DrawFn) -> tuple[str, str, int, int]:
    dtype = draw(st.sampled_from(INTEGERS))
    info = np.iinfo(dtype)
    values = st.integers(int(info.min), int(info.max))
    op = draw(st.sampled_from(list(_NUMPY_BITWISE)))
    # a shift amount: any value of the type (negative ones too), or one near the width
    amounts = st.one_of(values, st.integers(0, 2 * info.bits))
    return dtype, op, draw(values), draw(amounts if op in ("<<", ">>") else values)


@settings(max_examples=300, deadline=None)
@given(case=constant_bitwise_cases())
def test_bitwise_operators_of_constants_fold_to_what_numpy_gives(case) -> None:
    """At each dtype's width; shifts by the width or more, or by a negative amount, give numpy's
    0 or sign bits (onnxruntime's too)."""
    dtype, op, x, y = case
    a, b = te.const(x, dtype), te.const(y, dtype)
    expr = {"&": a & b, "|": a | b, "^": a ^ b, "<<": a << b, ">>": a >> b}[op]
    folded = ANA.simplify(expr)
    want = _NUMPY_BITWISE[op](np.array(x).astype(dtype), np.array(y).astype(dtype))
    assert isinstance(folded, te.IntImm) and folded.dtype == dtype
    assert folded.value == int(want), f"{dtype} {x} {op} {y}"
    assert _evaluate(expr, {}) == int(want)  # the interpreter agrees, unfolded
    assert ANA.simplify(~a).value == int(~np.array(x).astype(dtype))


def test_bitwise_identities_and_mask_intervals() -> None:
    u = te.var("u", "uint8")
    cases = [
        (k & 0, "0"),
        (k | 0, "k"),
        (0 ^ k, "k"),
        (k & -1, "k"),
        (k | -1, "-1"),
        (k << 0, "k"),
        (te.const(0) >> k, "0"),
        (u & 255, "u"),
        (u | 255, "uint8(255)"),
        ((k & 7) < 8, "True"),
        ((k & 7) >= 0, "True"),
        ((k | 7) < 8, "k | 7 < 8"),  # no bound: k may be anything
        (k ^ 3 ^ 3, "k ^ 3 ^ 3"),  # kept as written
    ]
    for expr, expected in cases:
        assert repr(ANA.simplify(expr)) == expected
    assert ANA.interval((k & 12) + 1) == (1, 13)
    assert ANA.interval(k & -4) == (None, None)  # a negative mask keeps the sign bit

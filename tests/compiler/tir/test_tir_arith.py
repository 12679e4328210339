"""The index-expression simplifier and interval analysis."""

from __future__ import annotations

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
    assert (repr(lo), repr(hi)) == ("k*4//8", "(k*4 + 7)//8")


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
    op = draw(st.sampled_from(["+", "-", "*", "//", "%", "min", "max"]))
    a = draw(index_exprs(depth - 1))
    if op in ("//", "%", "*"):
        c = draw(st.integers(1, 6))
        return {"//": a // c, "%": a % c, "*": a * c}[op]
    b = draw(index_exprs(depth - 1))
    return {"+": a + b, "-": a - b, "min": te.min(a, b), "max": te.max(a, b)}[op]


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


UVARS = [te.var("u", "uint32"), te.var("v", "uint32")]


@st.composite
def unsigned_exprs(draw: st.DrawFn, depth: int = 3) -> te.Expr:
    """uint32 expressions: constants are Python ints (they take the dtype), 0 included."""
    if depth == 0 or draw(st.booleans()):
        if draw(st.booleans()):
            return draw(st.sampled_from(UVARS))
        return te.const(draw(st.integers(0, 9)), "uint32")
    op = draw(st.sampled_from(["+", "-", "*", "//", "%", "min", "max"]))
    a = draw(unsigned_exprs(depth - 1))
    if op in ("//", "%"):
        c = draw(st.integers(1, 6))
        return a // c if op == "//" else a % c
    b = draw(unsigned_exprs(depth - 1))
    table = {"+": a + b, "-": a - b, "*": a * b, "min": te.min(a, b), "max": te.max(a, b)}
    return table[op]


@settings(max_examples=200, deadline=None)
@given(
    expr=unsigned_exprs(),
    values=st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=2),
    bound=st.integers(0, 2**32 - 1),
)
def test_simplify_keeps_unsigned_wraparound(expr, values, bound) -> None:
    # e.g. `u - v < 7` is not `u - v - 7 < 0` (nor `u < v + 7`) once u - v wraps
    env = dict(zip(UVARS, values, strict=True))
    for e in (expr, expr < bound, expr >= 3):
        assert _evaluate(ANA.simplify(e), env) == _evaluate(e, env)


def test_unsigned_comparisons_are_not_rewritten_as_differences() -> None:
    u, v = UVARS
    assert repr(ANA.simplify(u < v)) == "u < v"
    assert repr(ANA.simplify(u - v < te.const(5, "uint32"))) == "u - v < uint32(5)"
    assert ANA.interval(u + 1) == (None, None)

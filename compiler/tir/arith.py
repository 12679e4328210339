"""Arithmetic analysis of index expressions: canonical affine simplification and intervals.

Integer expressions are put in a canonical affine form `sum(coeff * atom) + const`, where atoms
are variables or non-linear subterms (floordiv, floormod, min, loads...). Floor division and
modulo by constants split off the divisible part and vanish when the interval analysis proves
the remainder's range. Comparisons become `terms < c` (or `terms >= c`) and fold when provable.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from ..te import dtype as dt
from ..te.expr import (
    BITWISE_OPS,
    BinOp,
    Call,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Op,
    Select,
    Var,
    const,
)
from ..te.visitor import ExprMutator, pre_order, structural_key

Interval = tuple[int | None, int | None]  # inclusive; None is unbounded
_LINEAR_OPS = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.FLOORMOD)


class _Lin:
    """sum(coeff * atom) + const, atoms keyed structurally, in first-appearance order."""

    __slots__ = ("terms", "const")

    def __init__(self, terms: dict[Any, list[Any]] | None = None, const: int = 0) -> None:
        self.terms = terms if terms is not None else {}
        self.const = const

    @staticmethod
    def atom(expr: Expr) -> _Lin:
        return _Lin({structural_key(expr): [expr, 1]})

    def is_const(self) -> bool:
        return not self.terms

    def scaled(self, c: int) -> _Lin:
        if c == 0:
            return _Lin()
        return _Lin({k: [a, n * c] for k, (a, n) in self.terms.items()}, self.const * c)

    def plus(self, other: _Lin, sign: int = 1) -> _Lin:
        terms = {k: [a, n] for k, (a, n) in self.terms.items()}
        for k, (a, n) in other.terms.items():
            if k in terms:
                terms[k][1] += sign * n
            else:
                terms[k] = [a, sign * n]
        return _Lin({k: v for k, v in terms.items() if v[1] != 0}, self.const + sign * other.const)

    def to_expr(self, dtype: str) -> Expr:
        pos = [(a, n) for a, n in self.terms.values() if n > 0]
        neg = [(a, -n) for a, n in self.terms.values() if n < 0]
        result: Expr | None = None
        for atom, n in pos:
            term = atom if n == 1 else BinOp(Op.MUL, atom, IntImm(n, dtype), dtype)
            result = term if result is None else BinOp(Op.ADD, result, term, dtype)
        if result is None and neg:
            result = IntImm(0, dtype) if self.const == 0 else IntImm(self.const, dtype)
            consumed = True
        else:
            consumed = False
        for atom, n in neg:
            term = atom if n == 1 else BinOp(Op.MUL, atom, IntImm(n, dtype), dtype)
            result = BinOp(Op.SUB, result, term, dtype)  # type: ignore[arg-type]
        if result is None:
            return IntImm(self.const, dtype)
        if self.const > 0 and not consumed:
            return BinOp(Op.ADD, result, IntImm(self.const, dtype), dtype)
        if self.const < 0 and not consumed:
            return BinOp(Op.SUB, result, IntImm(-self.const, dtype), dtype)
        return result


def _is_index(expr: Expr) -> bool:
    """int32 and int64 are treated as exact (overflow is outside the IR's contract, as in TVM).
    Other integers wrap where values live (uint32 `2 - 3` is 2**32 - 1, int8 `100 - -100` is
    -56), so their arithmetic and comparisons stay as written."""
    return expr.dtype in ("int32", "int64")


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def _mul_interval(x: Interval, y: Interval) -> Interval:
    if None in x or None in y:
        return (None, None)
    products = [p * q for p in x for q in y]  # type: ignore[operator]
    return (min(products), max(products))


class Analyzer:
    """Simplifies expressions and bounds them, given constant ranges of some variables.

    Example:
        >>> from tensorforge.compiler.te import var
        >>> i, j = var("i"), var("j")
        >>> ana = Analyzer({j: (0, 7)})
        >>> ana.simplify((i * 8 + j) // 8)
        i
    """

    def __init__(self, bounds: Mapping[Var, tuple[int, int]] | None = None) -> None:
        self.bounds: dict[Var, tuple[int, int]] = dict(bounds or {})

    def with_bound(self, var: Var, lo: int, hi: int) -> Analyzer:
        """A copy that also knows lo <= var <= hi."""
        return Analyzer({**self.bounds, var: (lo, hi)})

    # ---- public --------------------------------------------------------------------------

    def simplify(self, expr: Expr) -> Expr:
        """An equivalent, simpler expression (canonical affine form for integers)."""
        return _Simplifier(self).visit(expr)

    def interval(self, expr: Expr) -> Interval:
        """Inclusive constant bounds of an integer expression (None where unbounded)."""
        if not _is_index(expr):
            return (None, None)
        return self._lin_interval(self._linear(expr))

    def can_prove(self, cond: Expr) -> bool:
        """Whether `cond` simplifies to True."""
        result = self.simplify(cond)
        return isinstance(result, IntImm) and result.value == 1

    def symbolic_interval(self, expr: Expr, relax: Collection[Var]) -> tuple[Expr, Expr] | None:
        """Bounds of `expr` as expressions of the variables not in `relax`, each relaxed
        variable ranging over its known bounds; None when unbounded."""
        if not _is_index(expr):
            return None
        lo, hi = _Lin(), _Lin()
        for atom, n in self._linear(expr).terms.values():
            got = self._atom_symbolic(atom, relax)
            if got is None:
                return None
            a_lo, a_hi = got
            lo = lo.plus((a_lo if n > 0 else a_hi).scaled(n))
            hi = hi.plus((a_hi if n > 0 else a_lo).scaled(n))
        base = self._linear(expr).const
        lo.const += base
        hi.const += base
        return self.simplify(lo.to_expr(expr.dtype)), self.simplify(hi.to_expr(expr.dtype))

    def linear_in(self, expr: Expr, var: Var) -> tuple[int, Expr] | None:
        """`(c, rest)` with expr == c*var + rest and `var` not in `rest`; None if non-linear."""
        lin = self._linear(expr)
        key = structural_key(var)
        coeff = lin.terms[key][1] if key in lin.terms else 0
        rest = _Lin({k: v for k, v in lin.terms.items() if k != key}, lin.const)
        for atom, _ in rest.terms.values():
            if any(node is var for node in pre_order(atom)):
                return None
        return coeff, rest.to_expr(expr.dtype)

    # ---- affine form ------------------------------------------------------------------

    def _linear(self, expr: Expr) -> _Lin:
        if isinstance(expr, IntImm):
            return _Lin(const=expr.value)
        if isinstance(expr, Var):
            return _Lin.atom(expr)
        if isinstance(expr, BinOp) and expr.op in (Op.ADD, Op.SUB):
            sign = 1 if expr.op is Op.ADD else -1
            return _merge_divmod(self._linear(expr.a).plus(self._linear(expr.b), sign), self)
        if isinstance(expr, BinOp) and expr.op is Op.MUL:
            la, lb = self._linear(expr.a), self._linear(expr.b)
            if lb.is_const():
                return la.scaled(lb.const)
            if la.is_const():
                return lb.scaled(la.const)
            a, b = la.to_expr(expr.dtype), lb.to_expr(expr.dtype)
            return _Lin.atom(BinOp(Op.MUL, a, b, expr.dtype))
        if isinstance(expr, BinOp) and expr.op in (Op.FLOORDIV, Op.FLOORMOD, Op.DIV):
            return self._linear_div(expr)
        simplified = self.simplify_node(expr)
        if isinstance(simplified, IntImm | Var) or (
            isinstance(simplified, BinOp) and simplified.op in _LINEAR_OPS
        ):
            return self._linear(simplified)  # e.g. min(a, b) resolved to a
        return _Lin.atom(simplified)

    def simplify_node(self, expr: Expr) -> Expr:
        return _Simplifier(self).generic_rewrite(expr)

    def _linear_div(self, expr: BinOp) -> _Lin:
        la, lb = self._linear(expr.a), self._linear(expr.b)
        op = expr.op
        if op is Op.DIV:  # C division equals floor division when both sides are non-negative
            lo_a, lo_b = self._lin_interval(la)[0], self._lin_interval(lb)[0]
            if lo_a is None or lo_b is None or lo_a < 0 or lo_b <= 0:
                return _Lin.atom(
                    BinOp(op, la.to_expr(expr.dtype), lb.to_expr(expr.dtype), expr.dtype)
                )
            op = Op.FLOORDIV
        if lb.is_const() and lb.const > 0:
            c = lb.const
            if op is Op.FLOORDIV:
                return self._floordiv(la, c, expr.dtype)
            return self._floormod(la, c, expr.dtype)
        if lb.is_const() and la.is_const() and lb.const != 0:
            value = la.const // lb.const if op is Op.FLOORDIV else la.const % lb.const
            return _Lin(const=value)
        return _Lin.atom(BinOp(op, la.to_expr(expr.dtype), lb.to_expr(expr.dtype), expr.dtype))

    def _split_divisible(self, lin: _Lin, c: int) -> tuple[_Lin, _Lin]:
        quotient, rest = _Lin(const=lin.const // c), _Lin(const=lin.const % c)
        for k, (a, n) in lin.terms.items():
            if n % c == 0:
                quotient.terms[k] = [a, n // c]
            else:
                rest.terms[k] = [a, n]
        return quotient, rest

    def _floordiv(self, lin: _Lin, c: int, dtype: str) -> _Lin:
        if c == 1:
            return lin
        quotient, rest = self._split_divisible(lin, c)
        lo, hi = self._lin_interval(rest)
        if lo is not None and hi is not None and lo // c == hi // c:
            return quotient.plus(_Lin(const=lo // c))
        scaled = self._scaled_floordiv(rest, c, dtype)
        if scaled is not None:
            return quotient.plus(scaled)
        inner = _single_atom(rest)
        if isinstance(inner, BinOp) and inner.op is Op.FLOORDIV and _const_of(inner.b) > 0:
            merged = BinOp(Op.FLOORDIV, inner.a, IntImm(_const_of(inner.b) * c, dtype), dtype)
            return quotient.plus(_Lin.atom(merged))
        atom = BinOp(Op.FLOORDIV, rest.to_expr(dtype), IntImm(c, dtype), dtype)
        return quotient.plus(_Lin.atom(atom))

    def _scaled_floordiv(self, rest: _Lin, c: int, dtype: str) -> _Lin | None:
        """(n*a + b) // c as a // (c/n) when n divides c and 0 <= b < n (`a` the terms whose
        coefficients n divides, `b` the others): a split loop's index (outer * factor + inner)
        divided by a multiple of the factor depends on the outer variables alone, so a tile's
        bounds stay exact (a grouped conv's input block ``(o // q) * r`` over a tile of output
        blocks inside one group, virtual threads included)."""
        for n in sorted({math.gcd(coeff, c) for _, coeff in rest.terms.values()}, reverse=True):
            if n < 2:
                continue
            aligned = {k: [a, coeff // n] for k, (a, coeff) in rest.terms.items() if coeff % n == 0}
            others = _Lin({k: v for k, v in rest.terms.items() if k not in aligned}, rest.const)
            lo, hi = self._lin_interval(others)
            if lo is not None and hi is not None and 0 <= lo and hi < n:
                return self._floordiv(_Lin(aligned), c // n, dtype)
        return None

    def _floormod(self, lin: _Lin, c: int, dtype: str) -> _Lin:
        if c == 1:
            return _Lin()
        _, rest = self._split_divisible(lin, c)
        lo, hi = self._lin_interval(rest)
        if lo is not None and hi is not None and lo // c == hi // c:
            return rest.plus(_Lin(const=-(lo // c) * c))
        return _Lin.atom(BinOp(Op.FLOORMOD, rest.to_expr(dtype), IntImm(c, dtype), dtype))

    # ---- intervals ----------------------------------------------------------------------

    def _lin_interval(self, lin: _Lin) -> Interval:
        lo: int | None = lin.const
        hi: int | None = lin.const
        for atom, n in lin.terms.values():
            a_lo, a_hi = self._atom_interval(atom)
            s_lo, s_hi = _mul_interval((a_lo, a_hi), (n, n))
            lo, hi = _add(lo, s_lo), _add(hi, s_hi)
        return lo, hi

    def _atom_interval(self, atom: Expr) -> Interval:
        if isinstance(atom, Var):
            return self.bounds.get(atom, (None, None))
        if isinstance(atom, IntImm):
            return (atom.value, atom.value)
        if isinstance(atom, BinOp) and atom.op in (Op.FLOORDIV, Op.FLOORMOD):
            c = _const_of(atom.b)
            lo, hi = self.interval(atom.a)
            if c > 0 and atom.op is Op.FLOORDIV:
                return (None if lo is None else lo // c, None if hi is None else hi // c)
            if c > 0:
                if lo is not None and hi is not None and lo // c == hi // c:
                    return (lo % c, hi % c)
                return (0, c - 1)
        if isinstance(atom, BinOp) and atom.op is Op.MUL:
            return _mul_interval(self.interval(atom.a), self.interval(atom.b))
        if isinstance(atom, BinOp) and atom.op is Op.BIT_AND:
            # x & m with a mask m >= 0 keeps only m's bits: in [0, m] whatever x is
            masks = [c.value for c in (atom.a, atom.b) if isinstance(c, IntImm) and c.value >= 0]
            if masks:
                return (0, min(masks))
        if isinstance(atom, BinOp) and atom.op in (Op.MIN, Op.MAX):
            (al, ah), (bl, bh) = self.interval(atom.a), self.interval(atom.b)
            pick = min if atom.op is Op.MIN else max
            return (
                None if al is None or bl is None else pick(al, bl),
                None if ah is None or bh is None else pick(ah, bh),
            )
        if isinstance(atom, Select):
            (tl, th), (fl, fh) = self.interval(atom.true_value), self.interval(atom.false_value)
            return (
                None if tl is None or fl is None else min(tl, fl),
                None if th is None or fh is None else max(th, fh),
            )
        if atom.dtype not in ("int32", "int64"):
            return (int(dt.min_value(atom.dtype)), int(dt.max_value(atom.dtype)))
        return (None, None)

    def _atom_symbolic(self, atom: Expr, relax: Collection[Var]) -> tuple[_Lin, _Lin] | None:
        mentions = [v for v in pre_order(atom) if isinstance(v, Var) and v in relax]
        if not mentions:
            lin = _Lin.atom(atom)
            return lin, lin
        if isinstance(atom, BinOp) and atom.op is Op.FLOORDIV and _const_of(atom.b) > 0:
            inner = self.symbolic_interval(atom.a, relax)
            if inner is not None:
                c = atom.b
                lo = self._linear(BinOp(Op.FLOORDIV, inner[0], c, atom.dtype))
                hi = self._linear(BinOp(Op.FLOORDIV, inner[1], c, atom.dtype))
                return lo, hi
        lo, hi = self._atom_interval(atom)
        if lo is None or hi is None:
            return None
        return _Lin(const=lo), _Lin(const=hi)


def _const_of(expr: Expr) -> int:
    return expr.value if isinstance(expr, IntImm) and not dt.is_bool(expr.dtype) else 0


def _single_atom(lin: _Lin) -> Expr | None:
    if lin.const == 0 and len(lin.terms) == 1:
        ((atom, n),) = lin.terms.values()
        return atom if n == 1 else None
    return None


def _merge_divmod(lin: _Lin, ana: Analyzer) -> _Lin:
    """Rewrite k*c*(x // c) + k*(x % c) as k*x (the inverse of fuse)."""
    for key, (atom, n) in list(lin.terms.items()):
        if not (isinstance(atom, BinOp) and atom.op is Op.FLOORMOD and key in lin.terms):
            continue
        c = _const_of(atom.b)
        div_key = structural_key(BinOp(Op.FLOORDIV, atom.a, atom.b, atom.dtype))
        if c > 0 and div_key in lin.terms and lin.terms[div_key][1] == n * c:
            rest = _Lin({k: v for k, v in lin.terms.items() if k not in (key, div_key)}, lin.const)
            return _merge_divmod(rest.plus(ana._linear(atom.a).scaled(n)), ana)
    return lin


# ---- the rewriter -----------------------------------------------------------------------------


def _fold_float(op: Op, a: float, b: float) -> float | bool | None:
    table = {
        Op.ADD: lambda: a + b,
        Op.SUB: lambda: a - b,
        Op.MUL: lambda: a * b,
        Op.DIV: lambda: a / b if b != 0 else None,
        Op.MIN: lambda: min(a, b),
        Op.MAX: lambda: max(a, b),
        Op.EQ: lambda: a == b,
        Op.NE: lambda: a != b,
        Op.LT: lambda: a < b,
        Op.LE: lambda: a <= b,
        Op.GT: lambda: a > b,
        Op.GE: lambda: a >= b,
    }
    fn = table.get(op)
    return None if fn is None else fn()


def _float_const(value: float, dtype: str) -> FloatImm:
    if dtype != "float64" and math.isfinite(value):
        value = float(np.dtype(dtype).type(value))
    return FloatImm(value, dtype)


_TRUE, _FALSE = IntImm(1, "bool"), IntImm(0, "bool")


def _is_bool_const(expr: Expr, value: bool) -> bool:
    return isinstance(expr, IntImm) and dt.is_bool(expr.dtype) and expr.value == int(value)


class _Simplifier(ExprMutator):
    def __init__(self, ana: Analyzer) -> None:
        self.ana = ana

    def visit(self, expr: Expr) -> Expr:
        if _is_index(expr) and isinstance(expr, (Var, IntImm, BinOp)) and not _is_cmp(expr):
            lin = self.ana._linear(expr)
            return lin.to_expr(expr.dtype)
        return super().visit(expr)

    def generic_rewrite(self, expr: Expr) -> Expr:
        return super().visit(expr)

    def visit_BinOp(self, e: BinOp) -> Expr:
        a, b = self.visit(e.a), self.visit(e.b)
        if e.op in (Op.AND, Op.OR):
            return _logic(e.op, a, b)
        if e.op in (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE) and _is_index(a):
            return self._compare(e.op, a, b)
        if e.op in (Op.MIN, Op.MAX) and _is_index(a):
            return self._min_max(e.op, a, b)
        if e.op in BITWISE_OPS:
            return _bitwise(e, a, b)
        if isinstance(a, FloatImm) and isinstance(b, FloatImm):
            value = _fold_float(e.op, a.value, b.value)
            if isinstance(value, bool):
                return const(value)
            if value is not None:
                return _float_const(value, e.dtype)
        if isinstance(b, FloatImm) and dt.is_float(e.dtype):
            if (e.op is Op.MUL and b.value == 1.0) or (e.op in (Op.ADD, Op.SUB) and b.value == 0):
                return a
        if a is e.a and b is e.b:
            return e
        return BinOp(e.op, a, b, e.dtype)

    def _compare(self, op: Op, a: Expr, b: Expr) -> Expr:
        if op in (Op.EQ, Op.NE):
            lo, hi = self.ana.interval(BinOp(Op.SUB, a, b, a.dtype))
            if lo is not None and lo == hi:
                return const((lo == 0) == (op is Op.EQ))
            if (lo is not None and lo > 0) or (hi is not None and hi < 0):
                return const(op is Op.NE)
            return BinOp(op, a, b, "bool")
        # everything becomes d < 0
        diff = {
            Op.LT: (a, b, 0),
            Op.LE: (a, b, -1),
            Op.GT: (b, a, 0),
            Op.GE: (b, a, -1),
        }[op]
        x, y, shift = diff
        d = self.ana._linear(x).plus(self.ana._linear(y), -1).plus(_Lin(const=shift))
        lo, hi = self.ana._lin_interval(d)
        if hi is not None and hi < 0:
            return _TRUE
        if lo is not None and lo >= 0:
            return _FALSE
        if not _exact_difference(d, lo, hi, a.dtype):  # d could wrap: keep the comparison
            return BinOp(op, a, b, "bool")
        return _canonical_lt(d, a.dtype)

    def _min_max(self, op: Op, a: Expr, b: Expr) -> Expr:
        d = self.ana._linear(a).plus(self.ana._linear(b), -1)
        lo, hi = self.ana._lin_interval(d)
        if hi is not None and hi <= 0:
            return a if op is Op.MIN else b
        if lo is not None and lo >= 0:
            return b if op is Op.MIN else a
        return BinOp(op, a, b, a.dtype)

    def visit_Not(self, e: Not) -> Expr:
        a = self.visit(e.a)
        if isinstance(a, IntImm):
            return const(not a.value)
        flipped = {
            Op.LT: Op.GE,
            Op.GE: Op.LT,
            Op.LE: Op.GT,
            Op.GT: Op.LE,
            Op.EQ: Op.NE,
            Op.NE: Op.EQ,
        }
        if isinstance(a, BinOp) and a.op in flipped and _is_index(a.a):
            return self.visit(BinOp(flipped[a.op], a.a, a.b, "bool"))
        return e if a is e.a else Not(a)

    def visit_Select(self, e: Select) -> Expr:
        cond = self.visit(e.condition)
        if isinstance(cond, IntImm):
            return self.visit(e.true_value if cond.value else e.false_value)
        t, f = self.visit(e.true_value), self.visit(e.false_value)
        return Select(cond, t, f, e.dtype)

    def visit_Call(self, e: Call) -> Expr:
        args = tuple(self.visit(a) for a in e.args)
        if e.name == "if_then_else" and isinstance(args[0], IntImm):
            return args[1] if args[0].value else args[2]
        if all(n is o for n, o in zip(args, e.args, strict=True)):
            return e
        return Call(e.name, args, e.dtype, e.kind)

    def visit_Cast(self, e: Cast) -> Expr:
        value = self.visit(e.value)
        if value.dtype == e.dtype:
            return value
        if isinstance(value, IntImm | FloatImm):
            return _cast_const(value, e.dtype)
        return e if value is e.value else Cast(e.dtype, value)


def _is_cmp(expr: Expr) -> bool:
    return isinstance(expr, BinOp) and expr.dtype == "bool"


def _cast_const(value: IntImm | FloatImm, dtype: str) -> Expr:
    if dt.is_bool(dtype):
        return const(bool(value.value))
    if dt.is_float(dtype):
        return _float_const(float(value.value), dtype)
    if isinstance(value, FloatImm) and not math.isfinite(value.value):
        return Cast(dtype, value)
    return IntImm(dt.wrap_int(int(value.value), dtype), dtype)


def _logic(op: Op, a: Expr, b: Expr) -> Expr:
    absorbing = op is Op.OR  # True absorbs in OR, False absorbs in AND
    for x, y in ((a, b), (b, a)):
        if _is_bool_const(x, absorbing):
            return x
        if _is_bool_const(x, not absorbing):
            return y
    return BinOp(op, a, b, "bool")


def _bitwise(e: BinOp, a: Expr, b: Expr) -> Expr:
    """A bitwise operation of two constants folded (at the dtype's width, shifts by numpy's
    rules at every amount: `dt.shift_int`), and the identities of 0 and all ones: x & 0 = 0,
    x & ~0 = x | 0 = x ^ 0 = x << 0 = x >> 0 = x, x | ~0 = ~0, 0 << n = 0 >> n = 0."""
    dtype = e.dtype
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        x, n = a.value, b.value
        if e.op in (Op.SHL, Op.SHR):
            return IntImm(dt.shift_int(x, n, dtype, e.op is Op.SHL), dtype)
        value = {Op.BIT_AND: x & n, Op.BIT_OR: x | n, Op.BIT_XOR: x ^ n}[e.op]
        return IntImm(dt.wrap_int(value, dtype), dtype)
    ones = dt.wrap_int(-1, dtype)
    if e.op in (Op.SHL, Op.SHR):
        if _is_const_int(b, 0) or _is_const_int(a, 0):
            return a
    else:
        for x, y in ((a, b), (b, a)):
            if _is_const_int(y, 0):
                return y if e.op is Op.BIT_AND else x
            if _is_const_int(y, ones) and e.op is not Op.BIT_XOR:
                return x if e.op is Op.BIT_AND else y
    if a is e.a and b is e.b:
        return e
    return BinOp(e.op, a, b, dtype)


def _is_const_int(expr: Expr, value: int) -> bool:
    return isinstance(expr, IntImm) and not dt.is_bool(expr.dtype) and expr.value == value


def _exact_difference(d: _Lin, lo: int | None, hi: int | None, dtype: str) -> bool:
    """Whether the difference `d` of two compared values is exact in `dtype`: a signed index
    type and either loop arithmetic (variables only, taken as not overflowing, as everywhere in
    index math) or a range inside the type's. Data (loads, narrow or unsigned values) may wrap."""
    if dtype not in ("int32", "int64"):
        return False
    if all(isinstance(atom, Var) for atom, _ in d.terms.values()):
        return True
    return (
        lo is not None and hi is not None and dt.min_value(dtype) <= lo <= hi <= dt.max_value(dtype)
    )


def _canonical_lt(d: _Lin, dtype: str) -> Expr:
    """`d < 0` as `terms < c` (or `terms >= c` when every coefficient is negative)."""
    g = 0
    for _, n in d.terms.values():
        g = math.gcd(g, n)
    terms = _Lin({k: [a, n // g] for k, (a, n) in d.terms.items()})
    bound = -(d.const // g)  # t*g + k < 0  <=>  t < ceil(-k/g)
    if all(n < 0 for _, n in terms.terms.values()):
        # -t < bound  <=>  t >= 1 - bound
        return BinOp(Op.GE, terms.scaled(-1).to_expr(dtype), IntImm(1 - bound, dtype), "bool")
    return BinOp(Op.LT, terms.to_expr(dtype), IntImm(bound, dtype), "bool")


def simplify(expr: Expr, bounds: Mapping[Var, tuple[int, int]] | None = None) -> Expr:
    """Simplify `expr` knowing inclusive constant `bounds` of some variables."""
    return Analyzer(bounds).simplify(expr)

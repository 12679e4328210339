"""Scalar expression nodes shared by tensor expressions and the loop IR, with dtype inference."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import dtype as dt

if TYPE_CHECKING:
    from .tensor import IterVar, Tensor


class Op(enum.Enum):
    """Binary operator kinds of `BinOp`."""

    # arithmetic: the result has the operands' (promoted) dtype
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"  # true division for floats, C (truncating) division for integers
    FLOORDIV = "//"
    FLOORMOD = "%"
    MIN = "min"
    MAX = "max"
    # comparison: the result is bool
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    # logical: bool operands and result
    AND = "&&"
    OR = "||"
    # bitwise: integer operands, the result has their (promoted) dtype. `&`, `|` and `^` of two
    # bools build AND, OR and NE instead, and `~` of a bool a `Not`; `~x` of an integer is
    # `x ^ -1` (all ones). Shifts are numpy's at every amount: the amount is read as unsigned,
    # and one of `bits` or more shifts every bit out (0, or -1 for `>>` of a negative x).
    BIT_AND = "&"
    BIT_OR = "|"
    BIT_XOR = "^"
    SHL = "<<"
    SHR = ">>"  # arithmetic for signed operands, logical for unsigned


ARITH_OPS = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.FLOORMOD, Op.MIN, Op.MAX)
COMPARE_OPS = (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE)
LOGIC_OPS = (Op.AND, Op.OR)
BITWISE_OPS = (Op.BIT_AND, Op.BIT_OR, Op.BIT_XOR, Op.SHL, Op.SHR)
SHIFT_OPS = (Op.SHL, Op.SHR)
# what each bitwise operator is called in errors
BITWISE_NAMES = {
    Op.BIT_AND: "bitwise and",
    Op.BIT_OR: "bitwise or",
    Op.BIT_XOR: "bitwise xor",
    Op.SHL: "left shift",
    Op.SHR: "right shift",
}
# the bitwise operators of two bools, as logical ones (a bool xor is !=)
_LOGICAL_OF = {Op.BIT_AND: Op.AND, Op.BIT_OR: Op.OR, Op.BIT_XOR: Op.NE}


class CallKind(enum.Enum):
    """How a `Call` may be treated by passes and back-ends."""

    PURE = "pure"  # math intrinsic: no side effects, may be folded, duplicated or dropped
    EXTERN = "extern"  # opaque (tensor intrinsics, barriers, DMA): never moved or dropped


# Math intrinsics: name -> number of operands. All take and return floats.
MATH_INTRINSICS = {
    "exp": 1,
    "exp2": 1,
    "log": 1,
    "log2": 1,
    "log1p": 1,
    "sqrt": 1,
    "rsqrt": 1,
    "tanh": 1,
    "sigmoid": 1,
    "erf": 1,
    "sin": 1,
    "cos": 1,
    "tan": 1,
    "asin": 1,
    "acos": 1,
    "atan": 1,
    "sinh": 1,
    "cosh": 1,
    "asinh": 1,
    "acosh": 1,
    "atanh": 1,
    "floor": 1,
    "ceil": 1,
    "round": 1,
    "trunc": 1,
    "pow": 2,
    "fmod": 2,  # C fmod: the remainder with the dividend's sign
}

# Integer intrinsics: take an integer and a shift amount in [0, bits), return the first dtype.
# Calls, not BinOps, so the affine simplifier keeps them whole (it would treat a shift written
# as `x // 2**n` as exact arithmetic and move terms across it, which wrapping values break).
INT_INTRINSICS = {"shift_left": 2, "shift_right": 2}

# Bit intrinsics: `reinterpret` reads its operand's bits as the call's dtype, of the same width
# (ONNX BitCast); no value conversion, so NaN payloads and -0.0 keep their bits.
BIT_INTRINSICS = {"reinterpret": 1}

# Dot-product intrinsics on packed integers: each int32 operand holds two int16 halves
# (`dot_i16x2`, low half first) or four bytes (`dot_u8i8x4`, the first operand's unsigned, the
# second's signed, low byte first); the call is the int32 sum of the lane-wise products:
#   dot_i16x2(a, b) = lo16(a) * lo16(b) + hi16(a) * hi16(b)           (x86 pmaddwd)
#   dot_u8i8x4(a, b) = sum_j u8(a.byte[j]) * s8(b.byte[j])            (x86 vpdpbusd, less acc)
# `dot_u8i8x4` is always exact (|sum| <= 4 * 255 * 128); `dot_i16x2` wraps only for
# -32768 * -32768 twice. The LLVM back-end emits the x86 instructions where the target has them
# (`acc + dot_u8i8x4(a, b)` as one vpdpbusd, the non-saturating form) and the plain arithmetic
# elsewhere.
DOT_INTRINSICS = {"dot_i16x2": 2, "dot_u8i8x4": 2}


class ExprOps:
    """Python operators that build expressions; shared by `Expr` and `IterVar`."""

    __slots__ = ()

    def __add__(self, other: Any) -> Expr:
        return binary(Op.ADD, self, other)

    def __radd__(self, other: Any) -> Expr:
        return binary(Op.ADD, other, self)

    def __sub__(self, other: Any) -> Expr:
        return binary(Op.SUB, self, other)

    def __rsub__(self, other: Any) -> Expr:
        return binary(Op.SUB, other, self)

    def __mul__(self, other: Any) -> Expr:
        return binary(Op.MUL, self, other)

    def __rmul__(self, other: Any) -> Expr:
        return binary(Op.MUL, other, self)

    def __truediv__(self, other: Any) -> Expr:
        return binary(Op.DIV, self, other)

    def __rtruediv__(self, other: Any) -> Expr:
        return binary(Op.DIV, other, self)

    def __floordiv__(self, other: Any) -> Expr:
        return binary(Op.FLOORDIV, self, other)

    def __rfloordiv__(self, other: Any) -> Expr:
        return binary(Op.FLOORDIV, other, self)

    def __mod__(self, other: Any) -> Expr:
        return binary(Op.FLOORMOD, self, other)

    def __rmod__(self, other: Any) -> Expr:
        return binary(Op.FLOORMOD, other, self)

    def __neg__(self) -> Expr:
        return binary(Op.SUB, 0, self)

    def __lt__(self, other: Any) -> Expr:
        return binary(Op.LT, self, other)

    def __le__(self, other: Any) -> Expr:
        return binary(Op.LE, self, other)

    def __gt__(self, other: Any) -> Expr:
        return binary(Op.GT, self, other)

    def __ge__(self, other: Any) -> Expr:
        return binary(Op.GE, self, other)

    # bitwise on integers; on two bools `&`, `|`, `^` and `~` are and, or, xor and not
    def __and__(self, other: Any) -> Expr:
        return binary(Op.BIT_AND, self, other)

    def __rand__(self, other: Any) -> Expr:
        return binary(Op.BIT_AND, other, self)

    def __or__(self, other: Any) -> Expr:
        return binary(Op.BIT_OR, self, other)

    def __ror__(self, other: Any) -> Expr:
        return binary(Op.BIT_OR, other, self)

    def __xor__(self, other: Any) -> Expr:
        return binary(Op.BIT_XOR, self, other)

    def __rxor__(self, other: Any) -> Expr:
        return binary(Op.BIT_XOR, other, self)

    def __lshift__(self, other: Any) -> Expr:
        return binary(Op.SHL, self, other)

    def __rlshift__(self, other: Any) -> Expr:
        return binary(Op.SHL, other, self)

    def __rshift__(self, other: Any) -> Expr:
        return binary(Op.SHR, self, other)

    def __rrshift__(self, other: Any) -> Expr:
        return binary(Op.SHR, other, self)

    def __invert__(self) -> Expr:
        return bitwise_not(self)

    def astype(self, dtype: str) -> Expr:
        return cast(self, dtype)


class Expr(ExprOps):
    """Base of scalar expression nodes. Every node has a `dtype` field.

    Nodes compare by identity; `a == b` builds an `EQ` node (use `structural_equal` to compare
    trees). Such a node is truthy only when both sides are the same object, as in TVM.
    """

    __slots__ = ()
    dtype: str

    def __eq__(self, other: Any) -> Expr:  # type: ignore[override]
        return binary(Op.EQ, self, other)

    def __ne__(self, other: Any) -> Expr:  # type: ignore[override]
        return binary(Op.NE, self, other)

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TypeError(
            "a symbolic expression has no truth value; use te.select/te.if_then_else for "
            "conditions, not Python `if`/`and`/`or`"
        )

    def __repr__(self) -> str:
        from .visitor import expr_to_str  # the printer builds on every node; imported late

        return expr_to_str(self)


def _node(cls: type) -> type:
    return dataclass(frozen=True, slots=True, eq=False, repr=False)(cls)


@_node
class Var(Expr):
    """A scalar variable (loop variable, symbolic parameter). Compared by identity."""

    name: str
    dtype: str = dt.INDEX_DTYPE


@_node
class IntImm(Expr):
    """An integer or bool constant."""

    value: int
    dtype: str = dt.INDEX_DTYPE


@_node
class FloatImm(Expr):
    """A floating-point constant."""

    value: float
    dtype: str = "float32"


@_node
class Cast(Expr):
    """Conversion of `value` to `dtype` (float->int truncates toward zero, ints wrap)."""

    dtype: str
    value: Expr


@_node
class BinOp(Expr):
    """`a <op> b`; operands already have the same dtype (the constructors insert casts)."""

    op: Op
    a: Expr
    b: Expr
    dtype: str

    def __bool__(self) -> bool:
        # Lets `var in list` and `==` between handles work as identity tests, as in TVM.
        if self.op is Op.EQ:
            return self.a is self.b
        if self.op is Op.NE:
            return self.a is not self.b
        return Expr.__bool__(self)


@_node
class Not(Expr):
    """Logical negation of a bool expression."""

    a: Expr
    dtype: str = "bool"


@_node
class Select(Expr):
    """`condition ? true_value : false_value`; both branches may be evaluated (no guarding)."""

    condition: Expr
    true_value: Expr
    false_value: Expr
    dtype: str


@_node
class Call(Expr):
    """A call of a math intrinsic, `if_then_else` (lazy) or an opaque extern intrinsic."""

    name: str
    args: tuple[Expr, ...]
    dtype: str
    kind: CallKind = CallKind.PURE


@dataclass(frozen=True, slots=True, eq=False)
class CommReducer:
    """A commutative reducer: `result` combines `lhs` (accumulator) and `rhs` (new value).

    Not an expression itself: `lhs` and `rhs` are bound only inside `result`.
    """

    name: str
    lhs: Var
    rhs: Var
    result: Expr
    identity: Expr
    dtype: str
    # a tuple reducer (argmax over (value, index)) combines several values at once: component c
    # of the result is results[c] of lhs_all and rhs_all; the fields above are component 0
    lhs_all: tuple[Var, ...] = ()
    rhs_all: tuple[Var, ...] = ()
    results: tuple[Expr, ...] = ()
    identities: tuple[Expr, ...] = ()

    @property
    def arity(self) -> int:
        """How many values the reducer combines at once."""
        return max(1, len(self.results))


@_node
class Reduce(Expr):
    """Reduction of `source` over `axis` with `combiner`, counting only where `condition`."""

    combiner: CommReducer
    source: Expr
    axis: tuple[IterVar, ...]
    condition: Expr
    dtype: str
    value_index: int = 0  # which component of a tuple reducer this output is
    sources: tuple[Expr, ...] = ()  # every component's source, for a tuple reducer


@_node
class ProducerLoad(Expr):
    """Element `indices` of tensor `producer` (the te form; lowered to a buffer load)."""

    producer: Tensor
    indices: tuple[Expr, ...]
    dtype: str


# ---- constructors with dtype inference -------------------------------------------------------


def const(value: int | float | bool, dtype: str | None = None) -> Expr:
    """A constant; the dtype defaults to bool, int32 or float32 after the Python type."""
    if dtype is None:
        dtype = "bool" if isinstance(value, bool) else "int32" if isinstance(value, int) else ""
        dtype = dtype or "float32"
    dt.check_dtype(dtype)
    if dt.is_float(dtype):
        return FloatImm(float(value), dtype)
    if dt.is_bool(dtype):
        return IntImm(int(bool(value)), "bool")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"constant of dtype {dtype!r} must be integral, not {value!r}")
    return IntImm(dt.wrap_int(int(value), dtype), dtype)


def as_expr(value: Any, dtype_hint: str | None = None) -> Expr:
    """Convert a Python number, IterVar or Expr to an Expr (numbers take `dtype_hint`)."""
    if isinstance(value, Expr):
        return value
    if hasattr(value, "as_expr"):
        return value.as_expr()
    if isinstance(value, bool):
        return const(value, "bool")
    if isinstance(value, int):
        hint = dtype_hint if dtype_hint and not dt.is_bool(dtype_hint) else "int32"
        return const(value, hint)
    if isinstance(value, float):
        return const(value, dtype_hint if dtype_hint and dt.is_float(dtype_hint) else "float32")
    raise TypeError(f"expected an expression or a number, not {type(value).__name__} {value!r}")


def cast(value: Any, dtype: str) -> Expr:
    """Convert `value` to `dtype` (a no-op when it already has it)."""
    dt.check_dtype(dtype)
    expr = as_expr(value, dtype)
    return expr if expr.dtype == dtype else Cast(dtype, expr)


def match_types(a: Any, b: Any) -> tuple[Expr, Expr]:
    if not isinstance(a, Expr) and not hasattr(a, "as_expr"):
        b = as_expr(b)
        return as_expr(a, b.dtype), b
    a = as_expr(a)
    return a, as_expr(b, a.dtype)


def binary(op: Op, a: Any, b: Any) -> Expr:
    """Build `a <op> b`, converting numbers and promoting dtypes (numpy's rules)."""
    a, b = match_types(a, b)
    if op in LOGIC_OPS:
        for side in (a, b):
            if not dt.is_bool(side.dtype):
                raise TypeError(f"operands of {op.value} must be bool, not {side.dtype!r}")
        return BinOp(op, a, b, "bool")
    if op in BITWISE_OPS:
        return _bitwise(op, a, b)
    common = dt.promote(a.dtype, b.dtype)
    a, b = cast(a, common), cast(b, common)
    return BinOp(op, a, b, "bool" if op in COMPARE_OPS else common)


def _bitwise(op: Op, a: Expr, b: Expr) -> Expr:
    """`a <op> b` for a bitwise `op`: integers (bools promote as numpy does), or two bools for
    `&`, `|`, `^` (the logical operators); floats are a TypeError naming the operator."""
    what = f"{op.value} ({BITWISE_NAMES[op]})"
    for side in (a, b):
        if dt.is_float(side.dtype):
            raise TypeError(f"operands of {what} must be integers or bools, not {side.dtype!r}")
    if dt.is_bool(a.dtype) and dt.is_bool(b.dtype):
        if op in SHIFT_OPS:
            raise TypeError(f"operands of {what} must be integers, not two bools; cast one first")
        return BinOp(_LOGICAL_OF[op], a, b, "bool")
    common = dt.promote(a.dtype, b.dtype)
    if not dt.is_int(common):  # int64 with uint64: numpy's common type is float64
        raise TypeError(
            f"operands of {what} must have a common integer dtype, not {a.dtype!r} and "
            f"{b.dtype!r} (numpy's is {common!r}); cast one first"
        )
    return BinOp(op, cast(a, common), cast(b, common), common)


def logical_not(a: Any) -> Expr:
    a = as_expr(a)
    if not dt.is_bool(a.dtype):
        raise TypeError(f"operand of logical not must be bool, not {a.dtype!r}")
    return Not(a)


def bitwise_not(a: Any) -> Expr:
    """`~a`: every bit flipped (`a ^ -1`) for an integer, the logical not of a bool."""
    a = as_expr(a)
    if dt.is_bool(a.dtype):
        return Not(a)
    if not dt.is_int(a.dtype):
        raise TypeError(f"operand of ~ (bitwise not) must be an integer or bool, not {a.dtype!r}")
    return BinOp(Op.BIT_XOR, a, const(-1, a.dtype), a.dtype)


def all_of(*conds: Any) -> Expr:
    """Conjunction of bool expressions (True when empty)."""
    result: Expr = const(True)
    for i, cond in enumerate(conds):
        result = as_expr(cond) if i == 0 else binary(Op.AND, result, cond)
    return result


def unravel(flat: Any, shape: tuple[int, ...] | list[int]) -> tuple[Any, ...]:
    """The row-major index of flat position `flat` (an expression or int) in an array of
    `shape`: 0 along axes of size 1, no modulo on the outermost axis that has one."""
    out: list[Any] = []
    stride, total = 1, 1
    for d in shape:
        total *= int(d)
    for d in reversed(shape):
        if d == 1:
            out.append(0)
        else:
            q = flat // stride if stride > 1 else flat
            out.append(q % d if stride * d < total else q)
        stride *= int(d)
    return tuple(reversed(out))


def any_of(*conds: Any) -> Expr:
    """Disjunction of bool expressions (False when empty)."""
    result: Expr = const(False)
    for i, cond in enumerate(conds):
        result = as_expr(cond) if i == 0 else binary(Op.OR, result, cond)
    return result


def clamped_read(
    read: Callable[[tuple[Any, ...]], Any],
    lead: Sequence[Any],
    idx: Sequence[Any],
    sizes: Sequence[int],
    fill: Any,
) -> Expr:
    """``read((*lead, *idx))`` where every ``idx[i]`` is in ``[0, sizes[i])``, else ``fill``: a
    select over a read whose address is clamped into the tensor, so it never leaves it and
    (unlike ``if_then_else``) vectorizes. The zero-padded reads of the CPU and GPU
    convolutions and pads."""
    inside = all_of(*(i >= 0 for i in idx), *(i < d for i, d in zip(idx, sizes, strict=True)))
    clamped = [min_expr(max_expr(i, 0), int(d) - 1) for i, d in zip(idx, sizes, strict=True)]
    return select(inside, read((*lead, *clamped)), fill)


def min_expr(a: Any, b: Any) -> Expr:
    """The smaller of `a` and `b`; of two bools, their conjunction (False < True, as numpy)."""
    return binary(Op.AND if _both_bool(a, b) else Op.MIN, a, b)


def max_expr(a: Any, b: Any) -> Expr:
    """The larger of `a` and `b`; of two bools, their disjunction."""
    return binary(Op.OR if _both_bool(a, b) else Op.MAX, a, b)


def _both_bool(a: Any, b: Any) -> bool:
    a, b = match_types(a, b)
    return dt.is_bool(a.dtype) and dt.is_bool(b.dtype)


def select(condition: Any, true_value: Any, false_value: Any) -> Expr:
    """`condition ? true_value : false_value`. Both branches may be evaluated; to guard an
    out-of-bounds read (padding) use `if_then_else`."""
    condition = as_expr(condition)
    if not dt.is_bool(condition.dtype):
        raise TypeError(f"select condition must be bool, not {condition.dtype!r}")
    t, f = match_types(true_value, false_value)
    common = dt.promote(t.dtype, f.dtype)
    return Select(condition, cast(t, common), cast(f, common), common)


def if_then_else(condition: Any, true_value: Any, false_value: Any) -> Expr:
    """Like `select`, but only the chosen branch is evaluated (safe for padding reads)."""
    sel = select(condition, true_value, false_value)
    assert isinstance(sel, Select)
    args = (sel.condition, sel.true_value, sel.false_value)
    return Call("if_then_else", args, sel.dtype)


def call_math(name: str, *args: Any) -> Expr:
    """Call the math intrinsic `name` (see MATH_INTRINSICS) on float operands."""
    arity = MATH_INTRINSICS.get(name)
    if arity is None:
        raise ValueError(f"unknown math intrinsic {name!r}; known: {', '.join(MATH_INTRINSICS)}")
    if len(args) != arity:
        raise TypeError(f"{name} takes {arity} operand(s), not {len(args)}")
    exprs = [as_expr(a) for a in args]
    common = exprs[0].dtype
    for e in exprs[1:]:
        common = dt.promote(common, e.dtype)
    if not dt.is_float(common):
        raise TypeError(f"{name} needs float operands, not {common!r}; cast first")
    return Call(name, tuple(cast(e, common) for e in exprs), common)


def call_shift(name: str, x: Any, amount: Any) -> Expr:
    """`shift_left` (the low bits of x * 2**amount: wraps at x's width) or `shift_right`
    (arithmetic for signed x, logical for unsigned) of an integer by `amount` in [0, bits)."""
    if name not in INT_INTRINSICS:
        raise ValueError(f"unknown integer intrinsic {name!r}; known: {', '.join(INT_INTRINSICS)}")
    x = as_expr(x)
    if not dt.is_int(x.dtype):
        raise TypeError(f"{name} needs an integer operand, not {x.dtype!r}")
    n = cast(amount, x.dtype)
    if isinstance(n, IntImm) and not 0 <= n.value < dt.bits(x.dtype):
        raise ValueError(
            f"{name} amount must be in [0, {dt.bits(x.dtype)}) for {x.dtype}, not {n.value}"
        )
    return Call(name, (x, n), x.dtype)


def call_reinterpret(x: Any, dtype: str) -> Expr:
    """`x`'s bits read as `dtype`, which must have the same width (bool excluded)."""
    x = as_expr(x)
    dt.check_dtype(dtype)
    if "bool" in (x.dtype, dtype) or dt.bits(x.dtype) != dt.bits(dtype):
        raise TypeError(
            f"reinterpret needs non-bool dtypes of one width, not {x.dtype!r} as {dtype!r}"
        )
    return x if x.dtype == dtype else Call("reinterpret", (x,), dtype)


def call_dot(name: str, a: Any, b: Any) -> Expr:
    """`dot_i16x2` or `dot_u8i8x4` (see DOT_INTRINSICS) of two int32 words."""
    if name not in DOT_INTRINSICS:
        raise ValueError(f"unknown dot intrinsic {name!r}; known: {', '.join(DOT_INTRINSICS)}")
    a, b = as_expr(a), as_expr(b)
    if a.dtype != "int32" or b.dtype != "int32":
        raise TypeError(f"{name} needs int32 operands (packed words), not {a.dtype}, {b.dtype}")
    return Call(name, (a, b), "int32")


def call_extern(name: str, *args: Any, dtype: str = "int32") -> Expr:
    """An opaque call (tensor intrinsic, barrier, DMA) that passes never move or drop."""
    return Call(name, tuple(as_expr(a) for a in args), dt.check_dtype(dtype), CallKind.EXTERN)


def abs_expr(x: Any) -> Expr:
    x = as_expr(x)
    return select(x < 0, -x, x)


def is_const_int(expr: Expr, value: int | None = None) -> bool:
    """Whether `expr` is an integer constant (equal to `value` when given)."""
    return (
        isinstance(expr, IntImm)
        and not dt.is_bool(expr.dtype)
        and (value is None or expr.value == value)
    )

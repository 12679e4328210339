"""Tensor expressions: placeholders, computes, reductions and scalar expressions (TVM §4.1).

Example:
    >>> from tensorforge.compiler import te
    >>> A = te.placeholder((8, 8), "float32", name="A")
    >>> B = te.placeholder((8, 8), "float32", name="B")
    >>> k = te.reduce_axis((0, 8), "k")
    >>> C = te.compute((8, 8), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> s = te.create_schedule(C.op)
    >>> xo, xi = s[C].split(C.op.axis[0], factor=4)
"""

from __future__ import annotations

from typing import Any

from .dtype import DTYPES
from .dtype import highest as _highest
from .dtype import lowest as _lowest
from .dtype import max_value as _max_value
from .dtype import min_value as _min_value
from .expr import (
    BinOp,
    Call,
    CallKind,
    Cast,
    CommReducer,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Op,
    ProducerLoad,
    Reduce,
    Select,
    Var,
    all_of,
    any_of,
    as_expr,
    call_extern,
    cast,
    clamped_read,
    const,
    if_then_else,
    select,
    unravel,
)
from .intrin import TensorIntrin, decl_tensor_intrin
from .math import (
    abs,
    acos,
    acosh,
    asin,
    asinh,
    atan,
    atanh,
    ceil,
    cos,
    cosh,
    dot_i16x2,
    dot_u8i8x4,
    erf,
    exp,
    exp2,
    floor,
    fmod,
    log,
    log1p,
    log2,
    power,
    reinterpret,
    round,
    rsqrt,
    shift_left,
    shift_right,
    sigmoid,
    sin,
    sinh,
    sqrt,
    tan,
    tanh,
    trunc,
)
from .reduce import Reducer, comm_reducer, max, min, prod, sum
from .tensor import (
    ComputeOp,
    IterVar,
    IterVarKind,
    Operation,
    PlaceholderOp,
    Range,
    Tensor,
    compute,
    placeholder,
    reduce_axis,
    thread_axis,
)
from .visitor import structural_equal, substitute


def var(name: str = "v", dtype: str = "int32") -> Var:
    """A scalar variable."""
    return Var(name, dtype)


def max_value(dtype: str) -> Expr:
    """The largest finite value of `dtype` as a constant."""
    return const(_max_value(dtype), dtype)


def min_value(dtype: str) -> Expr:
    """The lowest finite value of `dtype` as a constant."""
    return const(_min_value(dtype), dtype)


def lowest(dtype: str) -> Expr:
    """The identity of a max-reduction as a constant: -inf for floats, else `min_value`."""
    return const(_lowest(dtype), dtype)


def highest(dtype: str) -> Expr:
    """The identity of a min-reduction as a constant: +inf for floats, else `max_value`."""
    return const(_highest(dtype), dtype)


def create_schedule(ops: Any) -> Any:
    """A schedule for the given output operation(s) or tensor(s); see `schedule.Schedule`."""
    from ..schedule import create_schedule as _create  # schedule builds on te: import late

    return _create(ops)


__all__ = [
    "DTYPES",
    "BinOp",
    "Call",
    "CallKind",
    "Cast",
    "CommReducer",
    "ComputeOp",
    "Expr",
    "FloatImm",
    "IntImm",
    "IterVar",
    "IterVarKind",
    "Not",
    "Op",
    "Operation",
    "PlaceholderOp",
    "ProducerLoad",
    "Range",
    "Reduce",
    "Reducer",
    "Select",
    "Tensor",
    "TensorIntrin",
    "Var",
    "abs",
    "all_of",
    "unravel",
    "clamped_read",
    "any_of",
    "as_expr",
    "call_extern",
    "cast",
    "ceil",
    "comm_reducer",
    "compute",
    "const",
    "cos",
    "cosh",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "create_schedule",
    "decl_tensor_intrin",
    "erf",
    "exp",
    "exp2",
    "floor",
    "fmod",
    "if_then_else",
    "highest",
    "log",
    "log1p",
    "log2",
    "lowest",
    "max",
    "max_value",
    "min",
    "min_value",
    "placeholder",
    "power",
    "prod",
    "reduce_axis",
    "round",
    "rsqrt",
    "select",
    "reinterpret",
    "dot_i16x2",
    "dot_u8i8x4",
    "shift_left",
    "shift_right",
    "sigmoid",
    "sin",
    "sinh",
    "tan",
    "sqrt",
    "structural_equal",
    "substitute",
    "sum",
    "tanh",
    "thread_axis",
    "trunc",
    "var",
]

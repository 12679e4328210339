"""Commutative reducers: `sum`, `max`, `min` and user-defined ones via `comm_reducer`."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

from . import dtype as dt
from .expr import (
    CommReducer,
    Expr,
    Reduce,
    Var,
    as_expr,
    cast,
    const,
    match_types,
    max_expr,
    min_expr,
)
from .tensor import IterVar, IterVarKind


class Reducer:
    """A reduction builder: `reducer(expr, axis=k, where=cond)`.

    Called with two expressions instead (`te.max(a, b)`) it combines them elementwise.
    """

    def __init__(
        self,
        fcombine: Callable[[Expr, Expr], Any],
        fidentity: Callable[[str], Any],
        name: str,
    ) -> None:
        self.fcombine = fcombine
        self.fidentity = fidentity
        self.name = name

    def __call__(self, expr: Any, axis: Any, where: Any = None) -> Expr:
        if not _is_axis_list(axis):
            return as_expr(self.fcombine(*match_types(expr, axis)))
        axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
        for iv in axes:
            if iv.kind is not IterVarKind.REDUCE:
                raise ValueError(f"{self.name}: axis {iv.name!r} must be a reduce_axis")
        source = as_expr(expr)
        lhs, rhs = Var("x", source.dtype), Var("y", source.dtype)
        result = cast(self.fcombine(lhs, rhs), source.dtype)
        identity = cast(self.fidentity(source.dtype), source.dtype)
        combiner = CommReducer(self.name, lhs, rhs, result, identity, source.dtype)
        condition = const(True) if where is None else as_expr(where)
        if not dt.is_bool(condition.dtype):
            raise TypeError(f"{self.name}: where must be bool, not {condition.dtype!r}")
        return Reduce(combiner, source, axes, condition, source.dtype)


def _is_axis_list(axis: Any) -> bool:
    if isinstance(axis, IterVar):
        return True
    return isinstance(axis, Sequence) and builtins.all(isinstance(a, IterVar) for a in axis)


def comm_reducer(
    fcombine: Callable[[Expr, Expr], Any], fidentity: Callable[[str], Any], name: str = "reduce"
) -> Reducer:
    """Declare a reducer. `fcombine` must be associative and commutative (not checked).

    Example:
        >>> prod = comm_reducer(lambda x, y: x * y, lambda t: const(1, t), name="prod")
    """
    return Reducer(fcombine, fidentity, name)


sum = comm_reducer(lambda x, y: x + y, lambda t: const(0, t), name="sum")  # noqa: A001
max = comm_reducer(max_expr, lambda t: const(dt.min_value(t), t), name="max")  # noqa: A001
min = comm_reducer(min_expr, lambda t: const(dt.max_value(t), t), name="min")  # noqa: A001

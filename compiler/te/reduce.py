"""Commutative reducers: `sum`, `max`, `min`, `prod` and user-defined ones via `comm_reducer`."""

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
        if isinstance(expr, tuple | list):
            return self._tuple_reduce(tuple(as_expr(e) for e in expr), axes, where)
        source = as_expr(expr)
        lhs, rhs = Var("x", source.dtype), Var("y", source.dtype)
        result = cast(self.fcombine(lhs, rhs), source.dtype)
        identity = cast(self.fidentity(source.dtype), source.dtype)
        combiner = CommReducer(self.name, lhs, rhs, result, identity, source.dtype)
        condition = const(True) if where is None else as_expr(where)
        if not dt.is_bool(condition.dtype):
            raise TypeError(f"{self.name}: where must be bool, not {condition.dtype!r}")
        return Reduce(combiner, source, axes, condition, source.dtype)

    def _tuple_reduce(
        self, sources: tuple[Expr, ...], axes: tuple[IterVar, ...], where: Any
    ) -> tuple[Expr, ...]:
        """One Reduce per component of a tuple reduction (they share the combiner)."""
        dtypes = [e.dtype for e in sources]
        lhs = tuple(Var(f"x{c}", t) for c, t in enumerate(dtypes))
        rhs = tuple(Var(f"y{c}", t) for c, t in enumerate(dtypes))
        results = _as_tuple(self.fcombine(lhs, rhs), len(sources), self.name, "fcombine")
        identities = _as_tuple(self.fidentity(*dtypes), len(sources), self.name, "fidentity")
        results = tuple(cast(r, t) for r, t in zip(results, dtypes, strict=True))
        identities = tuple(cast(i, t) for i, t in zip(identities, dtypes, strict=True))
        combiner = CommReducer(
            self.name, lhs[0], rhs[0], results[0], identities[0], dtypes[0],
            lhs, rhs, results, identities,
        )  # fmt: skip
        condition = const(True) if where is None else as_expr(where)
        if not dt.is_bool(condition.dtype):
            raise TypeError(f"{self.name}: where must be bool, not {condition.dtype!r}")
        return tuple(
            Reduce(combiner, src, axes, condition, src.dtype, c, sources)
            for c, src in enumerate(sources)
        )


def _as_tuple(value: Any, n: int, name: str, what: str) -> tuple[Any, ...]:
    if not isinstance(value, tuple | list) or len(value) != n:
        raise ValueError(f"{name}: {what} must return a tuple of {n} values, not {value!r}")
    return tuple(value)


def _is_axis_list(axis: Any) -> bool:
    if isinstance(axis, IterVar):
        return True
    return isinstance(axis, Sequence) and builtins.all(isinstance(a, IterVar) for a in axis)


def comm_reducer(
    fcombine: Callable[[Expr, Expr], Any], fidentity: Callable[[str], Any], name: str = "reduce"
) -> Reducer:
    """Declare a reducer. `fcombine` must be associative and commutative (not checked).

    A tuple reducer combines several values at once: `fcombine(x, y)` gets two tuples and
    returns one, `fidentity(*dtypes)` returns a tuple, and calling the reducer on a tuple of
    sources returns one reduction per component (use them as the bodies of a multi-output
    `compute`).

    Example:
        >>> prod = comm_reducer(lambda x, y: x * y, lambda t: const(1, t), name="prod")
        >>> from tensorforge.compiler.te.expr import select
        >>> argmax = comm_reducer(
        ...     lambda x, y: (select(x[1] >= y[1], x[0], y[0]), max_expr(x[1], y[1])),
        ...     lambda ti, tv: (const(-1, ti), const(dt.min_value(tv), tv)),
        ...     name="argmax",
        ... )
    """
    return Reducer(fcombine, fidentity, name)


sum = comm_reducer(lambda x, y: x + y, lambda t: const(0, t), name="sum")  # noqa: A001
max = comm_reducer(max_expr, lambda t: const(dt.lowest(t), t), name="max")  # noqa: A001
min = comm_reducer(min_expr, lambda t: const(dt.highest(t), t), name="min")  # noqa: A001
prod = comm_reducer(lambda x, y: x * y, lambda t: const(1, t), name="prod")

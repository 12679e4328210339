"""Traversal of expression trees: mutators, substitution, structural keys and the printer."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields, replace
from typing import Any

from . import dtype as dt
from .expr import (
    BinOp,
    Call,
    CallKind,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Op,
    ProducerLoad,
    Reduce,
    Select,
    Var,
)

_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(node: Any) -> tuple[str, ...]:
    """The field names of dataclass instance `node`, in order: `dataclasses.fields`, kept per
    class (the visitors ask for them millions of times per model; `fields` rebuilds the list
    each time, a fifth of the lowering's time)."""
    cls = type(node)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def transform_fields(node: Any, fn: Callable[[Any], Any], kinds: tuple[type, ...]) -> Any:
    """Rebuild `node` with `fn` applied to every field (or tuple element) that is one of
    `kinds`; returns `node` itself when nothing changed."""
    changes = {}
    for name in field_names(node):
        value = getattr(node, name)
        if isinstance(value, kinds):
            new = fn(value)
            if new is not value:
                changes[name] = new
        elif isinstance(value, tuple) and value and isinstance(value[0], kinds):
            new_items = tuple(fn(v) for v in value)
            if any(n is not o for n, o in zip(new_items, value, strict=True)):
                changes[name] = new_items
    return replace(node, **changes) if changes else node


def children(node: Any, kinds: tuple[type, ...] = (Expr,)) -> list[Any]:
    """The fields (and tuple elements) of `node` that are one of `kinds`, in field order."""
    found = []
    for name in field_names(node):
        value = getattr(node, name)
        if isinstance(value, kinds):
            found.append(value)
        elif isinstance(value, tuple):
            found.extend(v for v in value if isinstance(v, kinds))
    return found


def pre_order(expr: Expr) -> Iterator[Expr]:
    """All nodes of `expr`, parents before children, left to right."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


class ExprMutator:
    """Rewrites expressions bottom-up; subclasses define `visit_<NodeClass>` methods."""

    def visit(self, expr: Expr) -> Expr:
        method = getattr(self, "visit_" + type(expr).__name__, None)
        return method(expr) if method is not None else self.generic_visit(expr)

    def generic_visit(self, expr: Expr) -> Expr:
        return transform_fields(expr, self.visit, (Expr,))


class _Substituter(ExprMutator):
    def __init__(self, mapping: Mapping[Var, Expr]) -> None:
        self.mapping = mapping

    def visit_Var(self, expr: Var) -> Expr:
        return self.mapping.get(expr, expr)


def substitute(expr: Expr, mapping: Mapping[Var, Any]) -> Expr:
    """Replace variables (by identity) with expressions or numbers."""
    from .expr import as_expr

    if not mapping:
        return expr
    return _Substituter({v: as_expr(e, v.dtype) for v, e in mapping.items()}).visit(expr)


def free_vars(expr: Expr) -> list[Var]:
    """The variables `expr` mentions, in first-appearance order."""
    found: dict[Var, None] = {}
    for node in pre_order(expr):
        if isinstance(node, Var):
            found[node] = None
    return list(found)


def structural_key(node: Any) -> Any:
    """A hashable key equal for structurally equal trees (variables and tensors by identity)."""
    if isinstance(node, Var):
        return ("Var", id(node))
    if isinstance(node, IntImm | FloatImm):
        return (type(node).__name__, node.value, node.dtype)
    parts: list[Any] = [type(node).__name__]
    for name in field_names(node):
        parts.append(_field_key(getattr(node, name)))
    return tuple(parts)


def _field_key(value: Any) -> Any:
    if isinstance(value, Expr):
        return structural_key(value)
    if isinstance(value, tuple):
        return tuple(_field_key(v) for v in value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if hasattr(value, "value") and hasattr(type(value), "__members__"):  # an Enum member
        return value.value
    return ("id", id(value))


def structural_equal(a: Expr, b: Expr) -> bool:
    """Whether two expression trees are equal node by node."""
    return structural_key(a) == structural_key(b)


# ---- printer ------------------------------------------------------------------------------------

# Binding strength, loosest first; the bitwise operators bind between comparisons and
# arithmetic, as in Python (`a & b == c` is `(a & b) == c`; C binds them below comparisons)
_PRECEDENCE = {
    Op.OR: 1,
    Op.AND: 2,
    Op.EQ: 4,
    Op.NE: 4,
    Op.LT: 4,
    Op.LE: 4,
    Op.GT: 4,
    Op.GE: 4,
    Op.BIT_OR: 5,
    Op.BIT_XOR: 6,
    Op.BIT_AND: 7,
    Op.SHL: 8,
    Op.SHR: 8,
    Op.ADD: 9,
    Op.SUB: 9,
    Op.MUL: 10,
    Op.DIV: 10,
    Op.FLOORDIV: 10,
    Op.FLOORMOD: 10,
}
_UNARY = 11  # `!x`, a negative literal
ATOM = 14  # the binding of a name, a call, a load: never parenthesized


class ExprPrinter:
    """Stable text of expressions. `name_of` maps variables to display names."""

    def __init__(self, name_of: Callable[[Var], str] | None = None) -> None:
        self.name_of = name_of or (lambda v: v.name)

    def print(self, expr: Expr) -> str:
        return self._visit(expr)[0]

    def _visit(self, expr: Expr) -> tuple[str, int]:
        method = getattr(self, "visit_" + type(expr).__name__, None)
        if method is None:
            return f"<{type(expr).__name__}>", ATOM
        return method(expr)

    def _args(self, exprs: tuple[Expr, ...]) -> str:
        return ", ".join(self.print(e) for e in exprs)

    def visit_Var(self, e: Var) -> tuple[str, int]:
        return self.name_of(e), ATOM

    def visit_IntImm(self, e: IntImm) -> tuple[str, int]:
        if dt.is_bool(e.dtype):
            return str(bool(e.value)), ATOM
        if e.dtype == dt.INDEX_DTYPE:
            return str(e.value), ATOM if e.value >= 0 else _UNARY
        return f"{e.dtype}({e.value})", ATOM

    def visit_FloatImm(self, e: FloatImm) -> tuple[str, int]:
        if e.dtype == "float32" and math.isfinite(e.value):
            return f"{e.value!r}f", ATOM if e.value >= 0 else _UNARY
        return f"{e.dtype}({e.value!r})", ATOM

    def visit_Cast(self, e: Cast) -> tuple[str, int]:
        return f"{e.dtype}({self.print(e.value)})", ATOM

    def visit_BinOp(self, e: BinOp) -> tuple[str, int]:
        if e.op in (Op.MIN, Op.MAX):
            return f"{e.op.value}({self.print(e.a)}, {self.print(e.b)})", ATOM
        prec = _PRECEDENCE[e.op]
        a, pa = self._visit(e.a)
        b, pb = self._visit(e.b)
        if pa < prec or (pa == prec and prec == 4):
            a = f"({a})"
        if pb <= prec:
            b = f"({b})"
        sep = e.op.value if e.op in (Op.MUL, Op.FLOORDIV, Op.FLOORMOD) else f" {e.op.value} "
        return f"{a}{sep}{b}", prec

    def visit_Not(self, e: Not) -> tuple[str, int]:
        a, pa = self._visit(e.a)
        return "!" + (a if pa >= _UNARY else f"({a})"), _UNARY

    def visit_Select(self, e: Select) -> tuple[str, int]:
        return f"select({self._args((e.condition, e.true_value, e.false_value))})", ATOM

    def visit_Call(self, e: Call) -> tuple[str, int]:
        prefix = "@" if e.kind is CallKind.EXTERN else ""
        return f"{prefix}{e.name}({self._args(e.args)})", ATOM

    def visit_Reduce(self, e: Reduce) -> tuple[str, int]:
        axes = ", ".join(self.name_of(iv.var) for iv in e.axis)
        text = f"{e.combiner.name}({self.print(e.source)}, axis=[{axes}]"
        if not (isinstance(e.condition, IntImm) and e.condition.value == 1):
            text += f", where={self.print(e.condition)}"
        return text + ")", ATOM

    def visit_ProducerLoad(self, e: ProducerLoad) -> tuple[str, int]:
        return f"{e.producer.name}[{self._args(e.indices)}]", ATOM


def expr_to_str(expr: Expr) -> str:
    return ExprPrinter().print(expr)

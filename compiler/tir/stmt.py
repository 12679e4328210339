"""Loop IR: buffers, statements and functions (the lowered form every back-end consumes)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..schedule.stage import ForKind
from ..te import dtype as dt
from ..te.expr import BinOp, Expr, IntImm, Op, Var
from ..te.visitor import ExprMutator, children, transform_fields


class LoweringError(Exception):
    """A tensor program that cannot be lowered (unsupported construct, bad arguments)."""


@dataclass(frozen=True, slots=True, eq=False)
class Buffer:
    """A typed, row-major array in memory `scope`. Compared by identity."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    scope: str = "global"

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"Buffer({self.name!r}, {self.dtype}, {list(self.shape)}, {self.scope!r})"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class BufferLoad(Expr):
    """`buffer[indices]`; one index per buffer dimension (one after storage_flatten)."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    dtype: str


ACCESS_MASKS = ("r", "w", "rw")


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class BufferPtr(Expr):
    """A pointer to `extent` elements of `buffer` from flat element `offset`, for an extern call
    that reads (`mask` "r"), writes ("w") or both ("rw") them; TVM's `access_ptr`.

    `offset` counts elements of the row-major (flattened) buffer, so it survives storage_flatten.
    """

    buffer: Buffer
    offset: Expr
    extent: int
    mask: str = "r"
    dtype: str = "int64"  # pointer-sized handle


@dataclass(frozen=True, slots=True)
class BufferRegion:
    """A rectangular part of a buffer: start indices and constant extents (tensorize args)."""

    buffer: Buffer
    starts: tuple[Expr, ...]
    extents: tuple[int, ...]

    def access_ptr(self, mask: str = "r") -> BufferPtr:
        """A pointer to the region for an extern call: its first element and the number of
        elements up to and including its last one in the row-major buffer.

        Raises:
            ValueError: for a mask other than "r", "w" or "rw".
        """
        if mask not in ACCESS_MASKS:
            raise ValueError(f"access_ptr mask must be one of {ACCESS_MASKS}, not {mask!r}")
        shape = self.buffer.shape
        lead = len(shape) - len(self.starts)
        offset: Expr = IntImm(0)
        span = 1
        for dim, (start, ext) in enumerate(zip(self.starts, self.extents, strict=True)):
            stride = math.prod(shape[lead + dim + 1 :])
            offset = BinOp(Op.ADD, offset, BinOp(Op.MUL, start, IntImm(stride), "int32"), "int32")
            span += (ext - 1) * stride
        return BufferPtr(self.buffer, offset, span, mask)


class Stmt:
    """Base of statement nodes."""

    __slots__ = ()

    def __repr__(self) -> str:
        from .printer import stmt_to_str  # printer builds on every node

        return stmt_to_str(self)


def _stmt(cls: type) -> type:
    return dataclass(frozen=True, slots=True, eq=False, repr=False)(cls)


@_stmt
class BufferStore(Stmt):
    """`buffer[indices] = value`."""

    buffer: Buffer
    value: Expr
    indices: tuple[Expr, ...]


@_stmt
class For(Stmt):
    """`for var in [min, min + extent)`, run as `kind` (thread-bound loops carry a tag)."""

    var: Var
    min: Expr
    extent: Expr
    kind: ForKind
    body: Stmt
    thread_tag: str = ""


@_stmt
class IfThenElse(Stmt):
    condition: Expr
    then_case: Stmt
    else_case: Stmt | None = None


@_stmt
class SeqStmt(Stmt):
    """Statements run in order."""

    stmts: tuple[Stmt, ...]


@_stmt
class Allocate(Stmt):
    """`buffer` exists (uninitialised) while `body` runs."""

    buffer: Buffer
    body: Stmt


@_stmt
class AttrStmt(Stmt):
    """A key/value annotation on `body`: pragmas, double buffering, storage hints."""

    key: str
    value: Any
    body: Stmt


@_stmt
class Evaluate(Stmt):
    """Evaluate an expression for its side effects (an extern intrinsic call)."""

    value: Expr


def seq(*stmts: Stmt | None) -> Stmt:
    """A statement running `stmts` in order; flattens nested sequences, drops None and no-ops."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None or is_no_op(s):
            continue
        flat.extend(s.stmts if isinstance(s, SeqStmt) else [s])
    if not flat:
        return no_op()
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))


def no_op() -> Stmt:
    return Evaluate(IntImm(0))


def is_no_op(stmt: Stmt) -> bool:
    return isinstance(stmt, Evaluate) and isinstance(stmt.value, IntImm)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class PrimFunc:
    """A lowered function: parameter buffers (in argument order) and a body.

    `arg_shapes` keeps the parameters' logical shapes after storage_flatten makes them 1-D.
    """

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    arg_shapes: tuple[tuple[int, ...], ...]
    attrs: tuple[tuple[str, Any], ...] = ()

    def with_body(self, body: Stmt, params: tuple[Buffer, ...] | None = None) -> PrimFunc:
        return PrimFunc(self.name, params or self.params, body, self.arg_shapes, self.attrs)

    def __repr__(self) -> str:
        from .printer import func_to_str

        return func_to_str(self)

    def script(self) -> str:
        """The stable text form (see tir.printer)."""
        return repr(self)


# ---- traversal ----------------------------------------------------------------------------------


class StmtMutator(ExprMutator):
    """Rewrites statements and the expressions inside them bottom-up.

    Subclasses define `visit_<Node>` for statement or expression classes; `visit` dispatches on
    either. Unhandled nodes are rebuilt from their rewritten children.
    """

    def visit(self, node: Any) -> Any:  # type: ignore[override]
        method = getattr(self, "visit_" + type(node).__name__, None)
        return method(node) if method is not None else self.generic_visit(node)

    def generic_visit(self, node: Any) -> Any:  # type: ignore[override]
        return transform_fields(node, self.visit, (Expr, Stmt))


def walk(node: Stmt | Expr) -> Iterator[Stmt | Expr]:
    """Every statement and expression under `node`, parents first, in order."""
    stack: list[Any] = [node]
    while stack:
        item = stack.pop()
        yield item
        stack.extend(reversed(children(item, (Expr, Stmt))))


def const_int(expr: Expr) -> int | None:
    """The value of an integer constant, else None."""
    if isinstance(expr, IntImm) and not dt.is_bool(expr.dtype):
        return expr.value
    return None

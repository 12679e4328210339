"""The loop-IR verifier: each node kind's invariants in one table, checked with scoping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..schedule.stage import ForKind
from ..te import dtype as dt
from ..te.expr import (
    BITWISE_OPS,
    COMPARE_OPS,
    LOGIC_OPS,
    BinOp,
    Call,
    Cast,
    Expr,
    Not,
    ProducerLoad,
    Reduce,
    Select,
    Var,
)
from ..te.visitor import children
from .gpu import check_gpu
from .stmt import (
    ACCESS_MASKS,
    Allocate,
    AttrStmt,
    BufferLoad,
    BufferPtr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
    const_int,
)


class VerifyError(Exception):
    """The loop IR breaks an invariant (a bug in lowering or in a pass)."""


class _Scope:
    def __init__(self) -> None:
        self.vars: list[Var] = []
        self.buffers: list[Any] = []
        self.threaded = False  # a thread-bound loop was seen (the GPU checks then apply)


def _indices_ok(buf: Any, indices: tuple[Expr, ...]) -> str | None:
    if len(indices) != len(buf.shape):
        return f"{buf.name} has {len(buf.shape)} dimension(s) but is indexed with {len(indices)}"
    for i in indices:
        if not dt.is_int(i.dtype):
            return f"index of {buf.name} must be an integer, not {i.dtype!r}"
    return None


def _check_var(v: Var, scope: _Scope) -> str | None:
    if not any(v is d for d in scope.vars):
        return f"variable {v.name!r} is used outside the loop that defines it"
    return None


def _check_load(e: BufferLoad, scope: _Scope) -> str | None:
    if not any(e.buffer is b for b in scope.buffers):
        return f"buffer {e.buffer.name!r} is read outside its allocation"
    if e.dtype != e.buffer.dtype:
        return f"load of {e.buffer.name} has dtype {e.dtype!r}, the buffer {e.buffer.dtype!r}"
    return _indices_ok(e.buffer, e.indices)


def _check_store(s: BufferStore, scope: _Scope) -> str | None:
    if not any(s.buffer is b for b in scope.buffers):
        return f"buffer {s.buffer.name!r} is written outside its allocation"
    if s.value.dtype != s.buffer.dtype:
        return f"store of {s.value.dtype!r} into {s.buffer.name}: {s.buffer.dtype}"
    return _indices_ok(s.buffer, s.indices)


def _check_for(s: For, scope: _Scope) -> str | None:
    if any(s.var is d for d in scope.vars):
        return f"loop variable {s.var.name!r} is redefined inside its own loop"
    if not (dt.is_int(s.min.dtype) and dt.is_int(s.extent.dtype)):
        return "loop bounds must be integers"
    if (s.kind is ForKind.THREAD_BINDING) != bool(s.thread_tag):
        return "a loop has a thread tag exactly when it is thread-bound"
    if s.kind in (ForKind.VECTORIZED, ForKind.UNROLLED) and const_int(s.extent) is None:
        return f"a {s.kind.value} loop needs a constant extent"
    return None


def _check_binop(e: BinOp, scope: _Scope) -> str | None:
    if e.a.dtype != e.b.dtype:
        return f"operands of {e.op.value} have dtypes {e.a.dtype!r} and {e.b.dtype!r}"
    if e.op in (*COMPARE_OPS, *LOGIC_OPS):
        return None if e.dtype == "bool" else f"{e.op.value} must yield 'bool', not {e.dtype!r}"
    if e.dtype == "bool":  # back-ends define no arithmetic on bool (min/max of bools are && / ||)
        return f"arithmetic {e.op.value} must not be of bool operands"
    if e.op in BITWISE_OPS and not dt.is_int(e.dtype):
        return f"bitwise {e.op.value} must be of integer operands, not {e.dtype!r}"
    if e.dtype != e.a.dtype:
        return f"{e.op.value} must yield {e.a.dtype!r}, not {e.dtype!r}"
    return None


def _bool_operand(name: str, get: Callable[[Any], Expr]) -> Callable[[Any, _Scope], str | None]:
    def check(node: Any, scope: _Scope) -> str | None:
        if get(node).dtype != "bool":
            return f"{name} must be bool, not {get(node).dtype!r}"
        return None

    return check


def _forbidden(what: str) -> Callable[[Any, _Scope], str | None]:
    return lambda node, scope: f"{what} must not appear in the loop IR (it is lowered away)"


def _check_select(e: Select, scope: _Scope) -> str | None:
    if e.true_value.dtype != e.dtype or e.false_value.dtype != e.dtype:
        return "select branches must have the select's dtype"
    return _bool_operand("select condition", lambda n: n.condition)(e, scope)


def _check_allocate(s: Allocate, scope: _Scope) -> str | None:
    if any(s.buffer is b for b in scope.buffers):
        return f"buffer {s.buffer.name!r} is allocated twice"
    if any(not isinstance(n, int) or n <= 0 for n in s.buffer.shape):
        return f"buffer {s.buffer.name!r} needs a positive constant shape"
    return None


def _check_ptr(e: BufferPtr, scope: _Scope) -> str | None:
    if not any(e.buffer is b for b in scope.buffers):
        return f"buffer {e.buffer.name!r} is accessed outside its allocation"
    if e.mask not in ACCESS_MASKS:
        return f"access_ptr mask must be one of {ACCESS_MASKS}, not {e.mask!r}"
    if not dt.is_int(e.offset.dtype) or e.extent <= 0:
        return "access_ptr needs an integer offset and a positive extent"
    return None


# node class -> invariant; returns a message when broken
INVARIANTS: dict[type, Callable[[Any, _Scope], str | None]] = {
    Var: _check_var,
    BufferLoad: _check_load,
    BufferPtr: _check_ptr,
    BufferStore: _check_store,
    For: _check_for,
    BinOp: _check_binop,
    Not: _bool_operand("operand of !", lambda n: n.a),
    Select: _check_select,
    Cast: lambda e, scope: None if e.value.dtype != e.dtype else "cast to the same dtype",
    Call: lambda e, scope: None,
    IfThenElse: _bool_operand("if condition", lambda n: n.condition),
    Allocate: _check_allocate,
    AttrStmt: lambda s, scope: None if s.key else "attribute key must not be empty",
    Evaluate: lambda s, scope: None,
    SeqStmt: lambda s, scope: None if len(s.stmts) > 1 else "a sequence needs two statements",
    ProducerLoad: _forbidden("a tensor read (ProducerLoad)"),
    Reduce: _forbidden("a reduction"),
}


def _visit(node: Any, scope: _Scope, where: str) -> None:
    check = INVARIANTS.get(type(node))
    message = check(node, scope) if check is not None else None
    if message is not None:
        text = repr(node).splitlines()[0][:100]
        raise VerifyError(f"verify after {where}: {message} (at `{text}`)")
    if isinstance(node, For):
        scope.threaded = scope.threaded or node.kind is ForKind.THREAD_BINDING
        for e in (node.min, node.extent):
            _visit(e, scope, where)
        scope.vars.append(node.var)
        _visit(node.body, scope, where)
        scope.vars.pop()
        return
    if isinstance(node, Allocate):
        scope.buffers.append(node.buffer)
        _visit(node.body, scope, where)
        scope.buffers.pop()
        return
    for child in children(node, (Expr, Stmt)):
        _visit(child, scope, where)


def verify_func(func: PrimFunc, where: str = "lower") -> None:
    """Check every invariant of INVARIANTS over `func`; raise VerifyError naming `where`."""
    scope = _Scope()
    scope.buffers.extend(func.params)
    _visit(func.body, scope, where)
    message = check_gpu(func) if scope.threaded else None  # (a CPU function: nothing to check)
    if message is not None:
        raise VerifyError(f"verify after {where}: {message}")

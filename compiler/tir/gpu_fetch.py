"""Cooperative fetching: spread a copy into shared memory over the threads of a block."""

from __future__ import annotations

import math

from ..schedule.stage import ForKind
from ..te.expr import BinOp, Call, CallKind, Expr, IntImm, Op, Var
from .gpu import block_body, is_block_root, is_shared, is_thread_loop, thread_extents
from .stmt import (
    BufferLoad,
    BufferStore,
    For,
    IfThenElse,
    PrimFunc,
    Stmt,
    StmtMutator,
    const_int,
    walk,
)

_TAG_ORDER = ("threadIdx.z", "threadIdx.y", "threadIdx.x")  # slowest to fastest


def _fetch_nest(s: Stmt) -> tuple[list[For], Stmt] | None:
    """The loops and the store of a plain copy loop nest into a shared buffer, else None."""
    loops: list[For] = []
    node = s
    while isinstance(node, For):
        if node.kind is ForKind.THREAD_BINDING or not isinstance(node.min, IntImm):
            return None
        if not isinstance(node.extent, IntImm):
            return None
        loops.append(node)
        node = node.body
    store = node.then_case if isinstance(node, IfThenElse) and node.else_case is None else node
    if not loops or not isinstance(store, BufferStore) or not is_shared(store.buffer):
        return None
    for n in walk(node):
        if isinstance(n, BufferLoad) and is_shared(n.buffer):
            return None
        if isinstance(n, Call) and n.kind is CallKind.EXTERN:
            return None
    return loops, node


def _i32(op: Op, a: Expr, b: Expr | int) -> Expr:
    return BinOp(op, a, IntImm(b) if isinstance(b, int) else b, "int32")


class _CooperativeFetch(StmtMutator):
    def __init__(self) -> None:
        self.extents: dict[str, int] | None = None
        self.thread_vars: list[Var] = []  # enclosing thread-bound loop variables
        self.enclosing: list[For] = []  # enclosing threadIdx loops inside the block

    def visit_For(self, s: For) -> Stmt:
        if self.extents is None and is_block_root(s, False):
            self.extents = thread_extents(block_body(s))
            body = self.visit(s.body)
            self.extents = None
            return For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)
        nest = _fetch_nest(s) if self.extents else None
        if nest is not None and not self.is_per_thread(nest[1]):
            return self.distribute(*nest)
        bound = is_thread_loop(s)
        if bound:
            self.thread_vars.append(s.var)
            self.enclosing.append(s)
        body = self.visit(s.body)
        if bound:
            self.thread_vars.pop()
            self.enclosing.pop()
        return For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)

    def available(self) -> dict[str, int]:
        """Threads per tag that reach this point: inside a thread loop only those below its
        extent do (a loop of 3 threadIdx.x in a block of 4 leaves threads 0..2)."""
        assert self.extents is not None
        found = dict(self.extents)
        for loop in self.enclosing:
            extent = const_int(loop.extent)
            if extent is not None:
                found[loop.thread_tag] = min(found[loop.thread_tag], extent)
        return found

    def is_per_thread(self, body: Stmt) -> bool:
        """Whether the copy depends on the thread running it (then it is not shared out)."""
        return any(isinstance(n, Var) and any(n is v for v in self.thread_vars) for n in walk(body))

    def distribute(self, loops: list[For], body: Stmt) -> Stmt:
        from .passes import substitute_stmt

        extents = self.available()
        tags = [t for t in _TAG_ORDER if t in extents]
        threads = math.prod(extents[t] for t in tags)
        sizes = [const_int(loop.extent) or 1 for loop in loops]  # constants, see _fetch_nest
        total = math.prod(sizes)
        if threads <= 1 or total <= 1:
            return loops[0]
        tvars = [Var(t) for t in tags]
        tid: Expr = tvars[0]
        for t, v in zip(tags[1:], tvars[1:], strict=True):
            tid = _i32(Op.ADD, _i32(Op.MUL, tid, extents[t]), v)
        chunk = Var(f"{loops[0].var.name}.chunk")
        flat = _i32(Op.ADD, _i32(Op.MUL, chunk, threads), tid)
        mapping: dict[Var, Expr] = {}
        stride = total
        for loop, size in zip(loops, sizes, strict=True):
            stride //= size
            value = _i32(Op.FLOORMOD, _i32(Op.FLOORDIV, flat, stride), size)
            mapping[loop.var] = _i32(Op.ADD, loop.min, value)
        stmt = substitute_stmt(body, mapping)
        if total % threads:
            stmt = IfThenElse(BinOp(Op.LT, flat, IntImm(total), "bool"), stmt)
        rounds = -(-total // threads)
        stmt = For(chunk, IntImm(0), IntImm(rounds), ForKind.SERIAL, stmt)
        for tag, v in reversed(list(zip(tags, tvars, strict=True))):
            stmt = For(v, IntImm(0), IntImm(extents[tag]), ForKind.THREAD_BINDING, stmt, tag)
        return stmt


def cooperative_fetch(func: PrimFunc) -> PrimFunc:
    """Inside a thread block, turn a copy into shared memory that every thread would run whole
    (a shared stage whose loops the schedule did not bind) into one that the block's threads
    share: element `chunk*threads + tid` is copied by thread `tid`.

    before: (block of 4 threadIdx.x threads)  for ax0 in range(2) { for ax1 in range(4) {
              S[ax0, ax1] = A[..ax0.., ..ax1..] } }
    after:  for threadIdx.x in range(4) thread("threadIdx.x") { for ax0.chunk in range(2) {
              S[(ax0.chunk*4 + threadIdx.x)//4 % 2, (ax0.chunk*4 + threadIdx.x) % 4] = ... } }
    """
    return func.with_body(_CooperativeFetch().visit(func.body))

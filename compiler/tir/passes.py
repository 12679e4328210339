"""Loop-IR passes (each a pure `PrimFunc -> PrimFunc`) and the default lowering pipeline."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from ..schedule.stage import ForKind
from ..te.expr import BinOp, Call, CallKind, Expr, IntImm, Op, Select, Var, all_of
from ..te.visitor import pre_order, structural_key
from .arith import Analyzer
from .gpu import (
    inject_double_buffer,
    inject_virtual_threads,
    insert_storage_sync,
    single_thread_writes,
)
from .gpu_fetch import cooperative_fetch
from .stmt import (
    Allocate,
    AttrStmt,
    Buffer,
    BufferLoad,
    BufferPtr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
    StmtMutator,
    const_int,
    is_no_op,
    no_op,
    seq,
    walk,
)

Pass = Callable[[PrimFunc], PrimFunc]


class _Substitute(StmtMutator):
    def __init__(self, mapping: Mapping[Var, Expr]) -> None:
        self.mapping = mapping

    def visit_Var(self, v: Var) -> Expr:
        return self.mapping.get(v, v)


def substitute_stmt(stmt: Stmt, mapping: Mapping[Var, Expr]) -> Stmt:
    """Replace variables in every expression of `stmt`."""
    return _Substitute(mapping).visit(stmt)


# ---- simplify ---------------------------------------------------------------------------------


def _loop_bounds(ana: Analyzer, s: For) -> Analyzer:
    lo, hi = ana.interval(s.min)
    extent = ana.interval(s.extent)[1]
    if lo is None or hi is None or extent is None:
        return ana
    return ana.with_bound(s.var, lo, hi + extent - 1)


def _simplify_stmt(s: Stmt, ana: Analyzer) -> Stmt:
    if isinstance(s, For):
        start, extent = ana.simplify(s.min), ana.simplify(s.extent)
        n = const_int(extent)
        if n is not None and n <= 0:
            return no_op()
        if n == 1 and s.kind is not ForKind.THREAD_BINDING:
            return _simplify_stmt(substitute_stmt(s.body, {s.var: start}), ana)
        loop = For(s.var, start, extent, s.kind, s.body, s.thread_tag)
        body = _simplify_stmt(s.body, _loop_bounds(ana, loop))
        return For(s.var, start, extent, s.kind, body, s.thread_tag)
    if isinstance(s, IfThenElse):
        cond = ana.simplify(s.condition)
        if isinstance(cond, IntImm):
            taken = s.then_case if cond.value else s.else_case
            return no_op() if taken is None else _simplify_stmt(taken, ana)
        else_case = None if s.else_case is None else _simplify_stmt(s.else_case, ana)
        return IfThenElse(cond, _simplify_stmt(s.then_case, ana), else_case)
    if isinstance(s, BufferStore):
        indices = tuple(ana.simplify(i) for i in s.indices)
        return BufferStore(s.buffer, ana.simplify(s.value), indices)
    if isinstance(s, SeqStmt):
        return seq(*(_simplify_stmt(c, ana) for c in s.stmts))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _simplify_stmt(s.body, ana))
    if isinstance(s, AttrStmt):
        return AttrStmt(s.key, s.value, _simplify_stmt(s.body, ana))
    if isinstance(s, Evaluate):
        return Evaluate(ana.simplify(s.value))
    raise TypeError(f"simplify: unknown statement {type(s).__name__}")


def simplify(func: PrimFunc) -> PrimFunc:
    """Simplify every expression knowing the loop ranges; drop provable guards and loops of
    extent one (their variable becomes the loop start).

    before: for i in range(1) { if i*4 + j < 8 { B[(i*4 + j)//4] = ... } }   (j in [0, 4))
    after:  B[0] = ...
    """
    return func.with_body(_simplify_stmt(func.body, Analyzer()))


# ---- storage flatten --------------------------------------------------------------------------


class _Flatten(StmtMutator):
    def __init__(self) -> None:
        self.flat: dict[Buffer, Buffer] = {}

    def buffer(self, buf: Buffer) -> Buffer:
        if buf not in self.flat:
            self.flat[buf] = Buffer(buf.name, buf.dtype, (buf.size,), buf.scope)
        return self.flat[buf]

    def index(self, buf: Buffer, indices: tuple[Expr, ...]) -> tuple[Expr, ...]:
        flat: Expr | None = None
        for extent, idx in zip(buf.shape, indices, strict=True):
            flat = (
                idx
                if flat is None
                else BinOp(Op.ADD, BinOp(Op.MUL, flat, IntImm(extent), "int32"), idx, "int32")
            )
        return (flat if flat is not None else IntImm(0),)

    def visit_BufferLoad(self, e: BufferLoad) -> Expr:
        indices = tuple(self.visit(i) for i in e.indices)
        return BufferLoad(self.buffer(e.buffer), self.index(e.buffer, indices), e.dtype)

    def visit_BufferStore(self, s: BufferStore) -> Stmt:
        indices = tuple(self.visit(i) for i in s.indices)
        value = self.visit(s.value)
        return BufferStore(self.buffer(s.buffer), value, self.index(s.buffer, indices))

    def visit_Allocate(self, s: Allocate) -> Stmt:
        return Allocate(self.buffer(s.buffer), self.visit(s.body))

    def visit_AttrStmt(self, s: AttrStmt) -> Stmt:
        value = s.value
        if isinstance(value, tuple) and all(isinstance(v, Buffer) for v in value):
            value = tuple(self.buffer(v) for v in value)  # double_buffer_loop's buffers
        return AttrStmt(s.key, value, self.visit(s.body))

    def visit_BufferPtr(self, e: BufferPtr) -> Expr:
        return BufferPtr(self.buffer(e.buffer), self.visit(e.offset), e.extent, e.mask, e.dtype)


def storage_flatten(func: PrimFunc) -> PrimFunc:
    """Make every buffer one-dimensional with row-major indices (what back-ends address).

    before: C: float32[4, 8]   C[i, j] = 0.0f
    after:  C: float32[32]     C[i*8 + j] = 0.0f
    """
    flatten = _Flatten()
    params = tuple(flatten.buffer(b) for b in func.params)
    return func.with_body(flatten.visit(func.body), params)


# ---- loop partition ---------------------------------------------------------------------------


def _guards(s: Stmt) -> list[Expr]:
    """Conditions a loop may be cut at: `if` guards' conjuncts, and those of the `if_then_else`
    and `select` values stored (as `x < c`: a Concat's `c >= 64` picks its second input from
    64 on)."""
    found: list[Expr] = []
    stack = [s]
    while stack:
        node = stack.pop()
        if isinstance(node, BufferStore):
            found.extend(_selector_bounds(node.value))
        elif isinstance(node, IfThenElse):
            found.extend(_conjuncts(node.condition))
            stack.append(node.then_case)
            if node.else_case is not None:
                stack.append(node.else_case)
        elif isinstance(node, For | Allocate | AttrStmt):
            stack.append(node.body)
        elif isinstance(node, SeqStmt):
            stack.extend(node.stmts)
    return found


def _selector_bounds(value: Expr) -> list[Expr]:
    found = []
    for e in pre_order(value):
        cond = e.args[0] if isinstance(e, Call) and e.name == "if_then_else" else None
        cond = e.condition if isinstance(e, Select) else cond
        if cond is not None:
            for c in _conjuncts(cond):
                if isinstance(c, BinOp) and c.op is Op.GE:
                    c = BinOp(Op.LT, c.a, c.b, c.dtype)  # cut where it starts to hold
                found.append(c)
    return found


def _conjuncts(cond: Expr) -> list[Expr]:
    if isinstance(cond, BinOp) and cond.op is Op.AND:
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _inner_bounds(s: Stmt, ana: Analyzer) -> Analyzer:
    """`ana` extended with the ranges of every loop nested in `s` (constant ones only)."""
    stack = [s]
    while stack:
        node = stack.pop()
        if isinstance(node, For):
            ana = _loop_bounds(ana, node)
            stack.append(node.body)
        elif isinstance(node, IfThenElse | Allocate | AttrStmt):
            stack.append(node.then_case if isinstance(node, IfThenElse) else node.body)
        elif isinstance(node, SeqStmt):
            stack.extend(node.stmts)
    return ana


def _split_points(loop: For, ana: Analyzer) -> list[int]:
    """Every loop value from which some guard `a*var + rest < c` may fail."""
    inner = _inner_bounds(loop.body, ana)
    points: list[int] = []
    for cond in _guards(loop.body):
        if not (isinstance(cond, BinOp) and cond.op is Op.LT and cond.a.dtype != "bool"):
            continue
        split = inner.linear_in(BinOp(Op.SUB, cond.a, cond.b, cond.a.dtype), loop.var)
        if split is None or split[0] <= 0:
            continue
        coeff, rest = split
        hi = inner.interval(rest)[1]
        if hi is None:
            continue
        points.append((-hi - 1) // coeff + 1)  # coeff*v + rest < 0 for every rest <=> v < point
    return points


def _partition(s: Stmt, ana: Analyzer) -> Stmt:
    if isinstance(s, For):
        start, extent = const_int(s.min), const_int(s.extent)
        if start is not None and extent is not None and s.kind is not ForKind.THREAD_BINDING:
            inside = [p for p in _split_points(s, ana) if start < p < start + extent]
            point = min(inside, default=None)
            if point is not None:
                main = For(
                    s.var, IntImm(start), IntImm(point - start), s.kind, s.body, s.thread_tag
                )
                tail_extent = IntImm(start + extent - point)
                tail = For(s.var, IntImm(point), tail_extent, s.kind, s.body, s.thread_tag)
                return seq(_partition(main, ana), _partition(tail, ana))
        body = _partition(s.body, _loop_bounds(ana, s))
        return For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)
    if isinstance(s, SeqStmt):
        return seq(*(_partition(c, ana) for c in s.stmts))
    if isinstance(s, IfThenElse):
        else_case = None if s.else_case is None else _partition(s.else_case, ana)
        return IfThenElse(s.condition, _partition(s.then_case, ana), else_case)
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _partition(s.body, ana))
    if isinstance(s, AttrStmt):
        return AttrStmt(s.key, s.value, _partition(s.body, ana))
    return s


def loop_partition(func: PrimFunc) -> PrimFunc:
    """Split a loop where a guard inside it starts to fail, so that `simplify` can drop the guard
    from the first part (non-divisible splits), or where a stored `if_then_else`/`select`
    linear in the loop switches sides (a Concat's inputs, a padded copy's borders: each part
    then copies one input, or zeros, without a per-element choice).

    before: for i.outer in range(3) { for i.inner in range(4) { if i.outer*4 + i.inner < 10 {S} } }
    after:  for i.outer in range(2) { ... same ... }
            for i.outer in range(2, 3) { ... same ... }
    """
    return func.with_body(_partition(func.body, Analyzer()))


# ---- hoist invariant guards ------------------------------------------------------------------

_HOISTABLE = (ForKind.SERIAL, ForKind.VECTORIZED, ForKind.UNROLLED)


def _invariant(cond: Expr, var: Var) -> bool:
    """Whether `cond` reads neither `var` nor memory (a load could see the loop's own stores)."""
    return not any(
        n is var or isinstance(n, BufferLoad | BufferPtr)
        or (isinstance(n, Call) and n.kind is CallKind.EXTERN)
        for n in pre_order(cond)
    )  # fmt: skip


def _guarded(stmt: Stmt) -> list[Expr] | None:
    """The conjuncts of `stmt`'s guard when it is an `if` without an else, else None."""
    if isinstance(stmt, IfThenElse) and stmt.else_case is None:
        return _conjuncts(stmt.condition)
    return None


class _HoistGuards(StmtMutator):
    def visit_For(self, s: For) -> Stmt:
        body = self.visit(s.body)
        parts = list(body.stmts) if isinstance(body, SeqStmt) else [body]
        guards = [_guarded(p) for p in parts]
        common: list[Expr] = []
        if parts and s.kind in _HOISTABLE and all(g is not None for g in guards):
            keys = [{structural_key(c) for c in g} for g in guards]  # type: ignore[union-attr]
            common = [c for c in guards[0] or [] if _invariant(c, s.var)
                      and all(structural_key(c) in k for k in keys[1:])]  # fmt: skip
        if not common:
            return For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)
        hoisted = {structural_key(c) for c in common}
        inner = []
        for part, conds in zip(parts, guards, strict=True):
            rest = [c for c in conds or [] if structural_key(c) not in hoisted]
            inner.append(IfThenElse(all_of(*rest), part.then_case) if rest else part.then_case)
        loop = For(s.var, s.min, s.extent, s.kind, seq(*inner), s.thread_tag)
        return IfThenElse(all_of(*common), loop)


def hoist_invariant_guards(func: PrimFunc) -> PrimFunc:
    """Move an `if` that is a loop's whole body out of the loop when its condition (or some of
    its conjuncts) does not depend on the loop (loop unswitching); so too the conjuncts that
    every statement of the body is guarded by. Guards of a tile that may
    overrun (a compute_at copy's rows past the input) otherwise sit inside the innermost
    vectorized loop, which then runs as scalars with a branch per element, and LLVM spends
    seconds unrolling and threading those branches. Serial, vectorized and unrolled loops only:
    a thread-bound or parallel loop keeps its body.

    before: for y in range(2) { for c in range(32) vectorized { if t*10 + y < 30 && c < n {S} } }
    after:  for y in range(2) {
              if t*10 + y < 30 { for c in range(32) vectorized { if c < n {S} } }
            }
    """
    return func.with_body(_HoistGuards().visit(func.body))


# ---- unroll -----------------------------------------------------------------------------------


class _Unroll(StmtMutator):
    def visit_For(self, s: For) -> Stmt:
        body = self.visit(s.body)
        start, extent = const_int(s.min), const_int(s.extent)
        if s.kind is not ForKind.UNROLLED or start is None or extent is None:
            return For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)
        return seq(*(substitute_stmt(body, {s.var: IntImm(start + k)}) for k in range(extent)))


def unroll(func: PrimFunc) -> PrimFunc:
    """Replace loops marked unrolled (with constant bounds) by copies of their body.

    before: for j in range(2) unrolled { B[j] = A[j] }
    after:  B[0] = A[0]
            B[1] = A[1]
    """
    return func.with_body(_Unroll().visit(func.body))


# ---- remove no-ops ----------------------------------------------------------------------------


class _RemoveNoOp(StmtMutator):
    def visit_For(self, s: For) -> Stmt:
        body = self.visit(s.body)
        if is_no_op(body) or const_int(s.extent) == 0:
            return no_op()
        return For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)

    def visit_IfThenElse(self, s: IfThenElse) -> Stmt:
        then_case = self.visit(s.then_case)
        else_case = None if s.else_case is None else self.visit(s.else_case)
        if else_case is not None and is_no_op(else_case):
            else_case = None
        if is_no_op(then_case) and else_case is None:
            return no_op()
        return IfThenElse(s.condition, then_case, else_case)

    def visit_SeqStmt(self, s: SeqStmt) -> Stmt:
        return seq(*(c for c in (self.visit(c) for c in s.stmts) if not is_no_op(c)))

    def visit_Allocate(self, s: Allocate) -> Stmt:
        body = self.visit(s.body)
        if not _is_read(s.buffer, body):  # a buffer nobody reads: its stores are dead
            dropped = _DropStores(s.buffer).visit(body)
            if dropped is not body:
                return self.visit(dropped)
        return no_op() if is_no_op(body) else Allocate(s.buffer, body)

    def visit_AttrStmt(self, s: AttrStmt) -> Stmt:
        body = self.visit(s.body)
        return no_op() if is_no_op(body) else AttrStmt(s.key, s.value, body)

    def visit_BufferStore(self, s: BufferStore) -> Stmt:
        v = s.value
        if (
            isinstance(v, BufferLoad)
            and v.buffer is s.buffer
            and [structural_key(i) for i in v.indices] == [structural_key(i) for i in s.indices]
        ):
            return no_op()
        return s


def _is_read(buf: Buffer, body: Stmt) -> bool:
    return any(isinstance(n, BufferLoad | BufferPtr) and n.buffer is buf for n in walk(body))


class _DropStores(StmtMutator):
    """Replaces side-effect-free stores into one buffer with no-ops."""

    def __init__(self, buf: Buffer) -> None:
        self.buf = buf

    def visit_BufferStore(self, s: BufferStore) -> Stmt:
        pure = not any(isinstance(n, Call) and n.kind is CallKind.EXTERN for n in walk(s.value))
        return no_op() if s.buffer is self.buf and pure else s

    def visit_BufferLoad(self, e: BufferLoad) -> Expr:
        return e


def remove_no_op(func: PrimFunc) -> PrimFunc:
    """Drop statements without effect: empty loops and branches, self-copies, empty sequences.

    before: for i in range(4) { if i < 8 { } }
            B[0] = B[0]
            allocate T: float32[4] in local { T[0] = 1.0f }   (T never read)
    after:  (nothing)
    """
    return func.with_body(_RemoveNoOp().visit(func.body))


# ---- pipeline ---------------------------------------------------------------------------------

DEFAULT_PIPELINE: tuple[Pass, ...] = (
    inject_virtual_threads,  # interleave vthread copies while buffers still have their shapes
    inject_double_buffer,  # alternate halves of double-buffered shared tiles in thread blocks
    simplify,  # fold the index arithmetic that substitution produced; drop provable guards
    loop_partition,  # cut loops where a split's guard starts to fail or a select switches
    simplify,  # ... so that the guards of the first parts are proven and dropped
    hoist_invariant_guards,  # guards that do not depend on a loop: out of it (unswitching)
    unroll,  # expand loops marked unrolled, now that their bounds are constants
    cooperative_fetch,  # copies into shared memory no thread loop splits: share them out
    single_thread_writes,  # other writes no thread loop covers: thread 0 only, not every thread
    storage_flatten,  # 1-D buffers: the form the CPU/GPU/VTA back-ends address
    simplify,  # fold the flattened index expressions
    remove_no_op,  # clean up what the passes above emptied
    insert_storage_sync,  # barriers between shared-memory writes and reads of a thread block
)


#: `run_pipeline` checks the IR after every pass, not only before the first and after the last,
#: when this environment variable is "1" (the test suite sets it, tests/conftest.py)
VERIFY_EACH_PASS_ENV = "TENSORFORGE_VERIFY_EACH_PASS"


def run_pipeline(func: PrimFunc, passes: Sequence[Pass], verify: bool = True) -> PrimFunc:
    """Run `passes` in order. With `verify`, `verify_func` checks the IR before the first pass
    and after the last, and after every pass when TENSORFORGE_VERIFY_EACH_PASS=1, which names
    the pass that broke an invariant (LLVM's -verify-each). Checking after each of the 13
    passes took a tenth of a model's compile time; the test suite keeps it on."""
    from .verify import verify_func

    if not verify:
        for p in passes:
            func = p(func)
        return func
    verify_func(func, "lower")
    each = os.environ.get(VERIFY_EACH_PASS_ENV) == "1"
    for p in passes:
        func = p(func)
        if each:
            verify_func(func, p.__name__)
    if not each and passes:
        verify_func(func, f"the passes (set {VERIFY_EACH_PASS_ENV}=1 to name the one)")
    return func

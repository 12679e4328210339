"""GPU semantics of the loop IR: thread blocks, barriers and virtual threads (TVM §4.2).

A *block* is the body of the innermost `blockIdx.*` loop (or, without block loops, the outermost
`threadIdx.*` loop). Every thread of a block runs the whole block body; a `threadIdx.*` loop
inside it binds its variable to the thread's index, and threads whose index is not below the
loop's extent skip its body. Buffers in `shared` scope exist once per block; a barrier
(`storage_sync()`) makes every thread of the block wait until all have reached it.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..schedule.stage import ForKind
from ..te.expr import BinOp, Call, CallKind, Expr, IntImm, Op, Var
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
    seq,
    walk,
)

BARRIER = "storage_sync"  # the block-wide barrier intrinsic (CUDA __syncthreads)
DOUBLE_BUFFER_LOOP = "double_buffer_loop"  # value: the buffers whose halves alternate per iteration


def storage_sync() -> Stmt:
    """The barrier statement: every thread of the block waits for the others, and shared-memory
    writes before it are visible to reads after it."""
    return Evaluate(Call(BARRIER, (), "int32", CallKind.EXTERN))


def is_barrier(stmt: Stmt) -> bool:
    return (
        isinstance(stmt, Evaluate) and isinstance(stmt.value, Call) and stmt.value.name == BARRIER
    )


def is_thread_loop(stmt: Stmt, prefix: str = "threadIdx") -> bool:
    """Whether `stmt` is a loop bound to a thread tag starting with `prefix`."""
    return (
        isinstance(stmt, For)
        and stmt.kind is ForKind.THREAD_BINDING
        and stmt.thread_tag.startswith(prefix)
    )


def is_shared(buf: Buffer) -> bool:
    return buf.scope.startswith("shared")


def has_block_loop(stmt: Stmt) -> bool:
    return any(is_thread_loop(n, "blockIdx") for n in walk(stmt) if isinstance(n, Stmt))


def is_block_root(stmt: Stmt, in_block: bool) -> bool:
    """Whether `stmt` starts a block: the innermost blockIdx loop, or an outermost threadIdx loop
    (`in_block`: already inside a block)."""
    if in_block:
        return False
    if isinstance(stmt, For) and is_thread_loop(stmt, "blockIdx"):
        return not has_block_loop(stmt.body)
    return is_thread_loop(stmt)


def block_body(root: For) -> Stmt:
    """What each thread of the block started by `root` runs."""
    return root.body if root.thread_tag.startswith("blockIdx") else root


def thread_extents(body: Stmt) -> dict[str, int]:
    """tag -> number of threads along it in a block body (the largest loop extent bound to it)."""
    found: dict[str, int] = {}
    for node in walk(body):
        if isinstance(node, For) and is_thread_loop(node):
            n = const_int(node.extent)
            if n is None:
                raise ValueError(f"thread loop {node.var.name!r} must have a constant extent")
            found[node.thread_tag] = max(found.get(node.thread_tag, 0), n)
    return found


# ---- barrier insertion -----------------------------------------------------------------------

_State = tuple[tuple[Buffer, ...], tuple[Buffer, ...]]  # shared buffers read, written since sync
_EMPTY: _State = ((), ())


def _accesses(stmt: Stmt) -> _State:
    reads: dict[Buffer, None] = {}
    writes: dict[Buffer, None] = {}
    for node in walk(stmt):
        if isinstance(node, BufferLoad) and is_shared(node.buffer):
            reads[node.buffer] = None
        elif isinstance(node, BufferStore) and is_shared(node.buffer):
            writes[node.buffer] = None
        elif isinstance(node, BufferPtr) and is_shared(node.buffer):
            if "r" in node.mask:
                reads[node.buffer] = None
            if "w" in node.mask:
                writes[node.buffer] = None
    return tuple(reads), tuple(writes)


def _meets(a: tuple[Buffer, ...], b: tuple[Buffer, ...]) -> bool:
    return any(x is y for x in a for y in b)


def _join(a: _State, b: _State) -> _State:
    def union(x: tuple[Buffer, ...], y: tuple[Buffer, ...]) -> tuple[Buffer, ...]:
        return x + tuple(v for v in y if not any(v is u for u in x))

    return union(a[0], b[0]), union(a[1], b[1])


class _SyncPlanner:
    """Places barriers in one block: before a read of shared data written since the last barrier
    (RAW), before overwriting shared data read since then (WAR), also across loop iterations."""

    def __init__(self, extents: dict[str, int]) -> None:
        self.extents = extents

    def is_uniform_loop(self, s: Stmt) -> bool:
        if not isinstance(s, For) or s.kind is ForKind.VECTORIZED:
            return False
        if s.kind is ForKind.THREAD_BINDING:
            return is_thread_loop(s) and const_int(s.extent) == self.extents.get(s.thread_tag)
        return True

    def widen(self, s: Stmt) -> Stmt:
        """A thread loop that only some threads enter, and whose threads communicate through
        shared memory inside it, as a loop over every thread of the block with its leaf
        statements guarded: the barriers its body needs then go where all threads pass.

        before: (4 threadIdx.x threads)  for t in range(3) thread(x) { for ko in range(5) {
                  S[..] = ..   C[t] += S[t] } }
        after:  for t in range(4) thread(x) { for ko in range(5) {
                  if t < 3 { S[..] = .. }   if t < 3 { C[t] += S[t] } } }
        """
        if not is_thread_loop(s):
            return s
        assert isinstance(s, For)
        full, extent, start = self.extents.get(s.thread_tag), const_int(s.extent), s.min
        if full is None or extent is None or extent >= full or const_int(start) != 0:
            return s
        inner, _ = self.plan(s.body, _EMPTY)
        if not any(is_barrier(n) for n in walk(inner) if isinstance(n, Stmt)):
            return s
        cond = BinOp(Op.LT, s.var, IntImm(extent), "bool")
        body = _guard_leaves(s.body, cond)
        return For(s.var, s.min, IntImm(full), s.kind, body, s.thread_tag)

    def plan(
        self, s: Stmt, state: _State, alternating: tuple[Buffer, ...] = ()
    ) -> tuple[Stmt, _State]:
        if isinstance(s, SeqStmt):
            out = []
            for child in s.stmts:
                child, state = self.plan(child, state)
                out.append(child)
            return seq(*out), state
        if isinstance(s, Allocate):
            body, state = self.plan(s.body, state)
            return Allocate(s.buffer, body), state
        if isinstance(s, AttrStmt) and s.key == DOUBLE_BUFFER_LOOP and isinstance(s.body, For):
            body, state = self.plan(s.body, state, s.value)
            return AttrStmt(s.key, s.value, body), state
        if isinstance(s, AttrStmt):
            body, state = self.plan(s.body, state)
            return AttrStmt(s.key, s.value, body), state
        return self.plan_unit(s, state, alternating)

    def plan_unit(
        self, s: Stmt, state: _State, alternating: tuple[Buffer, ...]
    ) -> tuple[Stmt, _State]:
        reads, writes = _accesses(s)
        if not reads and not writes:
            return s, state
        s = self.widen(s)
        sync = _meets(reads, state[1]) or _meets(writes, state[0])  # RAW or WAR
        if sync:
            state = _EMPTY
        if self.is_uniform_loop(s):
            assert isinstance(s, For)
            if s.kind is ForKind.THREAD_BINDING:  # threads run side by side, not in turn
                body, state = self.plan(s.body, state)
            else:
                _, after_one = self.plan(s.body, state)
                # iteration i+1 writes the other half of a double buffer than i reads
                carried = tuple(b for b in after_one[0] if not any(b is a for a in alternating))
                body, state = self.plan(s.body, _join(state, (carried, after_one[1])))
            s = For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)
        else:
            state = _join(state, (reads, writes))
        return (seq(storage_sync(), s) if sync else s), state


def _guard_leaves(s: Stmt, cond: Expr) -> Stmt:
    """`if cond { s }` with the condition pushed inside sequences, allocations, attributes and
    loops of constant bounds (where a barrier may then go between the guarded statements)."""
    if isinstance(s, SeqStmt):
        return seq(*(_guard_leaves(c, cond) for c in s.stmts))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _guard_leaves(s.body, cond))
    if isinstance(s, AttrStmt):
        return AttrStmt(s.key, s.value, _guard_leaves(s.body, cond))
    if (
        isinstance(s, For)
        and s.kind is not ForKind.VECTORIZED
        and const_int(s.min) is not None
        and const_int(s.extent) is not None
        and (s.kind is not ForKind.THREAD_BINDING or not is_thread_loop(s))
    ):
        return For(s.var, s.min, s.extent, s.kind, _guard_leaves(s.body, cond), s.thread_tag)
    return IfThenElse(cond, s)


class _InsertSync(StmtMutator):
    def __init__(self) -> None:
        self.in_block = False

    def visit_For(self, s: For) -> Stmt:
        if not is_block_root(s, self.in_block):
            return For(s.var, s.min, s.extent, s.kind, self.visit(s.body), s.thread_tag)
        body = block_body(s)
        planned, _ = _SyncPlanner(thread_extents(body)).plan(body, _EMPTY)
        if s.thread_tag.startswith("blockIdx"):
            return For(s.var, s.min, s.extent, s.kind, planned, s.thread_tag)
        return planned


def insert_storage_sync(func: PrimFunc) -> PrimFunc:
    """Insert barriers where threads of a block communicate through shared memory.

    before: for ko in range(4) { AA[tx] = A[ko*4 + tx]    for k in range(4) { C[tx] += AA[k] } }
    after:  for ko in range(4) { storage_sync()  AA[tx] = A[ko*4 + tx]
                                 storage_sync()  for k in range(4) { C[tx] += AA[k] } }
    (the first barrier keeps iteration ko+1 from overwriting AA while others still read it).
    """
    return func.with_body(_InsertSync().visit(func.body))


# ---- statements no thread loop covers ----------------------------------------------------------


def _per_thread_buffers(body: Stmt) -> tuple[Buffer, ...]:
    """Buffers a block body allocates outside shared memory: each thread has its own."""
    return tuple(
        n.buffer for n in walk(body) if isinstance(n, Allocate) and not is_shared(n.buffer)
    )


def _has_thread_loop(s: Stmt) -> bool:
    return any(is_thread_loop(n) for n in walk(s) if isinstance(n, Stmt))


class _OneThread:
    """Wraps the statements of a block body that no thread loop covers and that write shared
    or global memory in loops of extent 1 over each thread tag of the block."""

    def __init__(self, extents: dict[str, int], private: tuple[Buffer, ...]) -> None:
        self.tags = [t for t in ("threadIdx.z", "threadIdx.y", "threadIdx.x") if t in extents]
        self.private = private

    def writes_memory_of_others(self, s: Stmt) -> bool:
        """Whether `s` stores to a buffer other threads see (shared memory, the arguments and
        global workspace), not only to its own thread's buffers."""
        return any(
            isinstance(n, BufferStore) and not any(n.buffer is b for b in self.private)
            for n in walk(s)
            if isinstance(n, Stmt)
        )

    def wrap(self, s: Stmt) -> Stmt:
        if not self.writes_memory_of_others(s):
            return s
        if not _has_thread_loop(s):
            for tag in reversed(self.tags):
                s = For(Var(f"{tag}.one"), IntImm(0), IntImm(1), ForKind.THREAD_BINDING, s, tag)
            return s
        if isinstance(s, SeqStmt):
            return seq(*(self.wrap(c) for c in s.stmts))
        if isinstance(s, Allocate):
            return Allocate(s.buffer, self.wrap(s.body))
        if isinstance(s, AttrStmt):
            return AttrStmt(s.key, s.value, self.wrap(s.body))
        if isinstance(s, For) and not is_thread_loop(s):
            return For(s.var, s.min, s.extent, s.kind, self.wrap(s.body), s.thread_tag)
        if isinstance(s, IfThenElse):
            other = None if s.else_case is None else self.wrap(s.else_case)
            return IfThenElse(s.condition, self.wrap(s.then_case), other)
        return s


class _SingleThreadWrites(StmtMutator):
    def visit_For(self, s: For) -> Stmt:
        if not is_block_root(s, False):
            return For(s.var, s.min, s.extent, s.kind, self.visit(s.body), s.thread_tag)
        if not s.thread_tag.startswith("blockIdx"):
            return s  # the block is a thread loop: every statement is inside it
        extents = thread_extents(s.body)
        if all(n == 1 for n in extents.values()):
            return s
        body = _OneThread(extents, _per_thread_buffers(s.body)).wrap(s.body)
        return For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)


def single_thread_writes(func: PrimFunc) -> PrimFunc:
    """In a block of several threads, run the statements that no thread loop covers and that
    write shared or global memory on thread 0 only: every thread runs the block body, so a
    reduction into global memory there would be accumulated once per thread, and one thread's
    initialisation could land after another's updates.

    before: (blockIdx.x loop; S's copy bound to 4 threadIdx.x)  R[i] = 0  for k { R[i] += S[k] }
    after:  for t in range(1) thread("threadIdx.x") { R[i] = 0  for k { R[i] += S[k] } }
    """
    return func.with_body(_SingleThreadWrites().visit(func.body))


# ---- double buffering ------------------------------------------------------------------------


def _allocations_in_loop_body(s: Stmt) -> Iterator[Allocate]:
    """Allocations in `s` outside any nested loop."""
    if isinstance(s, Allocate):
        yield s
    if isinstance(s, For):
        return
    for kid in _kids(s):
        yield from _allocations_in_loop_body(kid)


class _Unallocate(StmtMutator):
    def __init__(self, target: Buffer) -> None:
        self.target = target

    def visit_Allocate(self, s: Allocate) -> Stmt:
        body = self.visit(s.body)
        return body if s.buffer is self.target else Allocate(s.buffer, body)


class _InjectDoubleBuffer(StmtMutator):
    def __init__(self) -> None:
        self.in_block = False

    def visit_For(self, s: For) -> Stmt:
        was = self.in_block
        self.in_block = was or is_block_root(s, was)
        body = self.visit(s.body)
        self.in_block = was
        loop = For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)
        extent = const_int(s.extent)
        if not self.in_block or s.kind is not ForKind.SERIAL or extent is None or extent < 2:
            return loop
        marked = [
            n.value
            for n in walk(body)
            if isinstance(n, AttrStmt) and n.key == "double_buffer_scope"
        ]
        targets = [a for a in _allocations_in_loop_body(body) if a.buffer.name in marked]
        if not targets:
            return loop
        parity = (s.var - s.min) % 2
        doubled = []
        for alloc in targets:
            old = alloc.buffer
            new = Buffer(old.name, old.dtype, (2, *old.shape), old.scope)
            body = _Expand(old, new, parity).visit(_Unallocate(old).visit(body))
            doubled.append(new)
        result: Stmt = AttrStmt(
            DOUBLE_BUFFER_LOOP,
            tuple(doubled),
            For(s.var, s.min, s.extent, s.kind, body, s.thread_tag),
        )
        for buf in reversed(doubled):
            result = Allocate(buf, result)
        return result


def inject_double_buffer(func: PrimFunc) -> PrimFunc:
    """Inside thread blocks, give each buffer marked `double_buffer_scope` and allocated in a
    serial loop two halves that alternate between iterations, so that iteration i+1 can fill one
    while threads still read the other: `insert_storage_sync` then needs no barrier before the
    overwrite (one barrier per iteration instead of two).

    before: for ko in range(4) { allocate S[4] in shared {
              attr double_buffer_scope = 'S' { S[tx] = ... }   ... S[k] ... } }
    after:  allocate S[2, 4] in shared { attr double_buffer_loop = S { for ko in range(4) {
              attr double_buffer_scope = 'S' { S[ko % 2, tx] = ... }   ... S[ko % 2, k] ... } } }
    """
    return func.with_body(_InjectDoubleBuffer().visit(func.body))


# ---- virtual threads -------------------------------------------------------------------------


def _mentions(node: Stmt | Expr, var: Var) -> bool:
    return any(n is var for n in walk(node))


class _Expand(StmtMutator):
    """Gives a buffer a leading dimension, indexed by `var` (a vthread variable, a parity)."""

    def __init__(self, old: Buffer, new: Buffer, var: Expr) -> None:
        self.old, self.new, self.var = old, new, var

    def visit_BufferLoad(self, e: BufferLoad) -> Expr:
        indices = tuple(self.visit(i) for i in e.indices)
        if e.buffer is not self.old:
            return BufferLoad(e.buffer, indices, e.dtype)
        return BufferLoad(self.new, (self.var, *indices), e.dtype)

    def visit_BufferStore(self, s: BufferStore) -> Stmt:
        indices = tuple(self.visit(i) for i in s.indices)
        value = self.visit(s.value)
        if s.buffer is not self.old:
            return BufferStore(s.buffer, value, indices)
        return BufferStore(self.new, value, (self.var, *indices))

    def visit_BufferPtr(self, e: BufferPtr) -> Expr:
        if e.buffer is not self.old:
            return BufferPtr(e.buffer, self.visit(e.offset), e.extent, e.mask, e.dtype)
        offset = self.visit(e.offset) + self.var * self.old.size
        return BufferPtr(self.new, offset, e.extent, e.mask, e.dtype)


class _Inject:
    """`for var in range(n) vthread { S }` with the copies of S interleaved as deep as possible."""

    def __init__(self, var: Var, n: int) -> None:
        self.var, self.n = var, n

    def copies(self, s: Stmt) -> Stmt:
        from .passes import substitute_stmt

        return seq(*(substitute_stmt(s, {self.var: IntImm(k)}) for k in range(self.n)))

    def inject(self, s: Stmt) -> Stmt:
        if not _mentions(s, self.var):
            return s  # the same for every virtual thread: run once
        if isinstance(s, SeqStmt):
            return seq(*(self.inject(c) for c in s.stmts))
        if isinstance(s, AttrStmt):
            return AttrStmt(s.key, s.value, self.inject(s.body))
        if isinstance(s, Allocate):
            return self.inject_allocate(s)
        if isinstance(s, For) and not (_mentions(s.min, self.var) or _mentions(s.extent, self.var)):
            return For(s.var, s.min, s.extent, s.kind, self.inject(s.body), s.thread_tag)
        if isinstance(s, IfThenElse) and not _mentions(s.condition, self.var):
            other = None if s.else_case is None else self.inject(s.else_case)
            return IfThenElse(s.condition, self.inject(s.then_case), other)
        return self.copies(s)

    def inject_allocate(self, s: Allocate) -> Stmt:
        if is_shared(s.buffer):  # one per block, shared by its virtual threads
            return Allocate(s.buffer, self.inject(s.body))
        old = s.buffer
        new = Buffer(old.name, old.dtype, (self.n, *old.shape), old.scope)
        body = _Expand(old, new, self.var).visit(s.body)
        return Allocate(new, self.inject(body))


class _InjectVirtualThreads(StmtMutator):
    def visit_For(self, s: For) -> Stmt:
        body = self.visit(s.body)
        if not is_thread_loop(s, "vthread"):
            return For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)
        start, extent = const_int(s.min), const_int(s.extent)
        if start != 0 or extent is None:
            raise ValueError(f"vthread loop {s.var.name!r} must start at 0 with a constant extent")
        return _Inject(s.var, extent).inject(body)


def inject_virtual_threads(func: PrimFunc) -> PrimFunc:
    """Replace loops bound to `vthread` by interleaved copies of their body (TVM's virtual
    threads): statements that do not depend on the virtual thread run once, loops are shared by
    the copies, and buffers private to a virtual thread get one slice per virtual thread.

    before: for v in range(2) vthread { allocate L[1] { for k in range(4) { L[0] += A[v, k] } } }
    after:  allocate L[2, 1] { for k in range(4) { L[0, 0] += A[0, k]  L[1, 0] += A[1, k] } }
    """
    return func.with_body(_InjectVirtualThreads().visit(func.body))


# ---- verification ----------------------------------------------------------------------------


def _walk_with_context(
    s: Stmt, ctx: tuple[For | IfThenElse, ...]
) -> Iterator[tuple[Stmt, tuple[For | IfThenElse, ...]]]:
    """Every statement with the loops and conditions around it, outermost first."""
    yield s, ctx
    inner = (*ctx, s) if isinstance(s, For | IfThenElse) else ctx
    for kid in _kids(s):
        yield from _walk_with_context(kid, inner)


def check_gpu(func: PrimFunc) -> str | None:
    """GPU invariants of a function with thread-bound loops; a message when one is broken.

    Thread loops nest blockIdx outside threadIdx and never rebind a tag with a larger extent;
    shared buffers are allocated inside a block; barriers are not under a condition or a thread
    loop that only some threads of the block enter.
    """
    found = _gpu_violation(func)
    return None if found is None else found[1]


def check_gpu_schedule(func: PrimFunc) -> str | None:
    """`check_gpu` of the loop IR fresh from a schedule (before any pass), as the message of a
    ScheduleError: the primitive whose use breaks the invariant, then the reason."""
    found = _gpu_violation(func)
    return None if found is None else f"{found[0]}: {found[1]}"


def _gpu_violation(func: PrimFunc) -> tuple[str, str] | None:
    """(the schedule primitive that causes it, message) for the first broken GPU invariant."""
    body = func.body
    if not any(_is_hw_thread_loop(n) for n in walk(body) if isinstance(n, Stmt)):
        return None
    for node, ctx in _walk_with_context(body, ()):
        found = _check_gpu_node(node, ctx)
        if found is not None:
            return found
    for root in _block_roots(body, False):
        found = _check_block(block_body(root))
        if found is not None:
            return found
    return None


def _block_roots(s: Stmt, in_block: bool) -> Iterator[For]:
    if isinstance(s, For) and is_block_root(s, in_block):
        yield s
        return
    inside = in_block or is_thread_loop(s, "threadIdx")
    for kid in _kids(s):
        yield from _block_roots(kid, inside)


def _kids(s: Stmt) -> list[Stmt]:
    if isinstance(s, For | Allocate | AttrStmt):
        return [s.body]
    if isinstance(s, SeqStmt):
        return list(s.stmts)
    if isinstance(s, IfThenElse):
        return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
    return []


def _is_hw_thread_loop(s: Stmt) -> bool:
    return is_thread_loop(s, "blockIdx") or is_thread_loop(s, "threadIdx")


def _check_gpu_node(node: Stmt, ctx: tuple[For | IfThenElse, ...]) -> tuple[str, str] | None:
    threads = [n.thread_tag for n in ctx if isinstance(n, For) and _is_hw_thread_loop(n)]
    if isinstance(node, For) and is_thread_loop(node, "blockIdx"):
        if any(t.startswith("threadIdx") for t in threads):
            return "bind", f"block loop {node.var.name!r} must not be inside a thread loop"
        if node.thread_tag in threads:
            return "bind", f"{node.thread_tag} is bound twice around loop {node.var.name!r}"
    if isinstance(node, Allocate) and is_shared(node.buffer) and not threads:
        return "compute_at", (
            f"shared buffer {node.buffer.name!r} must be allocated inside a thread block "
            "(compute its stage at a loop inside the block)"
        )
    return None


def _check_block(body: Stmt) -> tuple[str, str] | None:
    extents = thread_extents(body)
    for node, ctx in _walk_with_context(body, ()):
        loops = [n for n in ctx if isinstance(n, For) and is_thread_loop(n)]
        if isinstance(node, For) and is_thread_loop(node):
            same = [n for n in loops if n.thread_tag == node.thread_tag]
            outer, inner = (const_int(same[-1].extent) if same else None), const_int(node.extent)
            if outer is not None and inner is not None and inner > outer:
                return "bind", (
                    f"thread loop {node.var.name!r} must not have more iterations than the "
                    f"enclosing {node.thread_tag} loop ({outer}), not {inner}"
                )
        if is_barrier(node):
            if any(isinstance(n, IfThenElse) for n in ctx):
                return "insert_storage_sync", (
                    "a barrier must not be inside a condition (divergent control flow)"
                )
            partial = [n for n in loops if const_int(n.extent) != extents[n.thread_tag]]
            if partial:
                return "insert_storage_sync", (
                    f"a barrier must not be inside thread loop {partial[0].var.name!r}, which "
                    "only some threads of the block enter (divergent control flow)"
                )
    return None

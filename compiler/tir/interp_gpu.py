"""Thread blocks in the reference interpreter: threads run in lockstep phases between barriers.

Each thread of a block runs the block body as a Python generator that stops at every barrier;
the block runs thread 0 up to its next barrier, then thread 1, ..., then all of them on to the
next barrier. A missing barrier therefore shows up deterministically: a thread reads shared
memory that the threads after it have not written yet (NaN, as uninitialised memory reads).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from ..te.expr import Var
from .gpu import block_body, is_barrier, is_shared, is_thread_loop, thread_extents
from .stmt import Allocate, AttrStmt, Buffer, For, IfThenElse, SeqStmt, Stmt, walk

Env = list[Any]
Fn = Callable[[Env], Any]
Gen = Callable[[Env], Iterator[None]]


def _has_barrier(s: Stmt) -> bool:
    return any(isinstance(n, Stmt) and is_barrier(n) for n in walk(s))


class _BlockCompiler:
    """The thread-block part of the interpreter's compiler (mixed into `interp._Compiler`)."""

    threads: dict[str, int] | None
    slot: Callable[[Any], int]
    stmt: Callable[[Stmt], Fn]
    expr: Callable[[Any], Fn]

    def _thread_loop(self, s: For, body: Any) -> Any:
        """A threadIdx loop inside a block: its variable is the thread's index along the tag."""
        assert self.threads is not None
        tid, slot, extent = self.threads[s.thread_tag], self.slot(s.var), self.expr(s.extent)
        fmin = self.expr(s.min)

        def run(env: Env) -> Any:
            t = env[tid]
            if t < extent(env):
                env[slot] = fmin(env) + t
                return body(env)
            return None

        return run

    def _block(self, root: For) -> Fn:
        from .interp import InterpretError, _poison

        body = block_body(root)
        extents = thread_extents(body)
        tags = list(extents)
        self.threads = {tag: self.slot(Var(tag)) for tag in tags}
        thread_slots = [self.threads[t] for t in tags]
        shared = _shared_buffers(body)
        shared_slots = [(self.slot(b), b.size, _poison(b.dtype)) for b in shared]
        program = self._gen(body)
        self.threads = None
        ids = list(itertools.product(*(range(extents[t]) for t in tags)))
        name = root.var.name

        def run_block(env: Env) -> None:
            for slot, size, poison in shared_slots:
                env[slot] = [poison] * size
            threads = []
            for tid in ids:
                own = list(env)  # per-thread variables; buffers are shared lists
                for slot, value in zip(thread_slots, tid, strict=True):
                    own[slot] = value
                threads.append(program(own))
            _run_lockstep(threads, name, InterpretError)

        if not root.thread_tag.startswith("blockIdx"):
            return run_block
        fmin, fext, var_slot = self.expr(root.min), self.expr(root.extent), self.slot(root.var)

        def run_grid(env: Env) -> None:
            lo = fmin(env)
            for b in range(lo, lo + fext(env)):
                env[var_slot] = b
                run_block(env)

        return run_grid

    def _gen(self, s: Stmt) -> Gen:
        """`s` as a generator function that yields at each barrier."""
        if not _has_barrier(s):
            fn = self.stmt(s)

            def plain(env: Env) -> Iterator[None]:
                fn(env)
                yield from ()

            return plain
        if is_barrier(s):
            return _barrier
        if isinstance(s, SeqStmt):
            parts = [self._gen(c) for c in s.stmts]

            def run_seq(env: Env) -> Iterator[None]:
                for part in parts:
                    yield from part(env)

            return run_seq
        if isinstance(s, Allocate | AttrStmt):
            if isinstance(s, Allocate) and not is_shared(s.buffer):
                return self._gen_allocate(s)
            return self._gen(s.body)
        if isinstance(s, IfThenElse):
            return self._gen_if(s)
        if isinstance(s, For):
            return self._gen_for(s)
        raise TypeError(f"interpret: cannot run {type(s).__name__} around a barrier")

    def _gen_for(self, s: For) -> Gen:
        body = self._gen(s.body)
        if is_thread_loop(s):
            return self._gen_thread_loop(s, body)
        fmin, fext, slot = self.expr(s.min), self.expr(s.extent), self.slot(s.var)

        def run(env: Env) -> Iterator[None]:
            lo = fmin(env)
            for v in range(lo, lo + fext(env)):
                env[slot] = v
                yield from body(env)

        return run

    def _gen_thread_loop(self, s: For, body: Gen) -> Gen:
        assert self.threads is not None
        tid, slot, extent, fmin = (
            self.threads[s.thread_tag],
            self.slot(s.var),
            self.expr(s.extent),
            self.expr(s.min),
        )

        def run(env: Env) -> Iterator[None]:
            t = env[tid]
            if t < extent(env):
                env[slot] = fmin(env) + t
                yield from body(env)

        return run

    def _gen_if(self, s: IfThenElse) -> Gen:
        cond, then_case = self.expr(s.condition), self._gen(s.then_case)
        else_case = self._gen(s.else_case) if s.else_case is not None else None

        def run(env: Env) -> Iterator[None]:
            if cond(env):
                yield from then_case(env)
            elif else_case is not None:
                yield from else_case(env)

        return run

    def _gen_allocate(self, s: Allocate) -> Gen:
        from .interp import _poison

        body, slot, size, poison = (
            self._gen(s.body),
            self.slot(s.buffer),
            s.buffer.size,
            _poison(s.buffer.dtype),
        )

        def run(env: Env) -> Iterator[None]:
            env[slot] = [poison] * size
            yield from body(env)

        return run


def _barrier(env: Env) -> Iterator[None]:
    yield


def _shared_buffers(body: Stmt) -> list[Buffer]:
    found: dict[Buffer, None] = {}
    for node in walk(body):
        if isinstance(node, Allocate) and is_shared(node.buffer):
            found[node.buffer] = None
    return list(found)


def _run_lockstep(threads: list[Iterator[None]], block: str, error: type[Exception]) -> None:
    """Run each thread to its next barrier, in thread order, until all have finished."""
    active = threads
    while active:
        waiting = []
        for thread in active:
            try:
                next(thread)
            except StopIteration:
                continue
            waiting.append(thread)
        if waiting and len(waiting) != len(active):
            raise error(
                f"block {block!r}: {len(waiting)} of {len(active)} threads wait at a barrier the "
                "others never reach (barrier in divergent control flow)"
            )
        active = waiting

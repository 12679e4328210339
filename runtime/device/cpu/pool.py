"""The CPU thread pool for parallel loops: native worker threads, created once and reused.

Compiled kernels outline each parallel loop of `extent` iterations into a task `void task(ptr
closure, i32 task_id, i32 num_tasks)` that runs contiguous chunk task_id of num_tasks near-equal
chunks (the first extent mod num_tasks one iteration longer), and call `tf_parallel_for(task,
closure, extent)`; the pool picks num_tasks = min(extent, threads * tasks_per_thread).
(`tf_parallel_launch(task, closure)`, one task per thread, is the ABI of objects built before;
it stays.) The pool is itself LLVM IR:
on x86-64 Linux loaded from the object shipped beside this file (built for any x86-64 by
`python -m tensorforge.runtime.device.cpu.pool --emit`) by the ELF loader, elsewhere
JIT-compiled once for the host, so a launch never touches Python or the GIL: the caller
publishes the task, deals its ids out as one block per thread and starts a new generation; then
each thread (the caller is thread 0) claims its own block's ids from the front, then ids from
the back of the others' blocks, until none is left, and the caller waits only for tasks a thread
has started. At even speed each thread runs its own contiguous share (as a static partition
would: cache-friendly from one kernel to the next), and a worker that is slow to wake or loses
its core to another job holds a launch back only by the task it has started: the others take
the rest of its block. Workers poll the generation for a while after each launch (back-to-back
loops start fast), then sleep on a condition variable. A launch while the pool
is busy (from inside a task, i.e. a nested parallel loop, or from another thread), on one
thread, or of one task, runs the whole loop as one task on the calling thread.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
from collections.abc import Callable
from pathlib import Path

from . import elf

LAUNCH_SYMBOL = "tf_parallel_launch"  # the first ABI: one task per thread
FOR_SYMBOL = "tf_parallel_for"  # (task, closure, extent): what the code generator calls
MAX_THREADS = 256
TASKS_PER_THREAD = 4  # default tasks a parallel loop is cut into per thread (at most extent)
MAX_TASKS_PER_THREAD = 64
assert MAX_THREADS * MAX_TASKS_PER_THREAD < 1 << 16  # a block word holds 16-bit task ids
SPIN = 20000  # polls of the generation counter before a worker sleeps

_POOL_IR = r"""
; @ticket = generation << 32: a launch starts a new generation, which wakes the workers.
; The n tasks of a launch are cut into one block of ids per thread, @blocks[j] = generation << 32
; | front << 16 | back: thread j claims its block's ids from the front, then takes ids from the
; back of the others' blocks; a claim is a compare-and-swap of the one word, bounded by the word
; itself and tagged with its launch, so a late worker can never claim a task of another launch.
@task = internal global ptr null
@closure = internal global ptr null
@ntasks = internal global i32 0
@ticket = internal global i64 0, align 64
@blocks = internal global [MAXT x [8 x i64]] zeroinitializer, align 64
@nblocks = internal global i32 0
@done = internal global i32 0, align 64
@busy = internal global i32 0, align 64
@start_gen = internal global i32 0
@nworkers = internal global i32 0
@shutdown = internal global i32 0
@tasks_per_thread = internal global i32 TASKS_PER_THREAD
@mutex = internal global [64 x i8] zeroinitializer, align 64
@cond = internal global [64 x i8] zeroinitializer, align 64
@tids = internal global [MAXT x i64] zeroinitializer

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @sched_yield()
PAUSE_DECL

define internal i32 @generation() {
  %v = load atomic i64, ptr @ticket acquire, align 8
  %hi = lshr i64 %v, 32
  %g = trunc i64 %hi to i32
  ret i32 %g
}

; Claim and run tasks of the current launch as thread `self`: its own block's from the front,
; then the other blocks' from the back, until none is left.
define internal void @run_tasks(i32 %self) {
entry:
  %nb = load atomic i32, ptr @nblocks acquire, align 4
  br label %next_block
next_block:
  %d = phi i32 [0, %entry], [%d1, %block_empty]
  %more = icmp ult i32 %d, %nb
  br i1 %more, label %block, label %out
block:
  %sd = add i32 %self, %d
  %wrap = icmp uge i32 %sd, %nb  ; (self + d) mod nb without a division (armv7 has none)
  %sd_nb = sub i32 %sd, %nb
  %b = select i1 %wrap, i32 %sd_nb, i32 %sd
  %own = icmp eq i32 %d, 0
  %slot = getelementptr [MAXT x [8 x i64]], ptr @blocks, i32 0, i32 %b, i32 0
  br label %try
try:
  %w = load atomic i64, ptr %slot acquire, align 8
  %fr_hi = lshr i64 %w, 16
  %fr = and i64 %fr_hi, 65535
  %bk = and i64 %w, 65535
  %has = icmp ult i64 %fr, %bk
  br i1 %has, label %cas, label %block_empty
cas:
  ; read after the word (its acquire): the launch the claim below belongs to
  %task = load atomic ptr, ptr @task monotonic, align 8
  %closure = load atomic ptr, ptr @closure monotonic, align 8
  %n = load atomic i32, ptr @ntasks monotonic, align 4
  %w_front = add i64 %w, 65536
  %w_back = sub i64 %w, 1
  %new = select i1 %own, i64 %w_front, i64 %w_back
  %pair = cmpxchg ptr %slot, i64 %w, i64 %new acq_rel acquire
  %ok = extractvalue { i64, i1 } %pair, 1
  br i1 %ok, label %work, label %try
work:
  %bk1 = sub i64 %bk, 1
  %id64 = select i1 %own, i64 %fr, i64 %bk1
  %id = trunc i64 %id64 to i32
  call void %task(ptr %closure, i32 %id, i32 %n)
  %old = atomicrmw add ptr @done, i32 1 release
  br label %try
block_empty:
  %d1 = add i32 %d, 1
  br label %next_block
out:
  ret void
}

define internal void @wake_all() {
  call i32 @pthread_mutex_lock(ptr @mutex)
  call i32 @pthread_cond_broadcast(ptr @cond)
  call i32 @pthread_mutex_unlock(ptr @mutex)
  ret void
}

define internal ptr @worker(ptr %arg) {
entry:
  %self64 = ptrtoint ptr %arg to i64
  %self = trunc i64 %self64 to i32
  %start = load i32, ptr @start_gen
  br label %wait
wait:
  %seen = phi i32 [%start, %entry], [%g, %work]
  br label %spin
spin:
  %k = phi i32 [0, %wait], [%k1, %spin_next]
  %g0 = call i32 @generation()
  %new0 = icmp ne i32 %g0, %seen
  br i1 %new0, label %run, label %spin_next
spin_next:
  PAUSE_CALL
  %k1 = add i32 %k, 1
  %more = icmp slt i32 %k1, SPINS
  br i1 %more, label %spin, label %block
block:
  call i32 @pthread_mutex_lock(ptr @mutex)
  br label %block_check
block_check:
  %g1 = call i32 @generation()
  %same = icmp eq i32 %g1, %seen
  %quit = load atomic i32, ptr @shutdown acquire, align 4
  %running = icmp eq i32 %quit, 0
  %sleep = and i1 %same, %running
  br i1 %sleep, label %block_wait, label %block_done
block_wait:
  call i32 @pthread_cond_wait(ptr @cond, ptr @mutex)
  br label %block_check
block_done:
  call i32 @pthread_mutex_unlock(ptr @mutex)
  br label %run
run:
  %stop = load atomic i32, ptr @shutdown acquire, align 4
  %is_stop = icmp ne i32 %stop, 0
  br i1 %is_stop, label %exit, label %work
work:
  %g = call i32 @generation()
  call void @run_tasks(i32 %self)
  br label %wait
exit:
  ret ptr null
}

; Run `task` as tasks 0..n-1 on the pool, or as one task (0 of 1) when the pool is busy (a
; nested launch, or one from a second thread), has no workers or n is 1.
define internal void @launch(ptr %task, ptr %closure, i32 %n) {
entry:
  %nw = load i32, ptr @nworkers
  %alone = icmp eq i32 %nw, 0
  %one = icmp sle i32 %n, 1
  %trivial = or i1 %alone, %one
  br i1 %trivial, label %run_alone, label %claim_pool
claim_pool:
  %was = atomicrmw xchg ptr @busy, i32 1 acquire
  %is_busy = icmp ne i32 %was, 0
  br i1 %is_busy, label %run_alone, label %launch
run_alone:
  call void %task(ptr %closure, i32 0, i32 1)
  ret void
launch:
  store atomic ptr %task, ptr @task monotonic, align 8
  store atomic ptr %closure, ptr @closure monotonic, align 8
  store atomic i32 %n, ptr @ntasks monotonic, align 4
  store atomic i32 0, ptr @done monotonic, align 4
  %g = call i32 @generation()
  %g1 = add i32 %g, 1
  %g64 = zext i32 %g1 to i64
  %fresh = shl i64 %g64, 32
  %threads = add i32 %nw, 1
  br label %cut
cut:
  ; block j holds the ids [j * n / threads, (j + 1) * n / threads) (j * n < 2^23: 32-bit math)
  %j = phi i32 [0, %launch], [%j1, %cut]
  %j1 = add i32 %j, 1
  %lo_n = mul i32 %j, %n
  %lo32 = udiv i32 %lo_n, %threads
  %hi_n = mul i32 %j1, %n
  %hi32 = udiv i32 %hi_n, %threads
  %lo = zext i32 %lo32 to i64
  %hi = zext i32 %hi32 to i64
  %lo_sh = shl i64 %lo, 16
  %word0 = or i64 %fresh, %lo_sh
  %word = or i64 %word0, %hi
  %slot = getelementptr [MAXT x [8 x i64]], ptr @blocks, i32 0, i32 %j, i32 0
  store atomic i64 %word, ptr %slot release, align 8
  %cut_more = icmp ult i32 %j1, %threads
  br i1 %cut_more, label %cut, label %publish
publish:
  store atomic i32 %threads, ptr @nblocks release, align 4
  store atomic i64 %fresh, ptr @ticket release, align 8
  call void @wake_all()
  call void @run_tasks(i32 0)
  br label %join
join:
  %k = phi i32 [0, %publish], [%k1, %join_next], [%k1, %yield]
  %finished = load atomic i32, ptr @done acquire, align 4
  %all = icmp eq i32 %finished, %n
  br i1 %all, label %release, label %join_next
join_next:
  PAUSE_CALL
  %k1 = add i32 %k, 1
  %y = and i32 %k1, 255
  %do_yield = icmp eq i32 %y, 0
  br i1 %do_yield, label %yield, label %join
yield:
  call i32 @sched_yield()
  br label %join
release:
  store atomic i32 0, ptr @busy release, align 4
  ret void
}

; A loop of `extent` iterations: `task(closure, id, n)` runs chunk id of n near-equal chunks,
; n = min(extent, threads * tasks_per_thread), so
; that a thread that starts late or runs slower (another job took its core) leaves the rest
; of its share to the others.
define void @tf_parallel_for(ptr %task, ptr %closure, i32 %extent) {
entry:
  %nw = load i32, ptr @nworkers
  %threads = add i32 %nw, 1
  %per = load i32, ptr @tasks_per_thread
  %cap = mul i32 %threads, %per
  %less = icmp slt i32 %extent, %cap
  %n = select i1 %less, i32 %extent, i32 %cap
  call void @launch(ptr %task, ptr %closure, i32 %n)
  ret void
}

; The first ABI (objects built before tf_parallel_for): one task per thread.
define void @tf_parallel_launch(ptr %task, ptr %closure) {
entry:
  %nw = load i32, ptr @nworkers
  %n = add i32 %nw, 1
  call void @launch(ptr %task, ptr %closure, i32 %n)
  ret void
}

define void @tf_pool_set_tasks_per_thread(i32 %per) {
  store i32 %per, ptr @tasks_per_thread
  ret void
}

define void @tf_pool_start(i32 %nw) {
entry:
  %g = call i32 @generation()
  store i32 %g, ptr @start_gen
  br label %loop
loop:
  %i = phi i32 [1, %entry], [%i1, %body]
  %c = icmp sle i32 %i, %nw
  br i1 %c, label %body, label %done
body:
  %slot = getelementptr [MAXT x i64], ptr @tids, i32 0, i32 %i
  %arg = inttoptr i32 %i to ptr
  call i32 @pthread_create(ptr %slot, ptr null, ptr @worker, ptr %arg)
  %i1 = add i32 %i, 1
  br label %loop
done:
  store i32 %nw, ptr @nworkers
  ret void
}

define void @tf_pool_stop() {
entry:
  %nw = load i32, ptr @nworkers
  store i32 0, ptr @nworkers
  store i32 0, ptr @ntasks
  store atomic i32 1, ptr @shutdown release, align 4
  %g = call i32 @generation()
  %g1 = add i32 %g, 1
  %g64 = zext i32 %g1 to i64
  %fresh = shl i64 %g64, 32
  store atomic i64 %fresh, ptr @ticket release, align 8
  call void @wake_all()
  br label %loop
loop:
  %i = phi i32 [1, %entry], [%i1, %body]
  %c = icmp sle i32 %i, %nw
  br i1 %c, label %body, label %done
body:
  %slot = getelementptr [MAXT x i64], ptr @tids, i32 0, i32 %i
  %tid = load i64, ptr %slot
  call i32 @pthread_join(i64 %tid, ptr null)
  %i1 = add i32 %i, 1
  br label %loop
done:
  store atomic i32 0, ptr @shutdown release, align 4
  ret void
}
"""


def _pause(machine: str) -> tuple[str, str]:
    if machine in ("x86_64", "amd64"):
        return "declare void @llvm.x86.sse2.pause()", "call void @llvm.x86.sse2.pause()"
    if machine in ("aarch64", "arm64"):
        return "declare void @llvm.aarch64.hint(i32)", "call void @llvm.aarch64.hint(i32 1)"
    return "", ""


def pool_ir(machine: str | None = None) -> str:
    """The pool's LLVM IR for `machine` (a platform.machine() name; default: this host)."""
    decl, call = _pause((machine or platform.machine()).lower())
    return (
        _POOL_IR.replace("PAUSE_DECL", decl)
        .replace("PAUSE_CALL", call)
        .replace("MAXT", str(MAX_THREADS + 1))
        .replace("SPINS", str(SPIN))
        .replace("TASKS_PER_THREAD", str(TASKS_PER_THREAD))
    )


def ir_digest(text: str) -> str:
    """The SHA-256 (hex) of `text`, by CPython's own SHA-256 where it has one (as `random`
    does for SHA-512): hashlib would load OpenSSL's libcrypto, 3 MiB of resident pages, into
    every process that runs a module, for this one digest of a few KiB."""
    try:
        from _sha2 import sha256  # CPython 3.12 and later
    except ImportError:
        try:
            from _sha256 import sha256  # CPython 3.11
        except ImportError:
            from hashlib import sha256
    return sha256(text.encode()).hexdigest()


#: The pool built for any x86-64 (baseline features) and the sha256 of the IR it was built from,
#: shipped so that x86-64 Linux loads it without LLVM (`python -m ...cpu.pool --emit` rebuilds)
SHIPPED_OBJECT = Path(__file__).with_name("pool_x86_64.o")
SHIPPED_DIGEST = Path(__file__).with_name("pool_x86_64.sha256")


def emit_object() -> bytes:
    """The pool as an ELF object for generic x86-64 Linux (needs llvmlite)."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    mod = llvm.parse_assembly(pool_ir("x86_64"))
    mod.verify()
    target = llvm.Target.from_triple("x86_64-unknown-linux-gnu")
    tm = target.create_target_machine(
        cpu="x86-64", features="", opt=2, reloc="pic", codemodel="small"
    )
    mod.triple = tm.triple
    return tm.emit_object(mod)


def _shipped_object() -> bytes | None:
    """The shipped object, when this host loads it (x86-64 Linux) and the IR is unchanged."""
    if not elf.NATIVE:
        return None
    try:
        digest = SHIPPED_DIGEST.read_text().split()[0]
        data = SHIPPED_OBJECT.read_bytes()
    except (OSError, IndexError):
        return None
    return data if digest == ir_digest(pool_ir("x86_64")) else None


class _NativePool:
    """The pool (one per process) and the Python handles to its entry points: the shipped
    object loaded by the ELF loader (`kind` "elf"), else the IR JIT-compiled for the host."""

    def __init__(self) -> None:
        shipped = _shipped_object()
        try:
            self.image = elf.Image([(SHIPPED_OBJECT.name, shipped)], {}) if shipped else None
        except elf.ElfLinkError:
            self.image = None
        self.kind = "elf" if self.image else "mcjit"
        address = self.image.address if self.image else self._jit()
        self.symbols = {name: address(name) for name in (LAUNCH_SYMBOL, FOR_SYMBOL)}
        self.launch = self.symbols[LAUNCH_SYMBOL]
        self._per_thread = ctypes.CFUNCTYPE(None, ctypes.c_int32)(
            address("tf_pool_set_tasks_per_thread")
        )
        self.tasks_per_thread = TASKS_PER_THREAD
        self._start = ctypes.CFUNCTYPE(None, ctypes.c_int32)(address("tf_pool_start"))
        self._stop = ctypes.CFUNCTYPE(None)(address("tf_pool_stop"))
        self.num_threads = 1

    def _jit(self) -> Callable[[str], int]:
        import llvmlite.binding as llvm  # here, so a board-side server imports without LLVM

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        mod = llvm.parse_assembly(pool_ir())
        mod.verify()
        # x86-64's large code model: MCJIT maps code and constants apart (llvm_jit.target_machine)
        large = platform.machine().lower() in ("x86_64", "amd64")
        tm = llvm.Target.from_default_triple().create_target_machine(
            opt=2, reloc="pic", codemodel="large" if large else "default"
        )
        self.engine = llvm.create_mcjit_compiler(mod, tm)
        self.engine.finalize_object()
        return self.engine.get_function_address

    def resize(self, num_threads: int) -> None:
        self._stop()
        self._start(num_threads - 1)
        self.num_threads = num_threads


@functools.cache
def _pool() -> _NativePool:
    pool = _NativePool()
    pool.resize(default_num_threads())
    return pool


def default_num_threads() -> int:
    """TF_NUM_THREADS if set, else the number of CPUs this process may run on."""
    env = os.environ.get("TF_NUM_THREADS")
    if env:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def set_num_threads(num_threads: int) -> None:
    """Run parallel loops on `num_threads` threads (the calling thread plus workers).

    Call it while no kernel runs; the workers are replaced once, not per call.
    """
    if not isinstance(num_threads, int) or not 1 <= num_threads <= MAX_THREADS:
        raise ValueError(f"num_threads must be an int in [1, {MAX_THREADS}], not {num_threads!r}")
    pool = _pool()
    if pool.num_threads != num_threads:
        pool.resize(num_threads)


def num_threads() -> int:
    """The number of threads parallel loops use."""
    return _pool().num_threads


def set_tasks_per_thread(tasks: int) -> None:
    """Cut each parallel loop into up to `tasks` chunks per thread (at most its extent), which
    the threads claim in turn: more balance the load when threads run at uneven speed, fewer
    claim less often (1: one chunk per thread, static partitioning). Default 4.

    Raises:
        ValueError: `tasks` is not an int in [1, 64].

    Example:
        >>> from tensorforge.runtime.device import cpu
        >>> cpu.set_tasks_per_thread(4); cpu.tasks_per_thread()
        4
    """
    if not isinstance(tasks, int) or not 1 <= tasks <= MAX_TASKS_PER_THREAD:
        raise ValueError(
            f"tasks per thread must be an int in [1, {MAX_TASKS_PER_THREAD}], not {tasks!r}"
        )
    pool = _pool()
    pool._per_thread(tasks)
    pool.tasks_per_thread = tasks


def tasks_per_thread() -> int:
    """The chunks per thread parallel loops are cut into (`set_tasks_per_thread`)."""
    return _pool().tasks_per_thread


def launch_address() -> int:
    """The address of `tf_parallel_launch(task, closure)` (the first ABI)."""
    return _pool().launch


def symbols() -> dict[str, int]:
    """The pool's entry points kernels call, by name: what the loaders resolve them to."""
    return dict(_pool().symbols)


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emit", action="store_true", help=f"rebuild {SHIPPED_OBJECT.name}")
    if parser.parse_args(argv).emit:
        SHIPPED_OBJECT.write_bytes(emit_object())
        digest = ir_digest(pool_ir("x86_64"))
        SHIPPED_DIGEST.write_text(
            f"{digest}  sha256 of the pool IR {SHIPPED_OBJECT.name} was built from\n"
        )
        print(f"wrote {SHIPPED_OBJECT} and {SHIPPED_DIGEST.name}")


if __name__ == "__main__":
    main()

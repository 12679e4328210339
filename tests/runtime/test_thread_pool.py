"""The CPU thread pool: a parallel loop runs every iteration exactly once whatever the thread
count, tasks per thread and extent; the pool cuts a loop into min(extent, threads x tasks per
thread) tasks, each claimed once, a thread's own block from the front and the others' from the
back; the first ABI (one task per thread) still works; and no mix of nested launches, launches
from several threads and pool resizes hangs."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from tensorforge.compiler import te
from tensorforge.compiler.build import build
from tensorforge.compiler.tir import Buffer, BufferLoad, BufferStore, For, ForKind, PrimFunc
from tensorforge.runtime.device import cpu

TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)


@pytest.fixture
def pool_settings():
    threads, per_thread = cpu.num_threads(), cpu.tasks_per_thread()
    yield
    cpu.set_num_threads(threads)
    cpu.set_tasks_per_thread(per_thread)


def _increment_kernel(extent: int, start: int):
    """`for i in parallel [start, start + extent): X[i] += 1` over a buffer of start + extent + 2:
    an iteration run twice leaves a 2, one never run a 0."""
    x = Buffer("X", "float32", (start + extent + 2,))
    i = te.var("i")
    body = BufferStore(x, BufferLoad(x, (i,), "float32") + te.const(1.0), (i,))
    loop = For(i, te.const(start), te.const(extent), ForKind.PARALLEL, body)
    return build(PrimFunc("inc", (x,), loop, (x.shape,)))


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("per_thread", [1, 3, 4])
def test_parallel_loop_runs_every_iteration_exactly_once(pool_settings, threads, per_thread):
    cpu.set_num_threads(threads)
    cpu.set_tasks_per_thread(per_thread)
    for extent in (0, 1, 2, 3, 7, 9, 10, 31, 257):
        for start in (0, 3):
            x = np.zeros(start + extent + 2, np.float32)
            _increment_kernel(extent, start)(x)
            want = np.zeros_like(x)
            want[start : start + extent] = 1  # numpy's slice: the oracle
            np.testing.assert_array_equal(x, want, err_msg=f"extent {extent}, start {start}")


def _record(calls: list[tuple[int, int]]):
    lock = threading.Lock()

    def task(closure, task_id, num_tasks):
        with lock:
            calls.append((task_id, num_tasks))

    return TASK(task)


def _entry(name: str, *argtypes):
    return ctypes.CFUNCTYPE(None, *argtypes)(cpu.pool_symbols()[name])


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("per_thread", [1, 4])
def test_the_pool_cuts_a_loop_into_tasks_each_claimed_once(pool_settings, threads, per_thread):
    cpu.set_num_threads(threads)
    cpu.set_tasks_per_thread(per_thread)
    launch = _entry(cpu.FOR_SYMBOL, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)
    for extent in (-1, 0, 1, 2, 5, 7, 64):
        calls: list[tuple[int, int]] = []
        task = _record(calls)
        launch(ctypes.cast(task, ctypes.c_void_p), None, extent)
        n = min(extent, threads * per_thread)
        # a loop of one task, or a pool of one thread, runs as one task on the caller
        want = [(0, 1)] if n <= 1 or threads == 1 else [(k, n) for k in range(n)]
        assert sorted(calls) == want, f"extent {extent}"


@pytest.mark.parametrize("threads", [2, 3])
def test_each_thread_runs_its_own_block_from_the_front(pool_settings, threads):
    # the caller is thread 0: of block 0 it runs a prefix (others take ids from the back only),
    # of the others' blocks a suffix (it takes from their back)
    cpu.set_num_threads(threads)
    cpu.set_tasks_per_thread(4)
    launch = _entry(cpu.FOR_SYMBOL, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)
    caller, n = threading.get_ident(), threads * 4
    for _ in range(20):
        mine: list[int] = []

        def run(closure, task_id, num_tasks, mine=mine):
            if threading.get_ident() == caller:
                mine.append(task_id)

        task = TASK(run)
        launch(ctypes.cast(task, ctypes.c_void_p), None, n)
        for j in range(threads):
            block = range(j * n // threads, (j + 1) * n // threads)
            ran = [t for t in mine if t in block]
            want = list(block)[: len(ran)] if j == 0 else list(block)[len(block) - len(ran) :]
            assert sorted(ran) == want, (j, mine)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_the_first_abi_runs_one_task_per_thread(pool_settings, threads):
    cpu.set_num_threads(threads)
    launch = _entry(cpu.LAUNCH_SYMBOL, ctypes.c_void_p, ctypes.c_void_p)
    calls: list[tuple[int, int]] = []
    task = _record(calls)
    launch(ctypes.cast(task, ctypes.c_void_p), None)
    want = [(0, 1)] if threads == 1 else [(k, threads) for k in range(threads)]
    assert sorted(calls) == want


def test_set_tasks_per_thread_rejects_nonsense() -> None:
    for bad in (0, 65, 2.0, "4"):
        want = rf"tasks per thread must be an int in \[1, 64\], not {bad!r}"
        with pytest.raises(ValueError, match=want):
            cpu.set_tasks_per_thread(bad)


STRESS = textwrap.dedent(
    """
    import ctypes, threading
    import numpy as np
    from tensorforge.compiler import te
    from tensorforge.compiler.build import build
    from tensorforge.runtime.device import cpu

    TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)
    launch = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(
        cpu.pool_symbols()[cpu.FOR_SYMBOL])
    A = te.placeholder((4096,), name="A")
    B = te.compute(A.shape, lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    o, _ = s[B].split(B.op.axis[0], nparts=37)
    s[B].parallel(o)
    f = build(s, [A, B], name="twice")
    a = np.arange(4096, dtype=np.float32)
    ran = []

    def nested(closure, task_id, num_tasks):  # a task that launches a loop of its own
        inner = []
        launch(ctypes.cast(TASK(lambda c, t, n: inner.append((t, n))), ctypes.c_void_p), None, 9)
        ran.append(inner == [(0, 1)])  # the pool is busy: the inner loop runs as one task

    def hammer(rounds):
        b = np.empty_like(a)
        for _ in range(rounds):
            f.function._cfunc(a.ctypes.data, b.ctypes.data)
            assert (b == 2 * a).all()

    task = TASK(nested)
    for threads in (2, 3, 1, 4, 2):
        cpu.set_num_threads(threads)
        for per_thread in (1, 4, 64):
            cpu.set_tasks_per_thread(per_thread)
            hammer(200)
            launch(ctypes.cast(task, ctypes.c_void_p), None, 5)
            workers = [threading.Thread(target=hammer, args=(100,)) for _ in range(3)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
    assert ran and all(ran), ran
    print("ok")
    """
)


def test_nested_and_concurrent_launches_and_resizes_never_hang() -> None:
    # in a child process: a deadlock fails this test at the timeout instead of hanging the run
    done = subprocess.run(
        [sys.executable, "-c", STRESS], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]

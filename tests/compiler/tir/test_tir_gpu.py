"""GPU semantics of the loop IR: thread blocks, shared memory, barriers, virtual threads."""

from __future__ import annotations

import compiler_ops as ops
import numpy as np
import pytest

from tensorforge.compiler import te, tir
from tensorforge.compiler.schedule import ScheduleError
from tensorforge.compiler.tir.gpu import insert_storage_sync
from tensorforge.compiler.topi.gpu.dense import schedule_matmul, spread_copy

NO_SYNC = [p for p in tir.DEFAULT_PIPELINE if p is not insert_storage_sync]


def gpu_matmul(
    n: int = 16, m: int = 12, p: int = 16, tile: int = 4, vthread: int = 1, cooperative: bool = True
):
    """TVM-style tiled matmul (`topi.gpu.dense`): blocks of (tile*vthread)^2 outputs, a tile x
    tile thread grid, A and B tiles staged through shared memory, the accumulator local."""
    op = ops.matmul(n, m, p)
    s = te.create_schedule(op.out.op)
    schedule_matmul(s, op.out, tile=tile, vthread=vthread, k_tile=4, cooperative=cooperative)
    return op, s


def _run(op, s, passes=None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    inputs = ops.random_inputs(op, seed)
    func = tir.lower(s, op.args, name="kernel", passes=passes)
    out = np.zeros(op.out.shape, op.out.dtype)
    tir.interpret(func, [*inputs, out])
    return out, op.reference(*inputs)


def _error_or_output(s, args, arrays: list[np.ndarray]) -> str | np.ndarray:  # noqa: ANN001
    """The ScheduleError's message of `tir.lower(s, args)`, or the last of `arrays` after the
    interpreter ran the lowered function on them."""
    try:
        func = tir.lower(s, args, name="kernel")
    except ScheduleError as err:
        return str(err)
    tir.interpret(func, arrays)
    return arrays[-1]


def test_gpu_matmul_with_shared_tiles_equals_numpy() -> None:
    op, s = gpu_matmul()
    got, expected = _run(op, s)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_shared_tile_covers_the_block_and_is_fetched_cooperatively() -> None:
    op, s = gpu_matmul()
    text = repr(tir.lower(s, op.args, name="kernel"))
    # one 4x4 tile per block (thread axes relaxed), one element per thread of the 4x4 block
    assert "allocate A.shared: float32[16] in shared" in text
    assert "allocate C.local: float32[1] in local" in text
    assert text.count('thread("threadIdx.x")') == 3  # compute, fetch of A, fetch of B
    assert text.count("storage_sync()") == 2  # before the fetch (WAR) and before the use (RAW)


def test_missing_barrier_gives_a_wrong_result() -> None:
    op, s = gpu_matmul()
    got, expected = _run(op, s, passes=NO_SYNC)
    assert not np.allclose(got, expected, equal_nan=False)


def test_barrier_before_overwrite_is_needed_across_iterations() -> None:
    op, s = gpu_matmul()
    func = tir.lower(s, op.args, name="kernel")

    class DropFirstSync(tir.StmtMutator):
        dropped = False

        def visit_Evaluate(self, e: tir.Evaluate):
            if not self.dropped and "storage_sync" in repr(e):
                self.dropped = True
                return tir.seq()
            return e

    broken = func.with_body(DropFirstSync().visit(func.body))
    inputs = ops.random_inputs(op)
    out = np.zeros(op.out.shape, op.out.dtype)
    tir.interpret(broken, [*inputs, out])
    assert not np.allclose(out, op.reference(*inputs))


def test_vthread_matmul_equals_numpy() -> None:
    op, s = gpu_matmul(n=16, m=8, p=16, tile=4, vthread=2)
    func = tir.lower(s, op.args, name="kernel")
    text = repr(func)
    assert "vthread" not in text
    assert "allocate C.local: float32[4] in local" in text  # one accumulator per virtual thread
    assert "allocate A.shared: float32[32] in shared" in text  # shared by the virtual threads
    got, expected = _run(op, s)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_gpu_conv2d_with_shared_input_equals_numpy() -> None:
    op = ops.conv2d(n=1, c=2, h=6, w=6, k=4, stride=1, pad=1)
    A, W, Out = op.args
    s = te.create_schedule(Out.op)
    s[op.parts["pad"]].compute_inline()
    WS = s.cache_read(W, "shared", [Out])
    OL = s.cache_write(Out, "local")
    nn, kk, y, x = s[Out].op.axis
    ko, ki = s[Out].split(kk, factor=2)
    s[Out].bind(ko, te.thread_axis("blockIdx.x"))
    s[Out].bind(y, te.thread_axis("threadIdx.y"))
    s[Out].bind(x, te.thread_axis("threadIdx.x"))
    s[Out].reorder(nn, ko, y, x, ki)
    s[OL].compute_at(s[Out], x)
    s[WS].compute_at(s[Out], ko)
    spread_copy(s, WS, 6, 6)
    got, expected = _run(op, s)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    text = repr(tir.lower(s, op.args))
    assert "allocate W.shared: float32[36] in shared" in text  # 2 filters x 2 x 3 x 3
    got, _ = _run(op, s, passes=NO_SYNC)
    assert not np.allclose(got, expected)


def _block(body: tir.Stmt) -> tir.PrimFunc:
    buf = tir.Buffer("X", "float32", (4,))
    tx = te.var("tx")
    loop = tir.For(
        tx, te.const(0), te.const(4), tir.ForKind.THREAD_BINDING, body(buf, tx), "threadIdx.x"
    )
    return tir.PrimFunc("f", (buf,), loop, ((4,),))


def test_verifier_rejects_barrier_in_divergent_code() -> None:
    from tensorforge.compiler.tir.gpu import storage_sync

    def body(buf, tx):
        return tir.IfThenElse(tx < 2, storage_sync())

    with pytest.raises(tir.VerifyError, match="barrier must not be inside a condition"):
        tir.verify_func(_block(body))


def test_verifier_rejects_shared_allocation_outside_blocks() -> None:
    shared = tir.Buffer("S", "float32", (4,), "shared")

    def body(buf, tx):
        return tir.BufferStore(buf, te.const(1.0), (tx,))

    func = _block(body)
    outside = func.with_body(tir.Allocate(shared, func.body))
    with pytest.raises(tir.VerifyError, match="shared buffer 'S' must be allocated inside"):
        tir.verify_func(outside)


def test_verifier_rejects_inconsistent_thread_extents() -> None:
    def body(buf, tx):
        inner = te.var("t2")
        store = tir.BufferStore(buf, te.const(1.0), (tx,))
        return tir.For(
            inner, te.const(0), te.const(8), tir.ForKind.THREAD_BINDING, store, "threadIdx.x"
        )

    with pytest.raises(tir.VerifyError, match="more iterations than the enclosing threadIdx.x"):
        tir.verify_func(_block(body))


def test_interpreter_detects_barrier_reached_by_some_threads_only() -> None:
    from tensorforge.compiler.tir.gpu import storage_sync

    def body(buf, tx):
        return tir.IfThenElse(tx < 2, storage_sync())

    with pytest.raises(tir.InterpretError, match="barrier in divergent control flow"):
        tir.interpret(_block(body), [np.zeros(4, "float32")])


def test_threads_of_a_block_share_shared_memory() -> None:
    """Each thread writes its own element, then reads its neighbour's: needs the barrier."""
    from tensorforge.compiler.tir.gpu import storage_sync

    shared = tir.Buffer("S", "float32", (4,), "shared")

    def body(buf, tx):
        write = tir.BufferStore(shared, te.cast(tx, "float32"), (tx,))
        read = tir.BufferStore(buf, tir.BufferLoad(shared, ((tx + 1) % 4,), "float32"), (tx,))
        return tir.Allocate(shared, tir.seq(write, storage_sync(), read))

    out = np.zeros(4, "float32")
    tir.interpret(_block(body), [out])
    np.testing.assert_array_equal(out, [1, 2, 3, 0])


def test_double_buffered_tiles_need_one_barrier_per_iteration() -> None:
    op, s = gpu_matmul()
    for T in s.stages:
        if T.scope == "shared":
            T.double_buffer()
    func = tir.lower(s, op.args, name="kernel")
    text = repr(func)
    assert "allocate A.shared: float32[32] in shared" in text  # two 4x4 halves
    assert "attr double_buffer_loop = A.shared, B.shared {" in text
    assert text.count("storage_sync()") == 1  # only before the use; the overwrite alternates
    got, expected = _run(op, s)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    got, _ = _run(op, s, passes=NO_SYNC)
    assert not np.allclose(got, expected)


def test_inject_virtual_threads_interleaves_copies_and_expands_private_buffers() -> None:
    F = tir.ForKind
    A = tir.Buffer("A", "float32", (2, 4))
    B = tir.Buffer("B", "float32", (2,))
    L = tir.Buffer("L", "float32", (1,), "local")
    v, k = te.var("v"), te.var("k")
    zero = (te.const(0),)
    acc = tir.BufferLoad(L, zero, "float32")
    body = tir.Allocate(
        L,
        tir.seq(
            tir.BufferStore(L, te.const(0.0), zero),
            tir.For(
                k,
                te.const(0),
                te.const(4),
                F.SERIAL,
                tir.BufferStore(L, acc + tir.BufferLoad(A, (v, k), "float32"), zero),
            ),
            tir.BufferStore(B, acc, (v,)),
        ),
    )
    loop = tir.For(v, te.const(0), te.const(2), F.THREAD_BINDING, body, "vthread")
    func = tir.PrimFunc("f", (A, B), loop, ((2, 4), (2,)))
    after = tir.inject_virtual_threads(func)
    assert repr(after).splitlines()[1:10] == [
        "  allocate L: float32[2, 1] in local {",
        "    L[0, 0] = 0.0f",
        "    L[1, 0] = 0.0f",
        "    for k in range(4) {",
        "      L[0, 0] = L[0, 0] + A[0, k]",
        "      L[1, 0] = L[1, 0] + A[1, k]",
        "    }",
        "    B[0] = L[0, 0]",
        "    B[1] = L[1, 0]",
    ]
    a = np.arange(8, dtype="float32").reshape(2, 4)
    for f in (func, after):  # the raw vthread loop runs serially: same answer
        out = np.zeros(2, "float32")
        tir.interpret(f, [a, out])
        np.testing.assert_array_equal(out, a.sum(axis=1))


def test_insert_storage_sync_places_raw_and_war_barriers() -> None:
    F = tir.ForKind
    A = tir.Buffer("A", "float32", (16,))
    C = tir.Buffer("C", "float32", (4,))
    S = tir.Buffer("S", "float32", (4,), "shared")
    tx, ko, k = te.var("tx"), te.var("ko"), te.var("k")
    fetch = tir.BufferStore(S, tir.BufferLoad(A, (ko * 4 + tx,), "float32"), (tx,))
    use = tir.For(
        k,
        te.const(0),
        te.const(4),
        F.SERIAL,
        tir.BufferStore(
            C, tir.BufferLoad(C, (tx,), "float32") + tir.BufferLoad(S, (k,), "float32"), (tx,)
        ),
    )
    body = tir.seq(
        tir.BufferStore(C, te.const(0.0), (tx,)),
        tir.For(ko, te.const(0), te.const(4), F.SERIAL, tir.seq(fetch, use)),
    )
    loop = tir.For(
        tx, te.const(0), te.const(4), F.THREAD_BINDING, tir.Allocate(S, body), "threadIdx.x"
    )
    func = tir.PrimFunc("f", (A, C), loop, ((16,), (4,)))
    after = tir.insert_storage_sync(func)
    lines = [line.strip() for line in repr(after).splitlines()]
    ko_at = lines.index("for ko in range(4) {")
    assert lines[ko_at + 1 : ko_at + 5] == [
        "@storage_sync()",  # WAR: iteration ko+1 must not overwrite S while others read it
        "S[tx] = A[ko*4 + tx]",
        "@storage_sync()",  # RAW: every thread's element is written before anyone reads S
        "for k in range(4) {",
    ]
    a = np.random.default_rng(0).uniform(-1, 1, 16).astype("float32")
    out = np.zeros(4, "float32")
    tir.interpret(after, [a, out])
    np.testing.assert_allclose(out, np.full(4, a.sum()), rtol=1e-5)
    tir.interpret(func, [a, out])
    assert not np.allclose(out, np.full(4, a.sum()))


def test_verifier_rejects_barrier_in_a_partial_thread_loop_and_nested_blocks() -> None:
    from tensorforge.compiler.tir.gpu import storage_sync

    F = tir.ForKind
    t2 = te.var("t2")

    def partial(buf, tx):
        short = tir.For(
            t2, te.const(0), te.const(2), F.THREAD_BINDING, storage_sync(), "threadIdx.x"
        )
        return tir.seq(tir.BufferStore(buf, te.const(1.0), (tx,)), short)

    with pytest.raises(tir.VerifyError, match="only some threads of the block enter"):
        tir.verify_func(_block(partial))

    def nested_block(buf, tx):
        store = tir.BufferStore(buf, te.const(1.0), (tx,))
        return tir.For(t2, te.const(0), te.const(1), F.THREAD_BINDING, store, "blockIdx.x")

    with pytest.raises(tir.VerifyError, match="block loop 't2' must not be inside a thread loop"):
        tir.verify_func(_block(nested_block))


def test_unbound_shared_copy_is_shared_out_over_the_threads() -> None:
    """Without binding the shared stages' loops, cooperative_fetch splits the copies."""
    op, s = gpu_matmul(cooperative=False)
    text = repr(tir.lower(s, op.args, name="kernel"))
    assert text.count('thread("threadIdx.x")') == 3  # compute + the two distributed copies
    assert "for ax0.chunk in range(1) {" not in text  # 16 elements, 16 threads: one round
    got, expected = _run(op, s)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    got, _ = _run(op, s, passes=NO_SYNC)
    assert not np.allclose(got, expected)


def test_cooperative_fetch_guards_a_copy_not_divisible_by_the_threads() -> None:
    op, s = gpu_matmul(n=12, m=12, p=12, tile=3, cooperative=False)  # 3x4 tiles, 9 threads
    text = repr(tir.lower(s, op.args, name="kernel"))
    assert "for ax0.chunk in range(2) {" in text  # 12 elements over 9 threads
    got, expected = _run(op, s)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def _partial_thread_matmul(bind_copy: int | None, threads: int = 3, k_factor: int = 1):
    """(E = A*2 + 1) @ B with 3 output threads per block, but a block of 4 threads (E's shared
    copy is bound to 4): B's shared tile is computed inside the accumulator's k loop, so inside
    the thread loop of 3 that thread 3 skips. `bind_copy`: threads bound to B's copy (None:
    left to cooperative_fetch); `threads`: output threads per block; `k_factor`: rows of B
    per tile."""
    n, m, p = 1, 5, 3
    A, B = te.placeholder((n, m), name="A"), te.placeholder((m, p), name="B")
    E = te.compute((n, m), lambda i, j: A[i, j] * 2.0 + 1.0, name="E")
    k = te.reduce_axis((0, m), "k")
    C = te.compute((n, p), lambda i, j: te.sum(E[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    BB = s.cache_read(B, "shared", [CL.op])
    bx, tx = s[C].split(s[C].fuse(*C.op.axis), factor=threads)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tx)
    ko, _ = s[CL].split(s[CL].op.reduce_axis[0], factor=k_factor)
    s[BB].compute_at(s[CL], ko)
    if bind_copy is not None:
        _, t = s[BB].split(s[BB].fuse(*s[BB].op.axis), factor=bind_copy)
        s[BB].bind(t, te.thread_axis("threadIdx.x"))
    s[E].set_scope("shared")
    s[E].compute_at(s[C], bx)
    _, t = s[E].split(s[E].fuse(*s[E].op.axis), factor=4)
    s[E].bind(t, te.thread_axis("threadIdx.x"))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, m), "float32"), rng.standard_normal((m, p), "float32")
    return s, [A, B, C], (a, b), (a * 2 + 1) @ b


@pytest.mark.parametrize("bind_copy", [2, None], ids=["bound", "cooperative"])
def test_shared_tile_inside_a_partial_thread_loop_gets_its_barriers(bind_copy) -> None:
    """Threads 0..2 fill B's tile then read each other's elements, inside a thread loop that
    thread 3 of the block skips: no barrier can go there, so the loop runs over all 4 threads
    with its statements guarded and the barriers between them (before: no barrier, a wrong
    result; the unbound copy was shared over 4 threads inside a loop of 3, a VerifyError)."""
    s, args, (a, b), want = _partial_thread_matmul(bind_copy)
    func = tir.lower(s, args, name="kernel")
    text = repr(func)
    assert "if i.j.fused.inner_1 < 3 {" in text and text.count("@storage_sync()") == 3
    got = np.zeros(want.shape, "float32")
    tir.interpret(func, [a, b, got])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_binding_more_threads_than_an_enclosing_thread_loop_is_a_schedule_error() -> None:
    """B's 2x1 tile, inside a thread loop of 1, bound to 2 threads: the 2nd thread never gets
    there (before: a VerifyError, an internal error, from the verifier after lowering)."""
    s, args, _, _ = _partial_thread_matmul(2, threads=1, k_factor=2)
    with pytest.raises(ScheduleError, match=r"^bind: thread loop .* enclosing threadIdx.x loop"):
        tir.lower(s, args, name="kernel")


def test_a_local_stage_filled_by_several_threads_is_a_schedule_error() -> None:
    """T computed at the block loop, its loop bound to 3 threads, in `local` scope: each thread
    holds only its own element of T, and B's threads read the others' (before: NaN in the
    interpreter, garbage on OpenCL; the same schedule in `shared` scope is right)."""
    A = te.placeholder((1, 3), name="A")
    T = te.compute((1, 3), lambda i, j: A[i, j] + 1.0, name="T")
    B = te.compute((1, 3), lambda i, j: T[i, 2 - j] * 2.0, name="B")
    results = {}
    for scope in ("shared", "local"):
        s = te.create_schedule(B.op)
        bx, tx = s[B].split(s[B].fuse(*B.op.axis), factor=3)
        s[B].bind(bx, te.thread_axis("blockIdx.x"))
        s[B].bind(tx, te.thread_axis("threadIdx.x"))
        s[T].set_scope(scope)
        s[T].compute_at(s[B], bx)
        s[T].bind(s[T].fuse(*s[T].op.axis), te.thread_axis("threadIdx.x"))
        a, b = np.arange(3, dtype="float32").reshape(1, 3), np.zeros((1, 3), "float32")
        results[scope] = _error_or_output(s, [A, B], [a, b])
    np.testing.assert_array_equal(results["shared"], [[6.0, 4.0, 2.0]])
    assert results["local"].startswith(
        "bind: stage 'T' has scope 'local', private to each thread, so its loop 'i.j.fused' "
        "cannot be bound to threadIdx.x"
    )


def test_a_reduction_no_thread_loop_covers_runs_on_one_thread_of_the_block() -> None:
    """R's loops are not bound, but its block has 4 threads (S's copy is bound to them): every
    thread ran R's init and updates on the same global element (before: 16 instead of 4 in the
    interpreter, a race on OpenCL)."""
    A = te.placeholder((2, 4), name="A")
    S = te.compute((2, 4), lambda i, j: A[i, j] * 2.0, name="S")
    k = te.reduce_axis((0, 4), "k")
    R = te.compute((2,), lambda i: te.sum(S[i, k], axis=k), name="R")
    s = te.create_schedule(R.op)
    s[R].bind(R.op.axis[0], te.thread_axis("blockIdx.x"))
    s[S].set_scope("shared")
    s[S].compute_at(s[R], R.op.axis[0])
    s[S].bind(s[S].op.axis[1], te.thread_axis("threadIdx.x"))
    func = tir.lower(s, [A, R], name="kernel")
    assert 'for threadIdx.x.one in range(1) thread("threadIdx.x") {' in repr(func)
    a, r = np.arange(8, dtype="float32").reshape(2, 4), np.zeros(2, "float32")
    tir.interpret(func, [a, r])
    np.testing.assert_array_equal(r, (a * 2).sum(axis=1))


def test_a_local_stage_with_a_thread_loop_of_one_is_a_schedule_error() -> None:
    """T local at B's thread loop (3 threads), T's own loop of 1 bound to threadIdx.x: only
    thread 0 enters it, threads 1 and 2 read their T uninitialised (before: NaN)."""
    A = te.placeholder((3,), name="A")
    T = te.compute((3,), lambda i: A[i] + 1.0, name="T")
    B = te.compute((3,), lambda i: T[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
    s[T].set_scope("local")
    s[T].compute_at(s[B], B.op.axis[0])
    s[T].bind(T.op.axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=r"^bind: stage 'T' has scope 'local', private to"):
        tir.lower(s, [A, B], name="kernel")


def test_a_global_stage_inside_a_block_filled_by_several_threads_is_a_schedule_error() -> None:
    """A stage in `global` scope computed at the block loop is allocated inside the block, one
    per thread as a local one (before: NaN in the interpreter for the elements other threads
    computed)."""
    A = te.placeholder((4,), name="A")
    T = te.compute((4,), lambda i: A[i] + 1.0, name="T")
    B = te.compute((4,), lambda i: T[3 - i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[T].compute_at(s[B], bx)
    s[T].bind(T.op.axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=r"^bind: stage 'T' has scope 'global', private to"):
        tir.lower(s, [A, B], name="kernel")


def test_a_block_loop_of_a_stage_computed_inside_a_block_is_a_schedule_error() -> None:
    """T shared at B's block loop, its own loop bound to blockIdx.y: each block would compute
    only its blockIdx.y slice of T, and B reads all of it (before: a wrong answer on OpenCL).
    The same loop bound to threadIdx.x is right."""
    A = te.placeholder((2, 3), name="A")
    T = te.compute((2, 3), lambda i, j: A[i, j] + 1.0, name="T")
    B = te.compute((2, 3), lambda i, j: T[1 - i, 2 - j] * 2.0, name="B")
    results = {}
    for tag in ("threadIdx.x", "blockIdx.y"):
        s = te.create_schedule(B.op)
        bx, tx = s[B].split(s[B].fuse(*B.op.axis), factor=1)
        s[B].bind(bx, te.thread_axis("blockIdx.x"))
        s[B].bind(tx, te.thread_axis("threadIdx.x"))
        s[T].set_scope("shared")
        s[T].compute_at(s[B], bx)
        outer, _ = s[T].split(s[T].fuse(*s[T].op.axis), factor=2)
        s[T].bind(outer, te.thread_axis(tag))
        a, b = np.arange(6, dtype="float32").reshape(2, 3), np.zeros((2, 3), "float32")
        results[tag] = _error_or_output(s, [A, B], [a, b])
    np.testing.assert_array_equal(
        results["threadIdx.x"], (np.arange(6)[::-1] + 1.0).reshape(2, 3) * 2
    )
    assert results["blockIdx.y"].startswith(
        "bind: stage 'T' is computed inside loop 'i.j.fused.outer' of 'B', in a thread block, so "
        "its loop 'i.j.fused.outer' cannot be bound to blockIdx.y"
    )


def test_a_shared_reduction_computed_inside_a_thread_loop_is_a_schedule_error() -> None:
    """A cache_write stage made `shared` at the output's thread loop: its bounds are relaxed
    over the threads, so every thread would run the whole reduction into the same buffer
    (before: the sums doubled with two threads). In `local` scope it is right."""
    A = te.placeholder((3, 3), name="A")
    k = te.reduce_axis((0, 3), "k")
    O = te.compute((3, 3), lambda y, x: te.sum(A[y, k] * A[k, x], axis=k), name="O")  # noqa: E741 - the output
    results = {}
    for scope in ("local", "shared"):
        s = te.create_schedule(O.op)
        OL = s.cache_write(O, "local")
        b, t = s[O].split(s[O].fuse(*O.op.axis), factor=2)
        s[O].bind(b, te.thread_axis("blockIdx.x"))
        s[O].bind(t, te.thread_axis("threadIdx.x"))
        s[OL].compute_at(s[O], t)
        s[OL].set_scope(scope)
        a, o = np.arange(9, dtype="float32").reshape(3, 3), np.zeros((3, 3), "float32")
        results[scope] = _error_or_output(s, [A, O], [a, o])
    a = np.arange(9, dtype="float32").reshape(3, 3)
    np.testing.assert_allclose(results["local"], a @ a)
    assert results["shared"].startswith(
        "set_scope: stage 'O.local' has scope 'shared' and a reduction, and is computed inside "
        "thread loop 'y.x.fused.inner' of 'O'"
    )

"""Schedule primitives: legality errors, JSON replay, and how annotations reach the loop IR."""

from __future__ import annotations

import json

import compiler_ops as ops
import numpy as np
import pytest

from tensorforge.compiler import te, tir
from tensorforge.compiler.schedule import (
    PRIMITIVES,
    Schedule,
    ScheduleError,
    Split,
    primitive_name,
    records_from_json,
)


def _matmul():
    op = ops.matmul(8, 4, 8)
    return op, te.create_schedule(op.out.op)


def test_split_returns_named_outer_and_inner_axes() -> None:
    op, s = _matmul()
    xo, xi = s[op.out].split(op.out.op.axis[0], factor=4)
    assert (xo.name, xi.name) == ("i.outer", "i.inner")
    assert [iv.name for iv in s[op.out].leaf_iter_vars] == ["i.outer", "i.inner", "j", "k"]
    assert s.primitives == [Split("C", "i", 4, None)]


@pytest.mark.parametrize(
    ("apply", "message"),
    [
        (lambda s, C, i, j, k: s[C].split(i, factor=0), "split: factor/nparts must be"),
        (lambda s, C, i, j, k: s[C].split(i, factor=2, nparts=2), "split: give exactly one"),
        (lambda s, C, i, j, k: s[C].fuse(j, i), "fuse: axes 'j', 'i' of stage 'C' must be adj"),
        (lambda s, C, i, j, k: s[C].fuse(j, k), "fuse: cannot fuse reduction and data-par"),
        (lambda s, C, i, j, k: s[C].reorder(i, i), "reorder: axes must be distinct"),
        (lambda s, C, i, j, k: s[C].tile(i, i, 2, 2), "tile: x and y must be different"),
        (lambda s, C, i, j, k: s[C].vectorize(k), "vectorize: axis 'k' of stage 'C' is a red"),
        (lambda s, C, i, j, k: s[C].parallel(k), "parallel: axis 'k' of stage 'C' is a red"),
        (lambda s, C, i, j, k: s[C].compute_inline(), "compute_inline: output stage 'C'"),
        (lambda s, C, i, j, k: s[C].compute_at(s[C], i), "compute_at: stage 'C' cannot be comp"),
        (lambda s, C, i, j, k: s[C].set_scope("local"), "set_scope: output 'C' lives in its"),
        (lambda s, C, i, j, k: s.cache_write(C, "registers"), "cache_write: scope must be"),
        (lambda s, C, i, j, k: s[C].bind(i, te.var("x")), "bind: thread must be a te.thread_ax"),
        (lambda s, C, i, j, k: s[C].pragma(i, "no spaces"), "pragma: key must be an identifier"),
    ],
)
def test_illegal_primitives_raise_schedule_error_with_the_reason(apply, message) -> None:
    op, s = _matmul()
    C = op.out
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    with pytest.raises(ScheduleError, match=message.replace("(", r"\(")):
        apply(s, C, i, j, k)
    assert s.primitives == []


def test_axes_of_other_stages_and_non_leaves_are_rejected() -> None:
    op, s = _matmul()
    A = op.args[0]
    other = ops.matmul()
    with pytest.raises(ScheduleError, match="split: axis 'i' does not belong to stage 'C'"):
        s[op.out].split(other.out.op.axis[0], factor=2)
    i = op.out.op.axis[0]
    s[op.out].split(i, factor=2)
    with pytest.raises(ScheduleError, match="split: axis 'i' of stage 'C' is not a leaf"):
        s[op.out].split(i, factor=2)
    with pytest.raises(ScheduleError, match="compute_inline: stage 'A' is a placeholder"):
        s[A].compute_inline()


def test_cache_write_must_come_before_loop_transformations() -> None:
    op, s = _matmul()
    s[op.out].split(op.out.op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match="cache_write: stage 'C' must not be split"):
        s.cache_write(op.out, "local")


def test_cache_read_checks_the_readers() -> None:
    op, s = _matmul()
    A = op.args[0]
    with pytest.raises(ScheduleError, match="cache_read: stage 'A' does not read 'A'"):
        s.cache_read(A, "shared", [A])


def test_compute_at_a_loop_outside_a_consumer_fails_at_lowering() -> None:
    op = ops.softmax()
    s = te.create_schedule(op.out.op)
    mx = op.parts["max"]
    s[mx].compute_at(s[op.parts["sum"]], s[op.parts["sum"]].op.axis[0])
    with pytest.raises(
        ScheduleError,
        match="compute_at: stage 'Max' is computed inside Sum.i "
        "but its consumer 'Exp' runs outside that loop",
    ):
        tir.lower(s, op.args)


def test_compute_at_cycles_are_rejected() -> None:
    op = ops.softmax()
    s = te.create_schedule(op.out.op)
    ex, sm = op.parts["exp"], op.parts["sum"]
    s[ex].compute_at(s[sm], s[sm].op.axis[0])
    with pytest.raises(ScheduleError, match="compute_at: stage 'Exp' is already computed inside"):
        s[sm].compute_at(s[ex], s[ex].op.axis[0])


def test_schedule_round_trips_through_json() -> None:
    op, s = _matmul()
    C = op.out
    AA = s.cache_read(op.args[0], "shared", [C])
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[CC].compute_at(s[C], jo)
    s[AA].compute_at(s[CC], s[CC].op.reduce_axis[0])
    s[C].vectorize(ji)
    s[C].pragma(io, "dma_copy", 1)
    text = s.to_json()
    assert [r["primitive"] for r in json.loads(text)][:3] == ["cache_read", "cache_write", "tile"]
    replayed = Schedule.from_json(text, C)
    assert repr(tir.lower(replayed, op.args)) == repr(tir.lower(s, op.args))
    ops.check(op, replayed)


def test_every_primitive_has_a_json_name() -> None:
    names = [primitive_name(cls) for cls in PRIMITIVES]
    assert "compute_at" in names and "double_buffer" in names and len(set(names)) == len(names)
    with pytest.raises(ValueError, match="unknown schedule primitive 'warp_speed'"):
        records_from_json('[{"primitive": "warp_speed"}]')


def test_loop_annotations_reach_the_loop_ir() -> None:
    op, s = _matmul()
    C = op.out
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=4)
    s[C].reorder(io, jo, ii, ji)
    s[C].parallel(io)
    s[C].unroll(ii)
    s[C].vectorize(ji)
    s[C].pragma(jo, "auto_unroll_max_step", 16)
    text = repr(tir.lower(s, op.args, passes=[]))
    assert "for i.outer in range(2) parallel {" in text
    assert "attr pragma_auto_unroll_max_step = 16 {" in text
    assert "for i.inner in range(4) unrolled {" in text
    assert "for j.inner in range(4) vectorized {" in text
    lowered = tir.lower(s, op.args)  # unroll expands i.inner
    assert "i.inner" not in repr(lowered)
    ops.check(op, s)


def test_bind_and_virtual_threads_become_thread_loops() -> None:
    op, s = _matmul()
    C = op.out
    i, j = C.op.axis
    bx, tx = s[C].split(i, factor=4)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    vo, vi = s[C].split(j, nparts=2)
    s[C].bind(vo, te.thread_axis("vthread"))
    text = repr(tir.lower(s, op.args, passes=[]))
    assert 'for i.outer in range(2) thread("blockIdx.x") {' in text
    assert 'for i.inner in range(4) thread("threadIdx.x") {' in text
    assert 'for j.outer in range(2) thread("vthread") {' in text
    assert "vthread" not in repr(tir.lower(s, op.args))  # inject_virtual_threads interleaves it
    with pytest.raises(ScheduleError, match="bind: blockIdx.x is already bound to axis 'i.outer'"):
        s[C].bind(vi, te.thread_axis("blockIdx.x"))
    ops.check(op, s)  # the interpreter runs thread loops serially


def test_set_scope_and_double_buffer_are_visible_in_the_ir() -> None:
    op, s = _matmul()
    C = op.out
    AA = s.cache_read(op.args[0], "shared", [C])
    s[AA].set_scope("local.inp_buffer")
    s[AA].compute_at(s[C], C.op.axis[0])
    s[AA].double_buffer()
    text = repr(tir.lower(s, op.args))
    assert "allocate A.shared: float32[4] in local.inp_buffer {" in text
    assert "attr double_buffer_scope = 'A.shared' {" in text
    ops.check(op, s)


def _gemm_intrinsic(n: int) -> te.TensorIntrin:
    a, b = te.placeholder((n, n), name="a"), te.placeholder((n, n), name="b")
    k = te.reduce_axis((0, n), "k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")

    def lower(ins, outs):
        (A, B), (C,) = ins, outs
        i, j, r = te.var("ii"), te.var("jj"), te.var("kk")

        def at(region, x, y):
            return (region.starts[0] + x, region.starts[1] + y)

        def loops(body, *variables):
            for v in reversed(variables):
                body = tir.For(v, te.const(0), te.const(n), tir.ForKind.SERIAL, body)
            return body

        acc = tir.BufferLoad(C.buffer, at(C, i, j), "float32")
        prod = tir.BufferLoad(A.buffer, at(A, i, r), "float32") * tir.BufferLoad(
            B.buffer, at(B, r, j), "float32"
        )
        update = loops(tir.BufferStore(C.buffer, acc + prod, at(C, i, j)), i, j, r)
        reset = loops(tir.BufferStore(C.buffer, te.const(0.0), at(C, i, j)), i, j)
        tag = f"pragma_gemm{n}"
        return (
            tir.AttrStmt(tag, n, tir.seq(reset, update)),
            tir.AttrStmt(tag, n, reset),
            tir.AttrStmt(tag, n, update),
        )

    return te.decl_tensor_intrin(c, lower, name=f"test_gemm{n}")


@pytest.mark.parametrize("split_k", [False, True])
def test_tensorize_replaces_the_inner_tile_with_the_intrinsic(split_k: bool) -> None:
    intrin = _gemm_intrinsic(2)
    op = ops.matmul(4, 6 if split_k else 2, 4)
    s = te.create_schedule(op.out.op)
    C = op.out
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 2, 2)
    if split_k:
        ko, ki = s[C].split(C.op.reduce_axis[0], factor=2)
        s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, intrin)
    text = repr(tir.lower(s, op.args))
    assert text.count("attr pragma_gemm2 = 2 {") == 1
    ops.check(op, s)


def test_tensorize_rejects_mismatched_tiles() -> None:
    intrin = _gemm_intrinsic(2)
    op = ops.matmul(4, 2, 4)
    s = te.create_schedule(op.out.op)
    C = op.out
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 2)
    s[C].tensorize(ii, intrin)
    with pytest.raises(
        ScheduleError,
        match=r"tensorize: stage 'C' cannot use intrinsic "
        r"'test_gemm2': it reads a \[4, 2\] tile of A",
    ):
        tir.lower(s, op.args)
    with pytest.raises(ScheduleError, match="tensorize: no tensor intrinsic named 'nope'"):
        s.apply(type(s.primitives[-1])("C", "j.outer", "nope"))


def test_lowering_checks_arguments() -> None:
    op, s = _matmul()
    A, B, C = op.args
    with pytest.raises(tir.LoweringError, match="tensor 'B' is read but is neither"):
        tir.lower(s, [A, C])
    with pytest.raises(tir.LoweringError, match="output 'C' must be in the arguments"):
        tir.lower(s, [A, B])
    f = tir.lower(s, [A, B, C])
    with pytest.raises(ValueError, match=r"argument A must be float32\[8, 4\], not float64"):
        tir.interpret(
            f, [np.zeros((8, 4)), np.zeros((4, 8), "float32"), np.zeros((8, 8), "float32")]
        )


def test_compute_root_undoes_compute_at_and_keeps_results() -> None:
    op = ops.softmax()
    s = te.create_schedule(op.out.op)
    mx, ex = op.parts["max"], op.parts["exp"]
    s[mx].compute_at(s[ex], s[ex].op.axis[0])
    nested = tir.func_to_str(tir.lower(s, op.args, name="softmax"))
    s[mx].compute_root()
    assert [primitive_name(r) for r in s.primitives] == ["compute_at", "compute_root"]
    rooted = tir.lower(s, op.args, name="softmax")
    # At the root, Max is computed whole before Exp, as with no schedule; inside Exp's row
    # loop it was computed one row at a time.
    assert tir.func_to_str(rooted) == tir.func_to_str(
        tir.lower(te.create_schedule(op.out.op), op.args, name="softmax")
    )
    assert tir.func_to_str(rooted) != nested
    x = np.random.default_rng(0).standard_normal(op.args[0].shape).astype("float32")
    out = np.zeros(op.out.shape, "float32")
    tir.interpret(rooted, [x, out])
    np.testing.assert_allclose(out, op.reference(x), rtol=1e-5)


@pytest.mark.parametrize(
    ("first", "then", "message"),
    [
        ("bind", "vectorize", "vectorize: axis 'i' of stage 'C' is already bound to blockIdx.x"),
        ("bind", "unroll", "unroll: axis 'i' of stage 'C' is already bound to blockIdx.x"),
        ("bind", "parallel", "parallel: axis 'i' of stage 'C' is already bound to blockIdx.x"),
        ("unroll", "bind", "bind: axis 'i' of stage 'C' is already unrolled"),
        ("vectorize", "bind", "bind: axis 'i' of stage 'C' is already vectorized"),
    ],
)
def test_a_loop_is_not_both_thread_bound_and_vectorized_unrolled_or_parallel(
    first, then, message
) -> None:
    """Before: vectorize on a bound axis kept its thread tag, and lowering failed the
    verifier (an internal VerifyError) on a vectorized loop with a thread tag."""
    op, s = _matmul()
    i = op.out.op.axis[0]
    block = te.thread_axis("blockIdx.x")
    apply = {
        "bind": lambda: s[op.out].bind(i, block),
        "vectorize": lambda: s[op.out].vectorize(i),
        "unroll": lambda: s[op.out].unroll(i),
        "parallel": lambda: s[op.out].parallel(i),
    }
    apply[first]()
    with pytest.raises(ScheduleError, match=f"^{message}; a loop cannot be both"):
        apply[then]()
    assert len(s.primitives) == 1
    assert tir.lower(s, op.args) is not None  # the schedule stays usable

"""Tensorize: stride/affinity checks of the replaced tile and pointer arguments (access_ptr)."""

from __future__ import annotations

import compiler_ops as ops
import numpy as np
import pytest

from tensorforge.compiler import te, tir
from tensorforge.compiler.schedule import ScheduleError


def _gemm_ptr_intrinsic(n: int) -> te.TensorIntrin:
    """An n x n matmul-accumulate done by an extern call that receives buffer pointers."""
    a, b = te.placeholder((n, n), name="a"), te.placeholder((n, n), name="b")
    k = te.reduce_axis((0, n), "k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")

    def lower(ins, outs):
        (A, B), (C,) = ins, outs

        def call(name, *regions_and_masks):
            args = []
            for region, mask in regions_and_masks:
                args += [region.access_ptr(mask), te.const(region.buffer.shape[-1])]
            return tir.Evaluate(te.call_extern(name, *args))

        update = call(f"gemm{n}_update", (A, "r"), (B, "r"), (C, "rw"))
        reset = call(f"gemm{n}_reset", (C, "rw"))
        return tir.seq(reset, update), reset, update

    def tile(ptr, ld):
        rows = [ptr.read()[r * ld : r * ld + n] for r in range(n)]
        return np.stack(rows)

    def update(pa, lda, pb, ldb, pc, ldc):
        acc = tile(pc, ldc) + tile(pa, lda) @ tile(pb, ldb)
        data = pc.read()
        for r in range(n):
            data[r * ldc : r * ldc + n] = acc[r]
        pc.write(data)

    def reset(pc, ldc):
        data = pc.read()  # keep the elements between the tile's rows
        for r in range(n):
            data[r * ldc : r * ldc + n] = 0
        pc.write(data)

    tir.register_extern(f"gemm{n}_update", update)
    tir.register_extern(f"gemm{n}_reset", reset)
    return te.decl_tensor_intrin(c, lower, name=f"test_gemm_ptr{n}")


def test_tensorize_with_pointer_arguments_equals_numpy() -> None:
    intrin = _gemm_ptr_intrinsic(2)
    op = ops.matmul(4, 6, 6)
    s = te.create_schedule(op.out.op)
    C = op.out
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 2, 2)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=2)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, intrin)
    f = tir.lower(s, op.args)
    text = repr(f)
    assert '@gemm2_update(A.access_ptr("r", ' in text
    assert 'C.access_ptr("rw", ' in text and ", 8), 6)" in text  # 2 rows of 6: span 8
    inputs = ops.random_inputs(op)
    out = np.zeros(op.out.shape, "float32")
    tir.interpret(f, [*inputs, out])
    np.testing.assert_allclose(out, op.reference(*inputs), rtol=1e-5)


def test_access_ptr_mask_is_enforced() -> None:
    buf = tir.Buffer("X", "float32", (2, 3))
    region = tir.BufferRegion(buf, (te.const(1), te.const(0)), (1, 3))
    ptr = region.access_ptr("r")
    assert (ptr.extent, ptr.mask) == (3, "r")
    with pytest.raises(ValueError, match="access_ptr mask must be one of"):
        region.access_ptr("x")
    seen = []
    tir.register_extern("test_ptr_write", lambda p: seen.append(p.write([1.0, 2.0, 3.0])))
    body = tir.Evaluate(te.call_extern("test_ptr_write", ptr))
    func = tir.PrimFunc("f", (buf,), body, ((2, 3),))
    with pytest.raises(tir.InterpretError, match="access_ptr of X is read-only"):
        tir.interpret(func, [np.zeros((2, 3), "float32")])
    writable = tir.PrimFunc(
        "f",
        (buf,),
        tir.Evaluate(te.call_extern("test_ptr_write", region.access_ptr("w"))),
        ((2, 3),),
    )
    x = np.zeros((2, 3), "float32")
    tir.interpret(tir.storage_flatten(writable), [x])
    np.testing.assert_array_equal(x, [[0, 0, 0], [1, 2, 3]])


def _gemm_intrinsic(n: int) -> te.TensorIntrin:
    a, b = te.placeholder((n, n), name="a"), te.placeholder((n, n), name="b")
    k = te.reduce_axis((0, n), "k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    return te.decl_tensor_intrin(c, lambda ins, outs: tir.seq(), name=f"test_gemm_stride{n}")


def test_tensorize_rejects_a_transposed_operand_naming_tensor_and_index() -> None:
    n = 4
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), "k")
    C = te.compute((n, n), lambda i, j: te.sum(A[k, i] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 2, 2)
    ko, ki = s[C].split(k, factor=2)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, _gemm_intrinsic(2))
    with pytest.raises(
        ScheduleError,
        match=r"intrinsic 'test_gemm_stride2': index 0 of A \(`.*`\) must be affine in the "
        r"tensorized axes with the strides the intrinsic declares, but its stride along "
        r"'i.inner' is 0, the intrinsic's 1",
    ):
        tir.lower(s, [A, B, C])


def test_tensorize_rejects_non_affine_indices() -> None:
    op = ops.matmul(4, 2, 4)
    C = op.out
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 2, 2)
    fused = s[C].fuse(ii, ji)
    s[C].tensorize(fused, _gemm_intrinsic(2))
    with pytest.raises(
        ScheduleError, match=r"index 0 of A .* it is not affine in 'i.inner.j.inner.fused'"
    ):
        tir.lower(s, op.args)

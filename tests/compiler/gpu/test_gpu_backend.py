"""The GPU back-end: CUDA C / OpenCL C from the loop IR, run on OpenCL (PoCL on this CPU).

Oracles: numpy for operators, onnxruntime for whole models. Every generated CUDA kernel is
compiled by NVRTC (no GPU needed) in test_gpu_cuda_source.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from compiler_ops import (
    INTEGERS,
    UNSIGNED,
    bitwise_inputs,
    bitwise_ops,
    unsigned_inputs,
    unsigned_ops,
)

from tensorforge.compiler import te
from tensorforge.compiler.build import build_gpu
from tensorforge.compiler.codegen.gpu import GPULimitError, split_kernels
from tensorforge.compiler.tir import LoweringError, lower
from tensorforge.compiler.topi.gpu import GPUScheduleConfig, schedule_auto
from tensorforge.compiler.topi.gpu.dense import (
    DenseGPUConfig,
    dense,
    matmul,
    schedule_dense,
    schedule_matmul,
)
from tensorforge.runtime.device.gpu import GPUError, open_device

RNG = np.random.default_rng(0)


def _auto(outputs, args, threads=64, name="f"):
    s = schedule_auto(outputs, GPUScheduleConfig(threads=threads))
    return build_gpu(s, args, "opencl", name=name)


@pytest.mark.parametrize(("vthread", "cooperative"), [(1, True), (2, True), (2, False)])
def test_shared_memory_matmul_with_barriers_and_virtual_threads(vthread, cooperative) -> None:
    n, m, p = 32, 24, 40  # 40 is not a multiple of the block's 16 columns: guarded edges
    A, B = te.placeholder((n, m), name="A"), te.placeholder((m, p), name="B")
    C = matmul(A, B)
    s = schedule_matmul(
        te.create_schedule(C.op), C, tile=8 // vthread, vthread=vthread, cooperative=cooperative
    )
    f = build_gpu(s, [A, B, C], "opencl", name="mm")
    assert "__local float" in f.source and "barrier(CLK_LOCAL_MEM_FENCE);" in f.source
    a, b = RNG.standard_normal((n, m), "float32"), RNG.standard_normal((m, p), "float32")
    c = np.zeros((n, p), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_integer_semantics_match_numpy() -> None:
    """int8 wraps, // and % floor for negative operands, / truncates, shifts, casts."""
    a8 = te.placeholder((64,), "int8", name="a8")
    b8 = te.placeholder((64,), "int8", name="b8")
    x = te.placeholder((64,), "int32", name="x")
    y = te.placeholder((64,), "int32", name="y")
    outs = [
        te.compute((64,), lambda i: a8[i] + b8[i], name="wrap"),
        te.compute((64,), lambda i: x[i] // y[i], name="fdiv"),
        te.compute((64,), lambda i: x[i] % y[i], name="fmod"),
        te.compute((64,), lambda i: te.max(x[i], y[i]) - te.min(x[i], y[i]), name="span"),
    ]
    f = _auto(outs, [a8, b8, x, y, *outs])
    av = RNG.integers(-128, 128, 64).astype("int8")
    bv = RNG.integers(-128, 128, 64).astype("int8")
    xv = RNG.integers(-1000, 1000, 64).astype("int32")
    yv = RNG.integers(1, 50, 64).astype("int32") * RNG.choice([-1, 1], 64).astype("int32")
    got = [np.zeros(64, t.dtype) for t in outs]
    f(av, bv, xv, yv, *got)
    np.testing.assert_array_equal(got[0], (av.astype(np.int16) + bv).astype(np.int8))
    np.testing.assert_array_equal(got[1], xv // yv)
    np.testing.assert_array_equal(got[2], xv % yv)
    np.testing.assert_array_equal(got[3], np.abs(xv - yv))


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unsigned_integers_wrap_divide_and_compare_like_numpy(dtype: str) -> None:
    """ushort/uint/ulong: modular + - * (a ushort product past int's range), unsigned / % < and
    >>, literals past the signed range, zero extension, conversions to and from double."""
    inputs, outs, reference = unsigned_ops(dtype, 64)
    f = _auto(outs, [*inputs, *outs])
    a, b = unsigned_inputs(dtype, 64)
    got = [np.zeros(64, t.dtype) for t in outs]
    f(a, b, *got)
    for t, g, want in zip(outs, got, reference(a, b), strict=True):
        np.testing.assert_array_equal(g, want, err_msg=t.name)


@pytest.mark.parametrize("dtype", INTEGERS)
def test_bitwise_operators_match_numpy_at_every_shift_amount(dtype: str) -> None:
    """& | ^ ~ of every integer type (negative values too) and << >> by amounts past the width
    and negative ones, where C is undefined and OpenCL masks the amount: numpy's 0 or sign bits
    (the shift helpers)."""
    inputs, outs, reference = bitwise_ops(dtype, 64)
    f = _auto(outs, [*inputs, *outs])
    arrays = bitwise_inputs(dtype, 64)
    got = [np.zeros(64, t.dtype) for t in outs]
    f(*arrays, *got)
    for t, g, want in zip(outs, got, reference(*arrays), strict=True):
        np.testing.assert_array_equal(g, want, err_msg=t.name)


def test_float_math_and_bool_buffers_match_numpy() -> None:
    x = te.placeholder((300,), name="x")
    outs = [
        te.compute((300,), lambda i: te.round(x[i] * 2.0), name="rnd"),
        te.compute((300,), lambda i: te.sigmoid(x[i]) + te.erf(x[i]) * te.tanh(x[i]), name="sm"),
        te.compute((300,), lambda i: x[i] > 0.25, name="pos"),
        te.compute((300,), lambda i: te.Cast("int32", x[i] * 10.0), name="tr"),
    ]
    f = _auto(outs, [x, *outs], threads=128)
    xv = (RNG.standard_normal(300) * 2).astype("float32")
    xv[:4] = [0.25, -0.75, 1.25, 2.5]  # halves: round to even
    got = [np.zeros(300, t.dtype) for t in outs]
    f(xv, *got)
    import math

    erf = np.vectorize(math.erf)(xv.astype("float64"))
    np.testing.assert_array_equal(got[0], np.round(xv * np.float32(2)))
    ref = 1 / (1 + np.exp(-xv.astype("float64"))) + erf * np.tanh(xv.astype("float64"))
    np.testing.assert_allclose(got[1], ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[2], xv > 0.25)
    np.testing.assert_array_equal(got[3], (xv * np.float32(10)).astype("int32"))


def test_reductions_become_kernels_with_workspace() -> None:
    """softmax: max and sum are reductions at the root, each its own kernel; the intermediates
    are workspace buffers."""
    x = te.placeholder((5, 33), name="x")
    k = te.reduce_axis((0, 33), "k")
    mx = te.compute((5,), lambda i: te.max(x[i, k], axis=k), name="mx")
    k2 = te.reduce_axis((0, 33), "k2")
    ex = te.compute((5, 33), lambda i, j: te.exp(x[i, j] - mx[i]), name="ex")
    sm = te.compute((5,), lambda i: te.sum(ex[i, k2], axis=k2), name="sm")
    out = te.compute((5, 33), lambda i, j: ex[i, j] / sm[i], name="out")
    s = schedule_auto([out], GPUScheduleConfig(threads=32))
    program = split_kernels(lower(s, [x, out], name="softmax"))
    assert [b.name for b in program.workspace] == ["mx", "sm"]
    assert len(program.kernels) == 3
    f = build_gpu(s, [x, out], "opencl", name="softmax")
    xv = RNG.standard_normal((5, 33), "float32")
    got = np.zeros((5, 33), "float32")
    f(xv, got)
    e = np.exp(xv - xv.max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_a_stage_read_many_times_keeps_its_kernel_instead_of_multiplying_the_tree() -> None:
    """Each level of `h` reads the level below 3 times: inlined, level 8 would be a tree of
    3**8 copies of the first (GridSample's reflection rule took minutes to compile that way).
    The cheap level is inlined, the expensive ones become kernels of their own; numbers equal
    numpy's."""
    x = te.placeholder((64,), name="x")
    levels = [te.compute((64,), lambda i: x[i] * 0.5 + 0.25, name="h0")]

    def level(h, n):
        return te.compute(
            (64,), lambda i: te.select(h[i] > 0.0, h[i] - 1.0, h[i] + 1.0), name=f"h{n}"
        )

    for n in range(1, 8):
        levels.append(level(levels[-1], n))
    out = levels[-1]
    s = schedule_auto([out], GPUScheduleConfig(threads=32))
    program = split_kernels(lower(s, [x, out], name="levels"))
    assert 1 < len(program.kernels) < 8
    f = build_gpu(s, [x, out], "opencl", name="levels")
    xv = RNG.standard_normal(64).astype("float32")
    want = xv * np.float32(0.5) + np.float32(0.25)
    for _ in range(7):
        want = np.where(want > 0, want - np.float32(1), want + np.float32(1))
    got = np.zeros(64, "float32")
    f(xv, got)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_too_many_threads_is_rejected_at_compile_time() -> None:
    x = te.placeholder((4096,), name="x")
    y = te.compute((4096,), lambda i: x[i] + 1.0, name="y")
    s = schedule_auto([y], GPUScheduleConfig(threads=512))
    with pytest.raises(GPULimitError, match=r"'big_k0' needs 512 threads .* than the 256 target"):
        build_gpu(s, [x, y], "opencl", name="big")
    f = build_gpu(s, [x, y], "opencl -max_threads=1024", name="big")  # the device allows 4096
    xv, yv = RNG.standard_normal(4096, "float32"), np.zeros(4096, "float32")
    f(xv, yv)
    np.testing.assert_array_equal(yv, xv + np.float32(1))


def test_too_much_shared_memory_for_the_device_is_a_clear_error() -> None:
    dev = open_device("opencl")
    n = 64
    A, B = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    C = matmul(A, B)
    s = schedule_matmul(te.create_schedule(C.op), C, tile=8, k_tile=n)
    limit = dev.info.max_shared
    from tensorforge.compiler.codegen.gpu import gpu_payload
    from tensorforge.compiler.target import Target
    from tensorforge.runtime.device.gpu.base import check_program

    payload = gpu_payload(split_kernels(lower(s, [A, B, C], name="mm")), Target.parse("opencl"))
    payload["kernels"][0]["shared_bytes"] = limit + 4  # as a bigger tile would need
    with pytest.raises(GPUError, match=f"more than the {limit} device"):
        check_program(payload, dev.info, "opencl")


def test_missing_platform_names_what_exists() -> None:
    with pytest.raises(GPUError, match="no OpenCL platform matches 'no-such-vendor'; found"):
        open_device("opencl", platform="no-such-vendor")


def test_parallel_loops_are_rejected_with_the_loop_named() -> None:
    x = te.placeholder((64,), name="x")
    y = te.compute((64,), lambda i: x[i] * 3.0, name="y")
    s = te.create_schedule(y.op)
    s[y].parallel(y.op.axis[0])
    with pytest.raises(Exception, match="is parallel; on a GPU bind it"):
        build_gpu(s, [x, y], "opencl")


def test_fp16_runs_on_opencl_without_the_fp16_extension() -> None:
    """float16 buffers through vload_half/vstore_half, arithmetic in float rounded to half after
    each operation (numpy's float16 semantics), whether or not the device has cl_khr_fp16."""
    x = te.placeholder((300,), "float16", name="x")
    y = te.placeholder((300,), "float16", name="y")
    out = te.compute((300,), lambda i: te.max(x[i] * y[i] + 1.0, x[i] / y[i]) - 0.1, name="o")
    f = _auto([out], [x, y, out], threads=128, name="half")
    assert "vload_half" in f.source and "cl_khr_fp16" not in f.source
    xv = RNG.standard_normal(300).astype("float16")
    yv = (RNG.uniform(0.5, 2, 300) * RNG.choice([-1, 1], 300)).astype("float16")
    got = np.zeros(300, "float16")
    f(xv, yv, got)
    want = np.maximum(xv * yv + np.float16(1.0), xv / yv) - np.float16(0.1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("n", "config"),
    [(10, DenseGPUConfig(16, 8, 1, 32)), (12, DenseGPUConfig(4, 8, 1, 32)),
     (10, DenseGPUConfig(8, 8, 2, 16)), (37, DenseGPUConfig(2, 16, 2, 8))],
)  # fmt: skip
def test_ragged_dense_tiles_write_every_output(n, config) -> None:
    """Blocks at the right edge hold threads past the last column: their guards must not lose
    the other threads' results (PoCL did, until a barrier after each barrier loop)."""
    m, k = 32, 64
    A, W = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="W")
    acc, out = dense(A, W)
    s = schedule_dense(te.create_schedule(out.op), out, None, config)
    f = build_gpu(s, [A, W, out], "opencl", name="ragged")
    a, w = RNG.standard_normal((m, k), "float32"), RNG.standard_normal((k, n), "float32")
    got = np.full((m, n), np.nan, "float32")
    f(a, w, got)
    np.testing.assert_allclose(got, a @ w, rtol=1e-5, atol=1e-4)


def test_a_local_stage_at_the_root_that_several_kernels_use_names_itself() -> None:
    """cache_write(T, "local") without compute_at leaves T.local at the root: written by one
    kernel and read by the next, which a kernel's local memory cannot outlive (before: the
    error blamed the global copy T, "computed inside a GPU kernel in global memory")."""
    A = te.placeholder((4,), name="A")
    T = te.compute((4,), lambda i: A[i] + 1.0, name="T")
    B = te.compute((4,), lambda i: T[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s.cache_write(T, "local")
    with pytest.raises(LoweringError, match=r"^stage 'T.local' has scope 'local' but is comp"):
        split_kernels(lower(s, [A, B], name="f"))

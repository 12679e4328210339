"""The LLVM back-end's machine code: vector instructions, parallel loops, cross-compiled objects,
allocations and the calling convention."""

from __future__ import annotations

import os
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

from tensorforge.compiler import te, tir
from tensorforge.compiler.build import build, build_object
from tensorforge.compiler.codegen.llvm_jit import elf_machine, emit_assembly
from tensorforge.compiler.target import Target
from tensorforge.runtime import ndarray as nd
from tensorforge.runtime.device import cpu


def _host_has(feature: str) -> bool:
    llvm.initialize_native_target()
    return llvm.get_host_cpu_features().get(feature, False)


def _axpy(n: int, lanes: int | None, parallel: bool = False):
    X = te.placeholder((n,), name="X")
    Y = te.placeholder((n,), name="Y")
    Z = te.compute((n,), lambda i: X[i] * 3.0 + Y[i], name="Z")
    s = te.create_schedule(Z.op)
    if lanes:
        outer, inner = s[Z].split(Z.op.axis[0], factor=lanes)
        s[Z].vectorize(inner)
        if parallel:
            s[Z].parallel(outer)
    return s, [X, Y, Z]


def _matmul_sched(n: int, parallel_axis: str | None):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), "k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 16)
    s[C].reorder(io, jo, k, ii, ji)
    s[C].unroll(ii)
    s[C].vectorize(ji)
    if parallel_axis == "outer":
        s[C].parallel(io)
    elif parallel_axis == "inner":  # a parallel loop inside a serial one: outlined per io
        s[C].parallel(jo)
    return s, [A, B, C]


# ---- vector code ---------------------------------------------------------------------------


@pytest.mark.skipif(not _host_has("avx512f"), reason="host CPU has no AVX-512")
def test_vectorized_loop_emits_512_bit_registers_on_avx512() -> None:
    s, args = _axpy(64, 16)
    asm = build(s, args, name="axpy").assembly()
    assert "zmm" in asm
    assert "vfmadd" in asm  # X*3 + Y contracted into one FMA ("contract" flag)


@pytest.mark.skipif(not _host_has("fma"), reason="host CPU has no FMA")
def test_matmul_micro_kernel_uses_vector_fma() -> None:
    s, args = _matmul_sched(32, None)
    asm = build(s, args, name="mm").assembly()
    fma = [line for line in asm.splitlines() if "vfmadd" in line]
    assert fma and all("mm" in line for line in fma)  # vector (xmm/ymm/zmm) operands


def test_vectorized_code_computes_the_same_as_serial() -> None:
    x, y = np.random.default_rng(0).random((2, 61)).astype("float32")
    outs = []
    for lanes in (None, 8, 16):
        s, args = _axpy(61, lanes)
        z = np.zeros(61, "float32")
        build(s, args, name="axpy")(x, y, z)
        outs.append(z)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    np.testing.assert_allclose(outs[0], x * 3 + y, rtol=1e-6)


@pytest.mark.parametrize("lanes", [48, 17, 7])
def test_vectorized_loops_of_other_widths_run_as_power_of_two_vectors(lanes: int) -> None:
    """48 lanes run as 32 + 16, 17 as 16 + 1 (scalar), 7 as 4 + 2 + 1: no LLVM vector of
    another width (which LLVM legalizes element by element)."""
    n = 3 * lanes + 5  # full vectors and a ragged tail
    x, y = np.random.default_rng(lanes).random((2, n)).astype("float32")
    s, args = _axpy(n, lanes)
    f = build(s, args, name="axpy")
    z = np.zeros(n, "float32")
    f(x, y, z)
    np.testing.assert_allclose(z, x * 3 + y, rtol=1e-6)
    widths = {int(w) for w in re.findall(r"<(\d+) x float>", f.llvm_ir)}
    assert widths and all(w & (w - 1) == 0 for w in widths), widths


def test_fast_math_flag_reaches_the_ir() -> None:
    s, args = _axpy(16, 8)
    assert "fmul fast" in build(s, args, name="f", fast_math=True).llvm_ir
    strict = build(s, args, name="g").llvm_ir
    assert "fmul contract" in strict and "fast" not in strict


# ---- parallel loops ------------------------------------------------------------------------


@pytest.fixture
def two_threads():
    before = cpu.num_threads()
    cpu.set_num_threads(2)
    yield
    cpu.set_num_threads(before)


@pytest.mark.parametrize("where", ["outer", "inner"])
@pytest.mark.parametrize("n", [5, 37, 64])
def test_parallel_loops_give_the_same_results_as_serial(two_threads, where: str, n: int) -> None:
    rng = np.random.default_rng(n)
    a, b = rng.uniform(-1, 1, (2, n, n)).astype("float32")
    results = []
    for axis in (None, where):
        s, args = _matmul_sched(n, axis)
        c = np.zeros((n, n), "float32")
        build(s, args, name="mm")(a, b, c)
        results.append(c)
    np.testing.assert_array_equal(results[0], results[1])  # same arithmetic, other threads
    np.testing.assert_allclose(results[1], a @ b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 3, 5])
def test_more_threads_than_iterations_and_uneven_chunks(threads: int) -> None:
    before = cpu.num_threads()
    cpu.set_num_threads(threads)
    try:
        s, args = _matmul_sched(11, "outer")  # 3 row blocks (4 + 4 + 3) over `threads` tasks
        a, b = np.random.default_rng(threads).uniform(-1, 1, (2, 11, 11)).astype("float32")
        c = np.zeros((11, 11), "float32")
        build(s, args, name="mm")(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-5)
    finally:
        cpu.set_num_threads(before)


def test_parallel_loop_with_per_thread_local_buffer(two_threads) -> None:
    A = te.placeholder((23, 19), name="A")
    k = te.reduce_axis((0, 19), "k")
    S = te.compute((23,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="S")
    s = te.create_schedule(S.op)
    local = s.cache_write(S, "local")
    o, i = s[S].split(S.op.axis[0], factor=4)
    s[local].compute_at(s[S], o)
    s[S].parallel(o)
    f = build(s, [A, S], name="sumsq")
    assert "allocate S.local" in f.func.script()
    a, out = np.random.default_rng(2).random((23, 19)).astype("float32"), np.zeros(23, "float32")
    f(a, out)
    np.testing.assert_allclose(out, (a * a).sum(axis=1), rtol=1e-5)


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_thread_pool_is_persistent_across_calls(two_threads) -> None:
    s, args = _axpy(1024, 16, parallel=True)
    f = build(s, args, name="axpy_par")
    x, y, z = np.ones(1024, "float32"), np.ones(1024, "float32"), np.zeros(1024, "float32")
    f(x, y, z)
    threads = _os_threads()
    for _ in range(50):
        f(x, y, z)
    assert _os_threads() == threads  # no thread is created per call
    assert (z == 4.0).all()
    cpu.set_num_threads(3)
    assert _os_threads() == threads + 1  # the pool itself is native threads


def test_kernels_called_from_several_python_threads_at_once(two_threads) -> None:
    # One caller gets the pool; the others find it busy and run their tasks serially.
    from concurrent.futures import ThreadPoolExecutor

    s, args = _matmul_sched(48, "outer")
    f = build(s, args, name="mm_threads")
    rng = np.random.default_rng(9)
    inputs = [rng.uniform(-1, 1, (2, 48, 48)).astype("float32") for _ in range(8)]

    def run(ab: np.ndarray) -> np.ndarray:
        c = np.zeros((48, 48), "float32")
        for _ in range(20):
            f(ab[0], ab[1], c)
        return c

    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(run, inputs))
    for ab, c in zip(inputs, results, strict=True):
        np.testing.assert_allclose(c, ab[0] @ ab[1], rtol=1e-4, atol=1e-5)


def test_set_num_threads_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match=r"num_threads must be an int in \[1, 256\], not 0"):
        cpu.set_num_threads(0)


def test_nested_parallel_loops_run_inner_serially(two_threads) -> None:
    A = te.placeholder((9, 11), name="A")
    B = te.compute((9, 11), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    s[B].parallel(B.op.axis[1])
    a, b = np.random.default_rng(4).random((9, 11)).astype("float32"), np.zeros((9, 11), "f4")
    build(s, [A, B], name="nested")(a, b)
    np.testing.assert_array_equal(b, a + 1.0)


# ---- allocations ---------------------------------------------------------------------------


def _reverse_through_intermediate(n: int):
    A = te.placeholder((n,), name="A")
    T = te.compute((n,), lambda i: A[i] * 2.0, name="T")
    B = te.compute((n,), lambda i: T[n - 1 - i] + 1.0, name="B")
    return build(te.create_schedule(B.op), [A, B], name="rev")


@pytest.mark.parametrize(("n", "on_heap"), [(40000, True), (100, False)])  # 160 kB vs 400 B
def test_large_intermediates_go_to_the_heap_small_ones_to_the_stack(n: int, on_heap: bool):
    f = _reverse_through_intermediate(n)
    assert ('call ptr @"aligned_alloc"' in f.llvm_ir) is on_heap
    assert ("alloca float, i32 " in f.llvm_ir) is not on_heap
    a, b = np.arange(n, dtype="float32"), np.zeros(n, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, a[::-1] * 2 + 1)


def test_local_buffers_are_64_byte_aligned_allocas() -> None:
    s, args = _matmul_sched(8, None)
    C = args[2]
    s2 = te.create_schedule(C.op)
    s2.cache_write(C, "local")
    f = build(s2, args, name="mm_local")
    assert "alloca float, i32 64, align 64" in f.llvm_ir


# ---- cross compilation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "elf_class", "machine"),
    [
        ("llvm -mtriple=armv7a-linux-gnueabihf -mcpu=cortex-a9 -mattr=+neon", 1, 40),
        ("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a53", 2, 183),
        ("llvm -mtriple=x86_64-linux-gnu", 2, 62),
    ],
)
def test_object_files_have_the_target_elf_machine(target: str, elf_class: int, machine: int):
    s, args = _matmul_sched(16, "outer")
    obj = build_object(s, args, target=target, name="mm")
    assert elf_machine(obj) == (elf_class, machine)
    assert b"mm" in obj and b"tf_parallel_for" in obj  # the symbol and the pool import


def test_aarch64_assembly_uses_neon_fma() -> None:
    from tensorforge.compiler.codegen.llvm import generate

    s, args = _matmul_sched(16, None)
    asm = emit_assembly(
        generate([tir.lower(s, args, name="mm")]), "llvm -mtriple=aarch64-linux-gnu"
    )
    assert "fmla\tv" in asm


def test_build_refuses_a_foreign_triple() -> None:
    s, args = _axpy(8, None)
    with pytest.raises(ValueError, match="build target must run on this machine"):
        build(s, args, target="llvm -mtriple=aarch64-linux-gnu")


# ---- calling convention --------------------------------------------------------------------


@pytest.fixture(scope="module")
def axpy():
    s, args = _axpy(8, None)
    return build(s, args, name="axpy")


def test_ndarrays_are_passed_without_copies(axpy) -> None:
    x, y, z = nd.array(np.arange(8, dtype="float32")), nd.empty((8,)), nd.empty((8,))
    y.numpy()[:] = 1.0
    view = z.numpy()
    axpy(x, y, z)
    np.testing.assert_array_equal(view, np.arange(8) * 3.0 + 1.0)  # written in place


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (
            np.zeros(9, "float32"),
            ValueError,
            r"axpy: argument 2 \(Z\) must be float32\[8\], not float32\[9\]",
        ),
        (
            np.zeros(8, "float64"),
            ValueError,
            r"argument 2 \(Z\) must be float32\[8\], not float64\[8\]",
        ),
        (np.zeros(16, "float32")[::2], ValueError, r"argument 2 \(Z\) must be C-contiguous"),
        ([0.0] * 8, TypeError, r"argument 2 \(Z\) must be an NDArray or numpy array, not list"),
    ],
)
def test_wrong_arguments_are_rejected_with_a_clear_message(axpy, bad, error, message) -> None:
    x = np.zeros(8, "float32")
    with pytest.raises(error, match=message):
        axpy(x, x.copy(), bad)


def test_wrong_argument_count_names_the_parameters(axpy) -> None:
    with pytest.raises(TypeError, match=r"axpy must be called with 3 arrays \(X, Y, Z\), not 2"):
        axpy(np.zeros(8, "float32"), np.zeros(8, "float32"))


# ---- targets -------------------------------------------------------------------------------


def test_target_strings_parse_generically() -> None:
    t = Target.parse("llvm -mtriple=armv7a-linux-gnueabihf -mcpu=cortex-a9")
    assert (t.kind, t.triple, t.mcpu, t.is_host) == (
        "llvm",
        "armv7a-linux-gnueabihf",
        "cortex-a9",
        False,
    )
    v = Target.parse("vta -config=pynq -device=sim")
    assert v.get("config") == "pynq" and v.get("device") == "sim"
    assert str(v) == "vta -config=pynq -device=sim"
    assert Target.parse("llvm -mcpu=native").is_host


def test_unknown_target_kind_is_named() -> None:
    with pytest.raises(ValueError, match="target kind must be one of .*, not 'tpu'"):
        Target.parse("tpu -x=1")


def test_vectorized_loop_with_a_cross_lane_dependence_stays_serial() -> None:
    # B[j + 4] = B[j] * 2 within one loop: lanes would read values other lanes write, so the
    # loop must keep its serial order (a recurrence); the result equals the interpreter's.
    n = 32
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i], name="B")
    s = te.create_schedule(B.op)
    func = tir.lower(s, [A, B], name="rec")
    j = te.var("j")
    buf = func.params[1]
    body = tir.BufferStore(buf, tir.BufferLoad(buf, (j,), "float32") * 2.0, (j + 4,))
    loop = tir.For(j, te.const(0), te.const(n - 4), tir.ForKind.VECTORIZED, body)
    func = func.with_body(tir.seq(func.body, loop))
    a = np.arange(n, dtype="float32")
    native, interp = np.zeros(n, "float32"), np.zeros(n, "float32")
    tir.interpret(func, [a, interp])
    build(func)(a, native)
    np.testing.assert_array_equal(native, interp)
    assert interp[8] == 4 * a[0]  # the recurrence really chains through earlier lanes


def test_targets_are_values() -> None:
    a, b = Target.parse("llvm -mcpu=native"), Target.parse("llvm  -mcpu=native")
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    with pytest.raises(ValueError, match="target option must look like -key=value, not 'mcpu'"):
        Target.parse("llvm mcpu")

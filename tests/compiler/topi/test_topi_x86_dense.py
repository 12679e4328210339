"""x86 dense/matmul (packed weights, register tiles, parallel panels) vs numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler import te
from tensorforge.compiler.build import build
from tensorforge.compiler.schedule.primitives import ScheduleError
from tensorforge.compiler.topi.x86 import DenseConfig, dense, schedule_dense
from tensorforge.compiler.topi.x86.dense import default_config, dense_prepacked, pack_panels

SHAPES = [(1, 1, 1), (1, 37, 13), (13, 37, 29), (7, 64, 16), (31, 33, 65), (64, 96, 48)]
CONFIGS = [
    DenseConfig(),
    DenseConfig(mr=4, bn=16, kunroll=4),
    DenseConfig(mr=3, bn=8, parallel=False),
    DenseConfig(mr=4, bn=16, mc=8),
]


def _rand(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype.startswith("float"):
        return rng.uniform(-1, 1, shape).astype(dtype)
    return rng.integers(-128, 128, shape).astype(dtype)


def _run(m: int, n: int, k: int, dtype: str, layout: str, config: DenseConfig, **kw):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    A = te.placeholder((m, k), dtype, name="A")
    W = te.placeholder((n, k) if layout == "NK" else (k, n), dtype, name="W")
    op = dense(A, W, config=config, weight_layout=layout, **kw)
    f = build(schedule_dense(op, config), op.args, name="dense")
    arrays = [_rand(t.shape, t.dtype, rng) for t in op.args[:-1]]
    out = np.zeros(op.out.shape, op.out.dtype)
    f(*arrays, out)
    return arrays, out


@pytest.mark.parametrize(
    "config", CONFIGS, ids=["default", "mr4-bn16-ku4", "serial-bn8", "row-blocks-mc8"]
)
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_float32_dense_matches_numpy(m: int, n: int, k: int, config: DenseConfig) -> None:
    (a, w), out = _run(m, n, k, "float32", "NK", config)
    np.testing.assert_allclose(out, a @ w.T, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_float32_matmul_layout_matches_numpy(m: int, n: int, k: int) -> None:
    (a, b), out = _run(m, n, k, "float32", "KN", DenseConfig(mr=5, bn=16))
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-5)


def test_float64_dense_matches_numpy() -> None:
    (a, w), out = _run(11, 19, 23, "float64", "NK", DenseConfig(mr=4, bn=8))
    np.testing.assert_allclose(out, a @ w.T, rtol=1e-12)


@pytest.mark.parametrize("config", CONFIGS[:2], ids=["default", "mr4-bn16-ku4"])
@pytest.mark.parametrize(("m", "n", "k"), [(1, 1, 1), (13, 37, 29), (31, 33, 65)])
def test_int8_dense_accumulates_in_int32_bit_exactly(m, n, k, config) -> None:
    (a, w), out = _run(m, n, k, "int8", "NK", config)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a.astype(np.int32) @ w.astype(np.int32).T)


def test_bias_and_relu_are_fused_into_the_tile_store() -> None:
    relu = lambda v, i, j: te.max(v, te.const(0.0, v.dtype))  # noqa: E731
    A = te.placeholder((17, 23), name="A")
    W = te.placeholder((41, 23), name="W")
    bias = te.placeholder((41,), name="bias")
    op = dense(A, W, bias=bias, epilogue=relu)
    f = build(schedule_dense(op), op.args, name="dense_bias_relu")
    rng = np.random.default_rng(3)
    a, w, b = (rng.uniform(-1, 1, t.shape).astype("float32") for t in op.args[:-1])
    out = np.zeros((17, 41), "float32")
    f(a, w, b, out)
    np.testing.assert_allclose(out, np.maximum(a @ w.T + b, 0), rtol=1e-4, atol=1e-5)
    # fused: the accumulator is one mr x bn local tile, never a full [17, 41] intermediate
    config = DenseConfig()
    assert f"allocate acc: float32[{config.mr * config.bn}] in local" in f.func.script()


def test_int8_requantize_epilogue_is_bit_exact() -> None:
    def requant(v, i, j):
        shifted = (v + 64) // 128  # floor division by a power of two: an arithmetic shift
        return te.max(te.min(shifted, 127), -128).astype("int8")

    A = te.placeholder((9, 40), "int8", name="A")
    W = te.placeholder((21, 40), "int8", name="W")
    op = dense(A, W, epilogue=requant)
    f = build(schedule_dense(op), op.args, name="qdense")
    rng = np.random.default_rng(5)
    a, w = (rng.integers(-128, 128, t.shape).astype("int8") for t in op.args[:-1])
    out = np.zeros((9, 21), "int8")
    f(a, w, out)
    acc = a.astype(np.int64) @ w.astype(np.int64).T
    np.testing.assert_array_equal(out, np.clip((acc + 64) // 128, -128, 127).astype(np.int8))


def test_bad_knob_names_the_knob() -> None:
    with pytest.raises(ScheduleError, match="knob bn must be a positive int, not 0"):
        DenseConfig(bn=0).check()
    with pytest.raises(ScheduleError, match="knob mc must be 0 or a positive multiple of mr=6"):
        DenseConfig(mc=10).check()


def test_mismatched_reduction_extent_is_rejected() -> None:
    A = te.placeholder((4, 5), name="A")
    W = te.placeholder((3, 6), name="W")
    with pytest.raises(ValueError, match="reduction extent must equal data's \\(5\\), not 6"):
        dense(A, W)


@pytest.mark.parametrize(("m", "n", "k"), [(49, 40, 24), (1, 37, 13), (13, 64, 29)])
def test_prepacked_dense_with_a_transposed_output_matches_numpy(m: int, n: int, k: int) -> None:
    """`dense_prepacked(..., transposed=True)` stores `[N, M]`, the epilogue seeing (i, j)."""
    rng = np.random.default_rng(m + n + k)
    a, w = rng.uniform(-1, 1, (m, k)).astype("f4"), rng.uniform(-1, 1, (n, k)).astype("f4")
    config = default_config(m)
    panels = pack_panels(w, config.bn)
    A = te.placeholder((m, k), name="A")
    P = te.placeholder(panels.shape, name="P")
    op = dense_prepacked(A, P, n, lambda v, i, j: te.max(v - j.astype("float32"), 0.0), True)
    s = schedule_dense(op, config)
    s[op.packed].compute_inline()
    out = np.zeros((n, m), "f4")
    build(s, op.args, name="dense_t")(a, panels, out)
    want = np.maximum(a @ w.T - np.arange(n, dtype="f4"), 0).T
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("registers", [(8, 16), (16, 32), (4, 16)], ids=["avx2", "avx512", "sse"])
@pytest.mark.parametrize("m", [1, 2, 3, 49, 64, 196, 1000])
def test_the_default_register_tile_fits_the_vector_registers(m, registers) -> None:
    """Accumulators, weight vectors and the broadcast value fit in the registers (a 6 x 32
    tile on AVX2's 16 ymm spilled), the rows divide m where a fitting row count does, and
    AVX-512 keeps the 32-column panels."""
    lanes, count = registers
    config = default_config(m, registers)
    vecs = -(-config.bn // lanes)
    assert config.mr * vecs + vecs + 1 <= count
    assert 1 <= config.mr <= m
    v16 = -(-16 // lanes)  # weight vectors of a 16-column panel
    if any(m % r == 0 and r * v16 + v16 + 1 <= count for r in (4, 5, 6, 7, 8)):
        assert m % config.mr == 0
    if registers == (16, 32):
        assert config.bn == 32


@pytest.mark.parametrize("registers", [(8, 16), (16, 32)], ids=["avx2", "avx512"])
def test_dense_with_each_hosts_default_tile_matches_numpy(registers) -> None:
    m, n, k = 49, 40, 24
    rng = np.random.default_rng(7)
    a, w = rng.uniform(-1, 1, (m, k)).astype("f4"), rng.uniform(-1, 1, (n, k)).astype("f4")
    config = default_config(m, registers)
    A, W = te.placeholder((m, k), name="A"), te.placeholder((n, k), name="W")
    op = dense(A, W, config=config)
    s = schedule_dense(op, config)
    out = np.zeros((m, n), "f4")
    build(s, op.args, name="dense_d")(a, w, out)
    np.testing.assert_allclose(out, a @ w.T, rtol=1e-4, atol=1e-5)

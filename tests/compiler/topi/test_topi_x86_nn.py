"""x86 pooling, softmax, layer norm, depthwise conv2d and fused element-wise ops vs numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler import te
from tensorforge.compiler.build import build
from tensorforge.compiler.topi.x86 import (
    LANES_MIN_ROW,
    RowConfig,
    broadcast_op,
    depthwise_conv2d,
    layer_norm,
    pool2d,
    schedule_depthwise_conv2d,
    schedule_elementwise,
    schedule_layer_norm,
    schedule_pool2d,
    schedule_softmax,
    softmax,
)
from tensorforge.compiler.topi.x86.nn import _stages


def pool_ref(a: np.ndarray, kind: str, size: int, stride: int, pad: int) -> np.ndarray:
    fill = -np.inf if kind == "max" else 0.0
    x = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    oh, ow = (x.shape[2] - size) // stride + 1, (x.shape[3] - size) // stride + 1
    out = np.empty(a.shape[:2] + (oh, ow), a.dtype)
    for y in range(oh):
        for z in range(ow):
            win = x[:, :, y * stride : y * stride + size, z * stride : z * stride + size]
            out[:, :, y, z] = win.max(axis=(2, 3)) if kind == "max" else win.mean(axis=(2, 3))
    return out


POOL_CASES = [
    (1, 1, 1, 1, 1, 1, 0),
    (2, 3, 9, 9, 3, 2, 1),
    (1, 5, 13, 7, 2, 2, 0),
    (1, 4, 11, 11, 3, 1, 1),
]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", POOL_CASES, ids=[str(c) for c in POOL_CASES])
def test_pool2d_matches_numpy(case, kind: str) -> None:
    n, c, h, w, size, stride, pad = case
    A = te.placeholder((n, c, h, w), name="A")
    args, out = pool2d(A, kind, size, stride, pad)
    f = build(schedule_pool2d(out), args, name="pool")
    a = np.random.default_rng(sum(case)).uniform(-1, 1, (n, c, h, w)).astype("float32")
    result = np.zeros(out.shape, "float32")
    f(a, result)
    np.testing.assert_allclose(result, pool_ref(a, kind, size, stride, pad), rtol=1e-6, atol=1e-6)


def test_int8_max_pool_is_bit_exact() -> None:
    A = te.placeholder((1, 3, 7, 7), "int8", name="A")
    args, out = pool2d(A, "max", 3, 2, 1)
    f = build(schedule_pool2d(out), args, name="qpool")
    a = np.random.default_rng(0).integers(-128, 128, (1, 3, 7, 7)).astype("int8")
    result = np.zeros(out.shape, "int8")
    f(a, result)
    np.testing.assert_array_equal(
        result, pool_ref(a.astype("float32"), "max", 3, 2, 1).astype("int8")
    )


@pytest.mark.parametrize(
    "config", [RowConfig(), RowConfig(lanes=4, parallel=False)], ids=["16", "4"]
)
@pytest.mark.parametrize(("n", "m"), [(1, 1), (5, 37), (3, 64), (6, 256), (17, 1000)])
def test_softmax_matches_numpy(n: int, m: int, config: RowConfig) -> None:
    X = te.placeholder((n, m), name="X")
    args, out = softmax(X)
    # rows longer than 16 reduce in 16 partial maxima and sums (lanes), then the ragged tail,
    # not in one scalar chain (an attention softmax over 128 keys ran 3x onnxruntime's time)
    names = {t.op.name for t in _stages(out)}
    assert ({"max_part", "sum_part"} <= names) == (m > LANES_MIN_ROW)
    f = build(schedule_softmax(out, config), args, name="softmax")
    x = np.random.default_rng(n + m).normal(0, 4, (n, m)).astype("float32")
    y = np.zeros_like(x)
    f(x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


BROADCASTS = [((7, 37), (37,)), ((2, 3, 5), (3, 1)), ((1,), (4, 1)), ((13, 1), (1, 29))]


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8"])
@pytest.mark.parametrize(("sa", "sb"), BROADCASTS, ids=[f"{a}x{b}" for a, b in BROADCASTS])
def test_broadcast_add_relu_matches_numpy(sa, sb, dtype: str) -> None:
    A, B = te.placeholder(sa, dtype, name="A"), te.placeholder(sb, dtype, name="B")
    zero = te.const(0, dtype)
    args, out = broadcast_op(lambda a, b: te.max(a + b, zero), A, B, "add_relu")
    f = build(schedule_elementwise(out), args, name="add_relu")
    rng = np.random.default_rng(1)
    a = rng.integers(-50, 50, sa).astype(dtype)
    b = rng.integers(-50, 50, sb).astype(dtype)
    y = np.zeros(out.shape, dtype)
    f(a, b, y)
    np.testing.assert_array_equal(y, np.maximum(a + b, 0).astype(dtype))


def test_elementwise_producers_are_fused_into_the_output() -> None:
    A = te.placeholder((6, 40), name="A")
    B = te.placeholder((40,), name="B")
    _, mid = broadcast_op(lambda a, b: a * b, A, B, "mul")
    C = te.compute(mid.shape, lambda i, j: te.exp(mid[i, j]), name="exp")
    f = build(schedule_elementwise(C), [A, B, C], name="fused")
    assert "allocate" not in f.func.script()  # the product never reaches memory
    a, b = np.random.default_rng(2).random((2, 6, 40)).astype("float32")
    y = np.zeros((6, 40), "float32")
    f(a, b[0], y)
    np.testing.assert_allclose(y, np.exp(a * b[0]), rtol=1e-6)


def test_broadcast_shape_mismatch_is_named() -> None:
    A, B = te.placeholder((3, 4), name="A"), te.placeholder((5,), name="B")
    with pytest.raises(ValueError, match="must broadcast, extents 4 and 5 differ"):
        broadcast_op(lambda a, b: a + b, A, B, "add")


DW_CASES = [
    (1, 1, 1, 1, 1, 1, 0),
    (1, 5, 9, 9, 3, 2, 1),
    (2, 3, 13, 7, 3, 1, 1),
    (1, 4, 11, 11, 5, 1, 2),
]


@pytest.mark.parametrize("case", DW_CASES, ids=[str(c) for c in DW_CASES])
def test_depthwise_conv2d_matches_numpy(case) -> None:
    n, c, h, w, r, stride, pad = case
    A = te.placeholder((n, c, h, w), name="A")
    W = te.placeholder((c, 1, r, r), name="W")
    args, out = depthwise_conv2d(A, W, stride, pad)
    f = build(schedule_depthwise_conv2d(out), args, name="dw")
    rng = np.random.default_rng(sum(case))
    a = rng.uniform(-1, 1, A.shape).astype("float32")
    wt = rng.uniform(-1, 1, W.shape).astype("float32")
    y = np.zeros(out.shape, "float32")
    f(a, wt, y)
    x = np.pad(a.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = out.shape[2:]
    expected = np.zeros(out.shape)
    for ry in range(r):
        for rx in range(r):
            patch = x[
                :,
                :,
                ry : ry + stride * (oh - 1) + 1 : stride,
                rx : rx + stride * (ow - 1) + 1 : stride,
            ]
            expected += patch * wt[None, :, 0, ry, rx, None, None]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("n", "m"), [(1, 1), (3, 8), (7, 37), (2, 768)])
def test_layer_norm_matches_numpy(n: int, m: int) -> None:
    X = te.placeholder((n, m), name="X")
    G, B = te.placeholder((m,), name="gamma"), te.placeholder((m,), name="beta")
    args, out = layer_norm(X, G, B)
    f = build(schedule_layer_norm(out), args, name="ln")
    rng = np.random.default_rng(m)
    x = rng.normal(1, 3, (n, m)).astype("float32")
    g, b = rng.uniform(-1, 1, (2, m)).astype("float32")
    y = np.zeros_like(x)
    f(x, g, b, y)
    mu = x.mean(axis=1, keepdims=True)
    ref = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_depthwise_kernel_shape_is_checked() -> None:
    A, W = te.placeholder((1, 4, 5, 5), name="A"), te.placeholder((4, 2, 3, 3), name="W")
    with pytest.raises(ValueError, match=r"kernel must be \[4, 1, R, S\], not \[4, 2, 3, 3\]"):
        depthwise_conv2d(A, W)

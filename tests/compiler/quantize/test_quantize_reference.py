"""The int8 reference operators against onnxruntime (integer-valued float32, exact below 2**24)
and against float arithmetic for the fused bias/requant/ReLU/clip epilogue."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from tensorforge.compiler.quantize import (
    conv2d_int8,
    dense_int8,
    max_pool2d_int8,
    requant_params,
)
from tensorforge.hw.config import HWConfig

PYNQ = HWConfig.preset("pynq")


def _run_onnx(op: str, inputs: dict[str, np.ndarray], out_shape_rank: int, **attrs) -> np.ndarray:
    """One ONNX node run by onnxruntime on float32 inputs."""
    node = helper.make_node(op, list(inputs), ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * out_shape_rank)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {k: v.astype(np.float32) for k, v in inputs.items()})[0]


def _int8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-127, 128, shape, dtype=np.int8)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 2),
    c=st.integers(1, 20),
    o=st.integers(1, 20),
    hw=st.tuples(st.integers(3, 9), st.integers(3, 9)),
    k=st.sampled_from([1, 3]),
    stride=st.integers(1, 2),
    pad=st.integers(0, 2),
    seed=st.integers(0, 2**16),
)
def test_conv2d_accumulators_equal_onnxruntime(
    n: int, c: int, o: int, hw: tuple[int, int], k: int, stride: int, pad: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    x, w = _int8(rng, (n, c, *hw)), _int8(rng, (o, c, k, k))
    bias = rng.integers(-5000, 5000, o).astype(np.int32)
    got = conv2d_int8(x, w, bias, stride=stride, padding=pad)
    want = _run_onnx("Conv", {"x": x, "w": w, "b": bias}, 4, strides=[stride] * 2, pads=[pad] * 4)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want.astype(np.int64))


@pytest.mark.parametrize("mode", ["shift", "mul"])
def test_conv2d_fused_epilogue_equals_float_rounding(mode: str) -> None:
    rng = np.random.default_rng(3)
    x, w = _int8(rng, (2, 32, 6, 6)), _int8(rng, (16, 32, 3, 3))
    bias = rng.integers(-20000, 20000, 16).astype(np.int32)
    ratio = 2.0**-11 if mode == "shift" else 0.000731
    p = requant_params(ratio, PYNQ, mode=mode, relu=True, acc_bound=288 * 127 * 128 + 20000)
    got = conv2d_int8(x, w, bias, stride=1, padding=1, requant=p)
    acc = _run_onnx("Conv", {"x": x, "w": w, "b": bias}, 4, pads=[1] * 4).astype(np.float64)
    want = np.clip(np.floor(acc * float(p.ratio) + 0.5), 0, 127)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)
    # Against the ratio itself (not the realized one) the result is within half an LSB plus
    # the multiplier's approximation error.
    exact = np.clip(acc * ratio, 0, 127)
    slack = 127 * abs(float(p.ratio) / ratio - 1)
    assert np.abs(got - exact).max() <= 0.5 + slack + 1e-9


def test_dense_equals_onnxruntime_gemm_and_clips_symmetrically() -> None:
    rng = np.random.default_rng(4)
    x, w = _int8(rng, (5, 512)), _int8(rng, (10, 512))
    bias = rng.integers(-1000, 1000, 10).astype(np.int32)
    acc = dense_int8(x, w, bias)
    want = _run_onnx("Gemm", {"x": x, "w": w, "b": bias}, 2, transB=1)
    np.testing.assert_array_equal(acc, want.astype(np.int64))
    p = requant_params(2.0**-12, PYNQ)
    got = dense_int8(x, w, bias, requant=p)
    np.testing.assert_array_equal(got, np.clip(np.floor(want / 4096.0 + 0.5), -127, 127))


def test_accumulator_wraps_like_the_gemm_core() -> None:
    x = np.ones((1, 2), np.int8)
    w = np.ones((1, 2), np.int8)
    bias = np.array([(1 << 31) - 1], np.int64)
    assert dense_int8(x, w, bias).tolist() == [[-(1 << 31) + 1]]


def test_max_pool_equals_onnxruntime() -> None:
    x = _int8(np.random.default_rng(5), (2, 16, 8, 8))
    for kernel, stride in [((2, 2), (2, 2)), ((3, 3), (1, 1)), ((3, 3), (2, 2))]:
        want = _run_onnx("MaxPool", {"x": x}, 4, kernel_shape=list(kernel), strides=list(stride))
        got = max_pool2d_int8(x, kernel, stride)
        assert got.dtype == np.int8
        np.testing.assert_array_equal(got, want)


def test_reference_rejects_bad_inputs_with_named_errors() -> None:
    x8 = np.zeros((1, 4, 5, 5), np.int8)
    with pytest.raises(TypeError, match="conv2d: x must be int8, not float32"):
        conv2d_int8(x8.astype(np.float32), np.zeros((2, 4, 3, 3), np.int8))
    with pytest.raises(ValueError, match=r"must agree on C, not x\(1, 4, 5, 5\) and w\(2, 3"):
        conv2d_int8(x8, np.zeros((2, 3, 3, 3), np.int8))
    with pytest.raises(ValueError, match=r"conv2d: bias must be integer of shape \(2,\)"):
        conv2d_int8(x8, np.zeros((2, 4, 3, 3), np.int8), np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="dense: x .* must agree on K"):
        dense_int8(np.zeros((1, 4), np.int8), np.zeros((2, 5), np.int8))

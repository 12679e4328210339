"""Integer ONNX arithmetic compiled for the CPU and for OpenCL (PoCL) equals onnxruntime bit for
bit: unsigned types over their whole range (wraparound, division past the signed range), MatMul
of 32/64-bit integers (summed in their own type), and Pow of an integer base (raised in float64
and truncated, as onnxruntime's std::pow)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import tensorforge
from tensorforge.compiler.frontend.onnx_builders import IR_VERSION

BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")


def _model(nodes: list[tuple[str, str]], x: np.ndarray, y: np.ndarray) -> onnx.ModelProto:
    """One node per (op, output name), each of inputs x and y."""
    elem = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "y"], [out], name=out) for op, out in nodes],
        "integer_ops",
        [
            helper.make_tensor_value_info("x", elem(x.dtype), x.shape),
            helper.make_tensor_value_info("y", elem(y.dtype), y.shape),
        ],
        [helper.make_tensor_value_info(out, elem(x.dtype), None) for _, out in nodes],
    )
    opset = [helper.make_opsetid("", 15)]
    model = helper.make_model(graph, opset_imports=opset, ir_version=IR_VERSION)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _assert_all_equal_onnxruntime(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feed)
    for target in ("llvm", "opencl"):
        got = list(tensorforge.compile(model, target=target).run(feed).values())
        for g, w, out in zip(got, want, model.graph.output, strict=True):
            assert g.dtype == w.dtype, f"{target} {out.name}"
            np.testing.assert_array_equal(g, w, err_msg=f"{target} {out.name}")


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
def test_unsigned_arithmetic_wraps_and_divides_like_onnxruntime(dtype: type) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(info.bits)
    x = rng.integers(0, info.max, (3, 41), dtype=dtype, endpoint=True)
    y = rng.integers(1, info.max, (3, 41), dtype=dtype, endpoint=True)
    x[0, :4], y[0, :4] = [0, 1, info.max, info.max // 2 + 1], [info.max, 3, 1, info.max]
    ops = BINARY[:4] if dtype is np.uint16 else BINARY  # onnxruntime has no uint16 Max/Min
    model = _model([(op, op.lower()) for op in ops], x, y)
    _assert_all_equal_onnxruntime(model, {"x": x, "y": y})


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64, np.int64])
def test_integer_matmul_wraps_in_its_own_type_like_onnxruntime(dtype: type) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(info.bits)
    x = rng.integers(info.min, info.max, (5, 19), dtype=dtype, endpoint=True)
    y = rng.integers(info.min, info.max, (19, 7), dtype=dtype, endpoint=True)
    _assert_all_equal_onnxruntime(_model([("MatMul", "matmul")], x, y), {"x": x, "y": y})


@pytest.mark.parametrize(
    ("base", "exponent"),
    [(np.int32, np.int32), (np.int64, np.int64), (np.int32, np.float32), (np.int64, np.int32)],
)
def test_pow_of_an_integer_base_truncates_like_onnxruntime(base: type, exponent: type) -> None:
    x = np.array([2, -3, 7, 0, 1, -2, 10, 5, 3], base)
    y = np.array([10, 3, 0, 0, 30, 5, 9, 2, 19], exponent)
    if np.dtype(exponent).kind == "f":  # fractional powers truncate toward zero
        y = np.array([0.5, 3, -1, 2, 30, 3, 8.5, 2.5, 19], exponent)
    _assert_all_equal_onnxruntime(_model([("Pow", "pow")], x, y), {"x": x, "y": y})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_reduce_mean_truncates_in_its_own_type_like_onnxruntime(dtype: type) -> None:
    """An integer ReduceMean is the integer sum divided by the count in the input's type (the
    mean was a float64 division whose result did not match the int output buffer)."""
    x = np.random.default_rng(5).integers(-50, 50, (3, 4, 5)).astype(dtype)
    node = helper.make_node("ReduceMean", ["x", "axes"], ["mean"], keepdims=0)
    graph = helper.make_graph(
        [node],
        "integer_mean",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info("mean", helper.np_dtype_to_tensor_dtype(x.dtype), None)],
        [onnx.numpy_helper.from_array(np.array([0, -1], np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    got = tensorforge.compile(model).run({"x": x})["mean"]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)

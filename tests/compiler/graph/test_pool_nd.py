"""Max and average pooling over 1, 2 and 3 spatial axes compiled to native code (and OpenCL),
against onnxruntime: the N-d lowering (padding, dilation, ceil mode, the average's divisor)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph import run_graph

SHAPES = {1: (2, 3, 17), 2: (2, 3, 11, 9), 3: (1, 3, 7, 9, 8)}
CASES = [
    ("MaxPool", {"kernel_shape": [3]}),
    ("MaxPool", {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("MaxPool", {"kernel_shape": [2], "dilations": [2], "pads": [1, 0], "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [4], "strides": [3], "pads": [2, 1]}),
    ("AveragePool", {"kernel_shape": [3], "pads": [1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2], "strides": [2], "ceil_mode": 1}),
    (
        "AveragePool",
        {
            "kernel_shape": [3, 2],
            "strides": [2, 1],
            "dilations": [2, 1],
            "pads": [2, 1, 2, 1],
            "ceil_mode": 1,
        },
    ),
    (
        "AveragePool",
        {
            "kernel_shape": [3, 3],
            "strides": [2, 3],
            "pads": [1, 0, 2, 2],
            "ceil_mode": 1,
            "count_include_pad": 1,
        },
    ),
    ("MaxPool", {"kernel_shape": [3, 2, 2], "strides": [2, 2, 1], "pads": [1, 0, 1, 1, 1, 0]}),
    (
        "MaxPool",
        {"kernel_shape": [2, 2, 3], "dilations": [2, 1, 2], "strides": [1, 2, 2], "ceil_mode": 1},
    ),
    ("AveragePool", {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1]}),
    (
        "AveragePool",
        {
            "kernel_shape": [2, 3, 2],
            "dilations": [2, 2, 3],
            "strides": [2, 1, 2],
            "pads": [1, 1, 0, 0, 2, 1],
            "ceil_mode": 1,
            "count_include_pad": 1,
        },
    ),
]


def _model(op: str, attrs: dict, shape: tuple):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    nodes = [helper.make_node(op, ["x"], ["y"], **attrs), helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "pool", [x], [z])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize(("op", "attrs"), CASES)
def test_pool_matches_onnxruntime(op, attrs, target) -> None:
    shape = SHAPES[len(attrs["kernel_shape"])]
    model = _model(op, attrs, shape)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model, target=target).run({"x": x})["z"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize(
    ("op", "attrs", "shape"),
    [
        ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, (1, 2, 1, 3)),
        ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, (2, 3, 1, 1)),
        ("AveragePool", {"kernel_shape": [4], "strides": [3], "pads": [1, 1]}, (1, 2, 1)),
        (
            "AveragePool",
            {"kernel_shape": [3, 3], "strides": [2, 2], "count_include_pad": 1},
            (1, 2, 2, 3),
        ),
    ],
)  # fmt: skip
def test_ceil_mode_window_larger_than_the_input(op, attrs, shape, target) -> None:
    """In ceil mode a window may hang over the input's end: a 2x2 pool of a 1x1 map has one
    output (ONNX's ceil formula, onnxruntime and PyTorch), not an import error."""
    model = _model(op, {**attrs, "ceil_mode": 1}, shape)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    graph = from_onnx(model)
    np.testing.assert_allclose(run_graph(graph, {"x": x})["z"], want, rtol=1e-5, atol=1e-6)
    got = tensorforge.compile(model, target=target).run({"x": x})["z"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

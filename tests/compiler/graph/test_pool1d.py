"""1-D max and average pooling compiled to native code (and OpenCL), against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tensorforge

CASES = [
    ("MaxPool", {"kernel_shape": [3]}),
    ("MaxPool", {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("MaxPool", {"kernel_shape": [2], "dilations": [2], "pads": [1, 0], "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [4], "strides": [3], "pads": [2, 1]}),
    ("AveragePool", {"kernel_shape": [3], "pads": [1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2], "strides": [2], "ceil_mode": 1}),
]


def _model(op: str, attrs: dict):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 17])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    nodes = [helper.make_node(op, ["x"], ["y"], **attrs), helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "pool1d", [x], [z])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize(("op", "attrs"), CASES)
def test_pool1d_matches_onnxruntime(op, attrs, target) -> None:
    model = _model(op, attrs)
    x = np.random.default_rng(0).standard_normal((2, 3, 17)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model, target=target).run({"x": x})["z"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

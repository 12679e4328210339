"""Convolutions padded differently on each side (Inception's 1x7 and 7x1 layers, "same" padding
of an even-sized input with stride 2) take the blocked x86 conv2d, which pads each side by its
own amount: compiled to native code, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.compiler import te
from tensorforge.compiler.topi.x86.conv2d import conv2d_nchwc

# (input shape, weight shape, attributes)
CASES = [
    ((1, 32, 17, 17), (48, 32, 1, 7), {"pads": [0, 3, 0, 3]}),
    ((1, 32, 17, 17), (48, 32, 7, 1), {"pads": [3, 0, 3, 0]}),
    ((1, 16, 14, 14), (32, 16, 3, 3), {"pads": [0, 0, 1, 1], "strides": [2, 2]}),
    ((2, 8, 13, 11), (16, 8, 3, 3), {"pads": [1, 0, 2, 1], "strides": [2, 2]}),
    ((1, 16, 12, 12), (16, 16, 3, 2), {"pads": [2, 1, 2, 3], "dilations": [2, 2]}),
]


def _model(x_shape: tuple, w: np.ndarray, attrs: dict, bias: np.ndarray):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs),
        helper.make_node("Relu", ["y"], ["z"]),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")]
    graph = helper.make_graph(nodes, "conv", [x], [z], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_asymmetric_conv_matches_onnxruntime(x_shape, w_shape, attrs) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal(w_shape).astype(np.float32)
    bias = rng.standard_normal(w_shape[0]).astype(np.float32)
    model = _model(x_shape, w, attrs, bias)
    x = rng.standard_normal(x_shape).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model).run({"x": x})["z"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv2d_nchwc_refuses_bad_padding() -> None:
    data = te.placeholder((1, 16, 8, 8), name="x")
    kernel = te.placeholder((16, 16, 3, 3), name="w")
    for bad in ((1, 1), (1, 1, 1, -1)):
        with pytest.raises(ValueError, match="padding must be an int or 4 ints"):
            conv2d_nchwc(data, kernel, 1, bad)

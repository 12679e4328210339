"""ConvTranspose compiled to native code (and OpenCL), against onnxruntime: upsampling-decoder
shapes (stride 2, kernel 4, pad 1, as torch's ConvTranspose2d in FCN/UNet decoders) and the
geometry the phase decomposition must get right (strides sharing a factor with dilations, taps
a phase lacks, output padding, 1-D and 3-D)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tensorforge

# (input shape, weight shape, attributes)
CASES = [
    ((1, 32, 12, 10), (32, 16, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 32, 9, 8), (32, 8, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2}),
    ((1, 6, 7, 5), (6, 4, 3, 3), {"strides": [3, 2], "output_padding": [2, 1]}),
    ((1, 4, 6, 6), (4, 3, 3, 2), {"strides": [2, 2], "dilations": [2, 3], "pads": [1, 0, 2, 1]}),
    ((1, 4, 6, 5), (4, 2, 3, 3), {"strides": [2, 1], "dilations": [4, 1], "group": 2}),
    ((2, 3, 11), (3, 5, 5), {"strides": [3], "pads": [2, 1], "dilations": [2]}),
    ((1, 4, 3, 4, 5), (4, 2, 3, 2, 3), {"strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1]}),
    ((1, 3, 5, 4), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [10, 8], "pads": [1] * 4}),
]


def _model(x_shape: tuple, w: np.ndarray, attrs: dict, bias: np.ndarray):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs),
        helper.make_node("Relu", ["y"], ["z"]),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")]
    graph = helper.make_graph(nodes, "deconv", [x], [z], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_conv_transpose_matches_onnxruntime(x_shape, w_shape, attrs, target) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal(w_shape).astype(np.float32)
    bias = rng.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(np.float32)
    model = _model(x_shape, w, attrs, bias)
    x = rng.standard_normal(x_shape).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model, target=target).run({"x": x})["z"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv_transpose_with_weights_computed_at_run_time() -> None:
    rng = np.random.default_rng(1)
    feed = {
        "x": rng.standard_normal((1, 4, 5, 6)).astype(np.float32),
        "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
    }
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 0, 0, 1])
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feed.items()]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "deconv", inputs, [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = tensorforge.compile(model).run(feed)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("kernel", "stride", "auto_pad"), [(1, 2, "SAME_UPPER"), (2, 3, "SAME_LOWER")]
)
def test_same_padding_with_a_kernel_shorter_than_the_stride(kernel, stride, auto_pad) -> None:
    """SAME's output is input x stride even where that passes the full output (negative
    padding): against onnx's reference evaluator, as onnxruntime clips the output instead."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((3, 2, kernel, kernel)).astype(np.float32)
    bias = rng.standard_normal(2).astype(np.float32)
    model = _model((1, 3, 5, 4), w, {"strides": [stride] * 2, "auto_pad": auto_pad}, bias)
    x = rng.standard_normal((1, 3, 5, 4)).astype(np.float32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = tensorforge.compile(model).run({"x": x})["z"]
    assert got.shape == want.shape == (1, 2, 5 * stride, 4 * stride)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

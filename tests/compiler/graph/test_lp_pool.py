"""LpPool (a depthwise all-ones Conv between a power and a root), compiled, against
onnxruntime: p of 1, 2 and 3, 1-D to 3-D windows, pads, strides, dilations, ceil_mode."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError


def _model(shape: tuple, **attrs):  # noqa: ANN202
    node = oh.make_node("LpPool", ["x"], ["y"], **attrs)
    graph = oh.make_graph(
        [node],
        "lp",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


CASES = [
    ((1, 2, 9), {"kernel_shape": [3], "p": 1}),
    ((2, 3, 7, 6), {"kernel_shape": [3, 2], "p": 3, "strides": [2, 1], "pads": [1, 0, 1, 1]}),
    ((1, 2, 8, 8), {"kernel_shape": [2, 2], "dilations": [2, 3], "pads": [1, 1, 0, 1]}),
    ((1, 2, 7, 8), {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 1, 4, 5, 6), {"kernel_shape": [2, 2, 3], "p": 2}),
]


@pytest.mark.parametrize(("shape", "attrs"), CASES)
def test_lp_pool_matches_onnxruntime(shape: tuple, attrs: dict) -> None:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    model = _model(shape, **attrs)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model).run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_lp_pool_with_a_bad_p_names_the_node_and_attribute() -> None:
    with pytest.raises(OnnxImportError, match=r"LpPool node 'LpPool_0'.*attribute p"):
        tensorforge.compile(_model((1, 1, 4, 4), kernel_shape=[2, 2], p=0))

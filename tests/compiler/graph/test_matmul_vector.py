"""MatMul with 1-D operands (numpy's promotion: a dim of 1 added, then dropped) compiled to
native code and OpenCL, with a fused elementwise tail, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tensorforge

SHAPES = [
    ((5,), (5,)),
    ((5,), (5, 3)),
    ((4, 5), (5,)),
    ((2, 1, 3, 5), (4, 5, 2)),
    ((7,), (2, 7, 3)),
]
SHAPES += [((2, 3, 4, 6), (6,))]


def _model(a_shape: tuple, b_shape: tuple):
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape))
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape))
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["y"]),
        helper.make_node("Tanh", ["y"], ["z"]),
    ]
    graph = helper.make_graph(nodes, "matmul_vector", [a, b], [z])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES)
def test_matmul_with_vectors_matches_onnxruntime(a_shape, b_shape, target) -> None:
    rng = np.random.default_rng(0)
    feed = {
        "a": rng.standard_normal(a_shape).astype(np.float32),
        "b": rng.standard_normal(b_shape).astype(np.float32),
    }
    model = _model(a_shape, b_shape)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = tensorforge.compile(model, target=target).run(feed)["z"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

"""ReduceProd with a fused producer and tail, compiled to native code and OpenCL, against
onnxruntime (float32 and int32)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge

DTYPES = {"float32": TensorProto.FLOAT, "int32": TensorProto.INT32}


def _model(dtype: str, axes: list[int], keepdims: int):
    x = helper.make_tensor_value_info("x", DTYPES[dtype], [3, 4, 5])
    z = helper.make_tensor_value_info("z", DTYPES[dtype], None)
    inits = [
        numpy_helper.from_array(np.array(axes, np.int64), "axes"),
        numpy_helper.from_array(np.array(2, dtype), "two"),
    ]
    nodes = [
        helper.make_node("Abs", ["x"], ["a"]),
        helper.make_node("ReduceProd", ["a", "axes"], ["p"], keepdims=keepdims),
        helper.make_node("Mul", ["p", "two"], ["z"]),
    ]
    graph = helper.make_graph(nodes, "reduce_prod", [x], [z], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize(("axes", "keepdims"), [([1], 1), ([0, 2], 0), ([-1], 0)])
def test_reduce_prod_matches_onnxruntime(axes, keepdims, dtype, target) -> None:
    rng = np.random.default_rng(0)
    if dtype == "float32":
        x = rng.uniform(-1.5, 1.5, (3, 4, 5)).astype(np.float32)
    else:
        x = rng.integers(-3, 4, (3, 4, 5)).astype(np.int32)
    model = _model(dtype, axes, keepdims)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model, target=target).run({"x": x})["z"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5)

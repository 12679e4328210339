"""ONNX patterns that torch's exporters write, rebuilt with onnx.helper (no torch needed), compiled
and checked against onnxruntime: each was a failure of a model users bring from PyTorch."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge


def _model(nodes, inputs, outputs, initializers=(), opset=17):  # noqa: ANN001, ANN202
    graph = oh.make_graph(nodes, "exported", inputs, outputs, list(initializers))
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _float(name: str, shape) -> object:  # noqa: ANN001
    return oh.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _check(model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # noqa: ANN001
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    module = tensorforge.compile(model)
    got = module.run(feeds)
    assert len(got) == len(want)
    for ours, theirs in zip(got.values(), want, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    return got


def test_a_value_returned_twice_is_two_outputs() -> None:
    # `return y, y` (and `return x, y, y` with x the input): one value listed as two outputs
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "w")
    model = _model(
        [oh.make_node("MatMul", ["x", "w"], ["y"])],
        [_float("x", [2, 3])],
        [_float("x", [2, 3]), _float("y", [2, 4]), _float("y", [2, 4]), _float("x", [2, 3])],
        [w],
    )
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    got = _check(model, {"x": x})
    assert list(got)[:2] == ["x", "y"]

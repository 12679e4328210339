"""GridSample (a spatial transformer's warp, an optical-flow warp) with run-time grids reaching
past the image, every padding mode and align_corners, compiled, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh

import tensorforge


def _model(mode: str, padding: str, align: int):  # noqa: ANN202
    node = oh.make_node(
        "GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding, align_corners=align
    )
    graph = oh.make_graph(
        [node, oh.make_node("Relu", ["y"], ["z"])],  # an element-wise op fused after it
        "warp",
        [
            oh.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3, 7, 9)),
            oh.make_tensor_value_info("grid", TensorProto.FLOAT, (2, 5, 6, 2)),
        ],
        [oh.make_tensor_value_info("z", TensorProto.FLOAT, None)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 20)])


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_matches_onnxruntime(mode: str, padding: str, align: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    grid = rng.uniform(-2.5, 2.5, (2, 5, 6, 2)).astype(np.float32)  # far past the borders too
    model = _model(mode, padding, align)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "grid": grid})
    got = tensorforge.compile(model).run({"x": x, "grid": grid})["z"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

"""GridSample (a spatial transformer's warp, an optical-flow warp) with run-time grids reaching
past the image, every mode, padding mode and align_corners, on images and volumes, compiled,
against onnxruntime (and volumes' cubic mode, which onnxruntime does not run, against onnx's
reference evaluator)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

import tensorforge


def _model(  # noqa: ANN202
    mode: str,
    padding: str,
    align: int,
    x_shape: tuple = (2, 3, 7, 9),
    grid_shape: tuple = (2, 5, 6, 2),
):
    node = oh.make_node(
        "GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding, align_corners=align
    )
    graph = oh.make_graph(
        [node, oh.make_node("Relu", ["y"], ["z"])],  # an element-wise op fused after it
        "warp",
        [
            oh.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
            oh.make_tensor_value_info("grid", TensorProto.FLOAT, grid_shape),
        ],
        [oh.make_tensor_value_info("z", TensorProto.FLOAT, None)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 20)])


def _inputs(x_shape: tuple, grid_shape: tuple) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    grid = rng.uniform(-2.5, 2.5, grid_shape).astype(np.float32)  # far past the borders too
    return {"x": x, "grid": grid}


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_matches_onnxruntime(mode: str, padding: str, align: int) -> None:
    model = _model(mode, padding, align)
    feed = _inputs((2, 3, 7, 9), (2, 5, 6, 2))
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = tensorforge.compile(model).run(feed)["z"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_on_volumes_matches_onnxruntime(mode: str, padding: str, align: int) -> None:
    shapes = (2, 2, 4, 5, 6), (2, 3, 2, 4, 3)
    model = _model(mode, padding, align, *shapes)
    feed = _inputs(*shapes)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = tensorforge.compile(model).run(feed)["z"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("padding", ["zeros", "reflection"])  # (border: see ops/grid_sample.py)
def test_grid_sample_cubic_on_volumes_matches_the_reference_evaluator(padding: str) -> None:
    shapes = (1, 2, 4, 5, 3), (1, 2, 3, 2, 3)
    model = _model("cubic", padding, 0, *shapes)
    feed = _inputs(*shapes)
    (want,) = ReferenceEvaluator(model).run(None, feed)
    got = tensorforge.compile(model).run(feed)["z"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

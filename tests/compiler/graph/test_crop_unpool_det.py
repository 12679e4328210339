"""CenterCropPad, MaxUnpool (by constant and run-time indices) and Det (the Leibniz sum),
compiled, against onnxruntime; bad inputs refused by node name."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError


def _model(node, shape, consts, opset=18):  # noqa: ANN001, ANN202
    graph = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _compare(model, x: np.ndarray) -> None:  # noqa: ANN001
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model).run({"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("shape", "target", "axes"),
    [((3, 8, 7), (3, 5, 10), None), ((2, 9, 4), (6, 7), [-2, 2]), ((4, 5, 3), (2,), [0])],
)
def test_center_crop_pad_matches_onnxruntime(shape: tuple, target: tuple, axes: list) -> None:
    attrs = {} if axes is None else {"axes": axes}
    node = oh.make_node("CenterCropPad", ["x", "shape"], ["y"], **attrs)
    model = _model(node, shape, {"shape": np.array(target, np.int64)})
    _compare(model, np.random.default_rng(0).standard_normal(shape).astype(np.float32))


def test_max_unpool_of_max_pool_indices_matches_onnxruntime() -> None:
    rng = np.random.default_rng(1)
    pooled_from = rng.standard_normal((2, 3, 8, 9)).astype(np.float32)
    pool = oh.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 3], strides=[2, 3])
    graph = oh.make_graph(
        [pool],
        "pool",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3, 8, 9))],
        [oh.make_tensor_value_info(n, t, None) for n, t in (("p", 1), ("i", 7))],
    )
    session = ort.InferenceSession(oh.make_model(graph).SerializeToString())
    pooled, indices = session.run(None, {"x": pooled_from})
    node = oh.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 3], strides=[2, 3])
    _compare(_model(node, pooled.shape, {"i": indices}), pooled)


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (2, 4, 4), (2, 1, 5, 5)])
def test_det_matches_onnxruntime(shape: tuple) -> None:
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    _compare(_model(oh.make_node("Det", ["x"], ["y"]), shape, {}), x)


def test_det_of_large_matrices_is_refused_by_name() -> None:
    model = _model(oh.make_node("Det", ["x"], ["y"], name="volume"), (8, 8), {})
    with pytest.raises(OnnxImportError, match=r"Det node 'volume'.*at most 6 x 6"):
        tensorforge.compile(model)


def test_max_unpool_of_run_time_indices_in_their_windows_matches_onnxruntime() -> None:
    """Indices given as an input (each in its element's window): placed at run time."""
    node = oh.make_node("MaxUnpool", ["x", "i"], ["y"], name="unpool", kernel_shape=[2])
    model = _model(node, (1, 2, 4), {})
    model.graph.input.append(oh.make_tensor_value_info("i", TensorProto.INT64, (1, 2, 4)))
    x = np.random.default_rng(4).standard_normal((1, 2, 4)).astype(np.float32)
    i = np.array([[[0, 2, 2, 4], [6, 6, 7, 9]]], np.int64)  # windows [k, k + 1] of each row
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "i": i})
    got = tensorforge.compile(model).run({"x": x, "i": i})["y"]
    np.testing.assert_array_equal(got, want)

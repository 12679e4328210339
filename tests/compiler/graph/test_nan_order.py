"""NaN in ArgMax, ArgMin, Hardmax, ReduceMax and ReduceMin, compiled and in the reference
executor, against onnxruntime, whose scan from a row's first element has a NaN there win (index
0, the max NaN; Hardmax's row then all 0) and a NaN anywhere else lose; a row of NaN only gives
index 0 (never one past the axis) and a NaN max (not -inf). (TopK's NaN order: test_topk.py.)"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph import run_graph

NAN, INF = np.nan, np.inf
# rows: NaN first; NaN inside; NaN only; -inf ties around NaNs; inf ties; NaN first among
# -infs; ties after the max
X = np.array(
    [
        [NAN, 1, 3, 3, NAN],
        [1, NAN, 3, 3, -INF],
        [NAN, NAN, NAN, NAN, NAN],
        [-INF, NAN, -INF, 0, -INF],
        [INF, NAN, INF, 0, 0],
        [NAN, -INF, -INF, NAN, -INF],
        [2, 2, NAN, -1, -1],
    ],
    np.float32,
)


def _model(op: str, **attrs):  # noqa: ANN202
    out = TensorProto.INT64 if op.startswith("Arg") else TensorProto.FLOAT
    graph = oh.make_graph(
        [oh.make_node(op, ["x"], ["y"], **attrs)],
        "nan_order",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, list(X.shape))],
        [oh.make_tensor_value_info("y", out, None)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=8)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize(
    "op,attrs",
    [
        ("ArgMax", {"axis": 1}),
        ("ArgMin", {"axis": 1, "keepdims": 0}),
        ("ArgMax", {"axis": 1, "select_last_index": 1}),
        ("ArgMin", {"axis": 1, "select_last_index": 1}),
        ("ArgMax", {"axis": 0}),
        ("Hardmax", {"axis": 1}),
    ],
)
def test_nan_in_arg_ops_matches_onnxruntime(op: str, attrs: dict, target: str) -> None:
    model = _model(op, **attrs)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": X})
    got = tensorforge.compile(model, target=target).run({"x": X})["y"]
    reference = run_graph(from_onnx(model), {"x": X})["y"]
    # onnxruntime's Hardmax takes its max in vector lanes: a NaN past the first element wins
    # or loses by its lane (row 3's does), so only the rows its scan order decides are compared
    rows = [0, 1, 2, 4, 5, 6] if op == "Hardmax" else slice(None)
    np.testing.assert_array_equal(got[rows], want[rows])
    np.testing.assert_array_equal(reference[rows], want[rows])


# rows onnxruntime's ReduceMax/ReduceMin decide by its scan order: NaN first, NaN only, none
# (a NaN further on wins or loses by its vector lane and the row's place in memory)
X_SCAN = np.array(
    [[NAN, 1, 3, 3, 2], [NAN] * 5, [INF, 0, INF, 0, 0], [-INF] * 5, [2, 2, 1, -1, -1]], np.float32
)


def _reduce_model(op: str, x: np.ndarray, axes: list[int], keepdims: int):  # noqa: ANN202
    model = _model(op, keepdims=keepdims)
    for dim, size in zip(model.graph.input[0].type.tensor_type.shape.dim, x.shape, strict=True):
        dim.dim_value = size
    model.graph.node[0].input.append("axes")
    model.graph.initializer.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    return model


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("keepdims", [1, 0])
def test_nan_in_max_and_min_matches_onnxruntime(op: str, keepdims: int, target: str) -> None:
    model = _reduce_model(op, X_SCAN, [1], keepdims)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": X_SCAN})
    got = tensorforge.compile(model, target=target).run({"x": X_SCAN})["y"]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(run_graph(from_onnx(model), {"x": X_SCAN})["y"], want)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize("op,skip", [("ReduceMax", np.nanmax), ("ReduceMin", np.nanmin)])
def test_a_nan_past_the_first_element_is_skipped(op: str, skip, target: str) -> None:  # noqa: ANN001
    """Over both axes of rows that do not start with NaN, long enough for vector lanes."""
    x = np.random.default_rng(4).standard_normal((4, 300)).astype(np.float32)
    x[:, 7::13] = np.nan
    for axes, want in (([1], skip(x, axis=1)), ([0, 1], skip(x))):
        model = _reduce_model(op, x, axes, 0)
        got = tensorforge.compile(model, target=target).run({"x": x})["y"]
        np.testing.assert_array_equal(got, want)

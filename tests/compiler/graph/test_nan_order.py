"""NaN in ArgMax, ArgMin and Hardmax, compiled and in the reference executor, against
onnxruntime, whose scan from a row's first element has a NaN there win (index 0; Hardmax's row
then all 0) and a NaN anywhere else lose; a row of NaN only gives index 0, never one past the
axis. (TopK's NaN order: test_topk.py. ReduceMax/ReduceMin with NaN: docs/graph.md says why
they are not matched.)"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto
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
    out = TensorProto.FLOAT if op == "Hardmax" else TensorProto.INT64
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

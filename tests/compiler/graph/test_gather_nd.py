"""GatherND as torch exports advanced indexing (each sequence's last token, per-batch picks),
compiled with run-time indices, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh

import tensorforge


def _model(data: tuple, indices: tuple, batch_dims: int):  # noqa: ANN202
    graph = oh.make_graph(
        [oh.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)],
        "gather_nd",
        [
            oh.make_tensor_value_info("x", TensorProto.FLOAT, data),
            oh.make_tensor_value_info("i", TensorProto.INT64, indices),
        ],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "data,indices,batch_dims",
    [((4, 7, 16), (4, 2), 0), ((2, 5, 6, 3), (2, 4, 2), 1), ((3, 4, 5), (2, 3, 3), 0)],
    ids=["last_tokens", "per_batch", "scalars"],
)
def test_gather_nd_with_run_time_indices(data: tuple, indices: tuple, batch_dims: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(data).astype(np.float32)
    dims = np.array(data[batch_dims : batch_dims + indices[-1]])
    i = rng.integers(-dims, dims, indices).astype(np.int64)  # negative ones count from the end
    model = _model(data, indices, batch_dims)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "i": i})
    got = tensorforge.compile(model).run({"x": x, "i": i})["y"]
    np.testing.assert_array_equal(got, want)

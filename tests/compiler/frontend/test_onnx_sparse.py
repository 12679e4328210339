"""Sparse constants (a Constant's sparse_value, the graph's sparse_initializer) import as their
dense values, as onnxruntime reads them; bad indices are refused by name."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError, from_onnx

X = np.arange(12, dtype=np.float32).reshape(3, 4)


def _sparse(name: str, indices: list, index_dims: list[int]) -> onnx.SparseTensorProto:
    values = oh.make_tensor(name, TensorProto.FLOAT, [3], [5.0, -6.0, 7.5])
    idx = oh.make_tensor(f"{name}_i", TensorProto.INT64, index_dims, indices)
    return oh.make_sparse_tensor(values, idx, [3, 4])


def _model(sparse: onnx.SparseTensorProto, as_initializer: bool) -> onnx.ModelProto:
    nodes = [oh.make_node("Add", ["x", "c"], ["y"])]
    if not as_initializer:
        nodes.insert(0, oh.make_node("Constant", [], ["c"], sparse_value=sparse))
    graph = oh.make_graph(
        nodes,
        "sparse",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, (3, 4))],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, (3, 4))],
        sparse_initializer=[sparse] if as_initializer else None,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("as_initializer", [False, True])
@pytest.mark.parametrize(
    "indices,index_dims", [([0, 5, 11], [3]), ([0, 0, 1, 1, 2, 3], [3, 2])], ids=["linear", "coo"]
)
def test_sparse_constants_are_their_dense_values(
    as_initializer: bool, indices: list, index_dims: list[int]
) -> None:
    model = _model(_sparse("c", indices, index_dims), as_initializer)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": X})[0]
    (got,) = tensorforge.compile(model).run({"x": X}).values()
    np.testing.assert_array_equal(got, want)
    assert np.count_nonzero(got - X) == 3  # the three values, zeros elsewhere


def test_sparse_indices_out_of_range_are_refused() -> None:
    with pytest.raises(OnnxImportError, match=r"sparse indices must lie in dims \[3, 4\]"):
        from_onnx(_model(_sparse("c", [0, 5, 12], [3]), False))
    with pytest.raises(OnnxImportError, match=r"sparse indices must be \[3\] or \[3, 2\]"):
        from_onnx(_model(_sparse("c", [0, 5], [2]), True))

"""MaxPool's Indices output (1-D, 2-D, 3-D; pads, strides, dilations, ceil mode, both storage
orders) and MaxUnpool by those indices computed at run time (SegNet's unpooling), compiled to
native code, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh

import tensorforge


def _model(nodes, shape, outputs, dtype=TensorProto.FLOAT):  # noqa: ANN001, ANN202
    graph = oh.make_graph(
        nodes,
        "pool",
        [oh.make_tensor_value_info("x", dtype, shape)],
        [oh.make_tensor_value_info(n, t, None) for n, t in outputs],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def _check(model, x: np.ndarray) -> None:  # noqa: ANN001
    wants = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model).run({"x": x})
    for value, want in zip(model.graph.output, wants, strict=True):
        assert got[value.name].dtype == want.dtype
        np.testing.assert_array_equal(got[value.name], want)


POOLS = [
    ((2, 3, 9), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((2, 3, 8, 9), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 1], "pads": [1, 0, 1, 2]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 9, 9), {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 0, 1, 1]}),
    ((1, 2, 6, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 2, 3], "strides": [2, 1, 2], "pads": [1, 0, 1] * 2}),
]


@pytest.mark.parametrize(("shape", "attrs"), POOLS)
@pytest.mark.parametrize("order", [0, 1])
def test_max_pool_indices_match_onnxruntime(shape: tuple, attrs: dict, order: int) -> None:
    node = oh.make_node("MaxPool", ["x"], ["y", "i"], storage_order=order, **attrs)
    model = _model([node], shape, [("y", TensorProto.FLOAT), ("i", TensorProto.INT64)])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    _check(model, x)


def test_max_pool_indices_of_ties_take_the_first_in_window_order() -> None:
    node = oh.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 3], strides=[1, 1])
    model = _model([node], (1, 1, 5, 5), [("y", TensorProto.FLOAT), ("i", TensorProto.INT64)])
    x = np.random.default_rng(1).integers(0, 3, (1, 1, 5, 5)).astype(np.float32)
    _check(model, x)


def test_max_pool_indices_of_int8_match_onnxruntime() -> None:
    node = oh.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], pads=[1, 1, 1, 1])
    model = _model([node], (1, 2, 5, 5), [("y", 3), ("i", TensorProto.INT64)], TensorProto.INT8)
    x = np.random.default_rng(2).integers(-128, 128, (1, 2, 5, 5)).astype(np.int8)
    _check(model, x)


@pytest.mark.parametrize(
    ("shape", "attrs"),
    [
        ((2, 3, 8, 10), {"kernel_shape": [2, 2], "strides": [2, 2]}),  # SegNet's
        ((1, 2, 7, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ((1, 2, 9), {"kernel_shape": [3], "strides": [2]}),  # windows overlap
    ],
)
def test_max_unpool_of_max_pool_indices_round_trip_matches_onnxruntime(
    shape: tuple, attrs: dict
) -> None:
    """Pool, change the pooled values (a decoder's features, not the maxima), unpool by the
    run-time indices into the pooled input's shape."""
    nd = len(shape) - 2
    nodes = [
        oh.make_node("MaxPool", ["x"], ["p", "i"], **attrs),
        oh.make_node("Neg", ["p"], ["q"]),
        oh.make_node("Shape", ["x"], ["s"]),
        oh.make_node("MaxUnpool", ["q", "i", "s"], ["y"], **attrs),
    ]
    model = _model(nodes, shape, [("y", TensorProto.FLOAT)])
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    x[(0,) * (nd + 1)] = 5.0  # a maximum shared by overlapping windows
    _check(model, x)

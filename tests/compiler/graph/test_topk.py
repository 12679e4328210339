"""TopK (a classifier's top-5, a sampler's smallest-k) compiled, against onnxruntime; ties take
the lower index first; a K the step-by-step selection does not take is refused by name."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.graph.ops.topk import MAX_K
from tensorforge.compiler.tir.stmt import LoweringError


def _model(shape: tuple[int, ...], k: int, axis: int, largest: int):  # noqa: ANN202
    nodes = [
        oh.make_node("Softmax", ["x"], ["p"], axis=axis),
        oh.make_node("TopK", ["p", "k"], ["values", "indices"], axis=axis, largest=largest),
    ]
    graph = oh.make_graph(
        nodes,
        "head",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [
            oh.make_tensor_value_info("values", TensorProto.FLOAT, None),
            oh.make_tensor_value_info("indices", TensorProto.INT64, None),
        ],
        [numpy_helper.from_array(np.array([k], np.int64), "k")],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "shape,k,axis,largest", [((2, 1000), 5, -1, 1), ((3, 7, 4), 3, 1, 0), ((4, 9), 9, 1, 1)]
)
def test_topk_matches_onnxruntime(shape, k, axis, largest) -> None:  # noqa: ANN001
    model = _model(shape, k, axis, largest)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:4] = x.reshape(-1)[4]  # ties: the lower index comes first
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model).run(x)
    np.testing.assert_allclose(got["values"], want[0], rtol=1e-6)
    np.testing.assert_array_equal(got["indices"], want[1])


def test_a_k_beyond_the_selection_steps_is_refused() -> None:
    with pytest.raises(LoweringError, match=rf"K={MAX_K + 1} is more than the {MAX_K}"):
        tensorforge.compile(_model((1, 500), MAX_K + 1, -1, 1))

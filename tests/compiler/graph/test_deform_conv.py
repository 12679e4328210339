"""DeformConv (a GridSample of the offset sampling points and a grouped MatMul), compiled,
against onnxruntime and onnx's reference implementation: run-time offsets reaching past the
image, groups, offset groups, strides, dilations, pads, mask, bias."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError

F = TensorProto.FLOAT


def _model(shapes: dict, **attrs):  # noqa: ANN202
    node = oh.make_node("DeformConv", list(shapes), ["y"], name="deform", **attrs)
    graph = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info(n, F, s) for n, s in shapes.items()],
        [oh.make_tensor_value_info("y", F, None)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 19)])


CASES = [
    ({}, (1, 2, 5, 6), (3, 2, 2, 2), 1, False),
    ({"pads": [1, 0, 1, 2], "strides": [2, 1]}, (2, 4, 6, 5), (4, 4, 3, 3), 1, True),
    ({"group": 2, "offset_group": 2, "dilations": [1, 2]}, (1, 4, 7, 7), (6, 2, 2, 2), 2, True),
]


@pytest.mark.parametrize(("attrs", "x_shape", "w_shape", "groups", "masked"), CASES)
def test_deform_conv_matches_onnxruntime_and_the_onnx_reference(
    attrs: dict, x_shape: tuple, w_shape: tuple, groups: int, masked: bool
) -> None:
    kh, kw = w_shape[2:]
    pads = attrs.get("pads", [0] * 4)
    strides, dil = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    out = [
        (x_shape[2 + i] + pads[i] + pads[i + 2] - (k - 1) * dil[i] - 1) // strides[i] + 1
        for i, k in enumerate((kh, kw))
    ]
    rng = np.random.default_rng(0)
    shapes = {
        "x": x_shape,
        "w": w_shape,
        "offset": (x_shape[0], groups * kh * kw * 2, *out),
    }
    if masked:
        shapes["b"] = (w_shape[0],)
        shapes["mask"] = (x_shape[0], groups * kh * kw, *out)
    feed = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    feed["offset"] *= 2.5  # many points land between pixels and some past the border
    model = _model(shapes, **attrs)
    got = tensorforge.compile(model).run(feed)["y"]
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    (reference,) = ReferenceEvaluator(model).run(None, feed)
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4)


def test_deform_conv_with_a_wrong_offset_shape_is_refused_by_name() -> None:
    shapes = {"x": (1, 2, 5, 5), "w": (3, 2, 2, 2), "offset": (1, 8, 3, 3)}
    with pytest.raises(OnnxImportError, match=r"DeformConv node 'deform'.*offset must have"):
        tensorforge.compile(_model(shapes))

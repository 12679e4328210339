"""Pad's edge, reflect and wrap modes and a run-time constant_value, compiled to native code and
OpenCL, against onnxruntime and numpy's np.pad (for pads wider than the axis, which onnxruntime
refuses in reflect mode)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge

SHAPE = (2, 3, 4, 5)
# pads (begins then ends, over `axes` or all axes), axes
PADS = [
    ([0, 0, 1, 2, 0, 0, 2, 1], None),  # both spatial axes
    ([0, 1, -1, 2, 1, 0, 2, -2], None),  # negative pads crop before padding
    ([3, 4], [-1]),  # one axis, given by a negative index
]


def _model(mode: str, pads: list[int], axes: list[int] | None, runtime_fill: bool):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))
    inputs, names = [x], ["x", "pads", "", "axes" if axes else ""]
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    if axes:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    if runtime_fill:
        inputs.append(helper.make_tensor_value_info("v", TensorProto.FLOAT, []))
        names[2] = "v"
    while not names[-1]:
        names.pop()
    nodes = [
        helper.make_node("Pad", names, ["p"], mode=mode),
        helper.make_node("Sigmoid", ["p"], ["y"]),
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "pad", inputs, [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def _compiled(model, feed: dict, target: str) -> np.ndarray:
    return tensorforge.compile(model, target=target).run(feed)["y"]


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize(("pads", "axes"), PADS)
def test_pad_matches_onnxruntime(pads, axes, mode, target) -> None:
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal(SHAPE).astype(np.float32)}
    if mode == "constant":
        feed["v"] = np.array(1.5, np.float32)
    model = _model(mode, pads, axes, runtime_fill=mode == "constant")
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = _compiled(model, feed, target)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
def test_pads_wider_than_the_axis_match_numpy(mode, target) -> None:
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    widths = [(0, 0), (5, 7), (1, 9), (11, 0)]
    pads = [a for a, _ in widths] + [b for _, b in widths]
    got = _compiled(_model(mode, pads, None, runtime_fill=False), {"x": x}, target)
    want = 1 / (1 + np.exp(-np.pad(x, widths, mode=mode)))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

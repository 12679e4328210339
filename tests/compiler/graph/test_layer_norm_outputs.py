"""LayerNormalization's Mean and InvStdDev outputs (stash_type 1: float32 statistics) feeding
later nodes, compiled to native code and OpenCL, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge

SHAPE = (2, 3, 5, 4)


def _model(axis: int, used: tuple[str, ...]):
    """LN of x over `axis`; each used output passes through a later node: Y + 2, Mean * 2,
    Sqrt(InvStdDev) (Y, which ONNX requires, is computed but left unread when not used)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))
    rng = np.random.default_rng(1)
    stat = SHAPE[axis:]
    inits = [
        numpy_helper.from_array(rng.standard_normal(stat).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.standard_normal(stat).astype(np.float32), "bias"),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
    ]
    outs = ["Y"] + [name if name in used else "" for name in ("Mean", "InvStdDev")]
    while not outs[-1]:
        outs.pop()
    nodes = [
        helper.make_node("LayerNormalization", ["x", "scale", "bias"], outs, axis=axis),
        helper.make_node("Add", ["Y", "two"], ["y_next"]),
        helper.make_node("Mul", ["Mean", "two"], ["mean_next"]),
        helper.make_node("Sqrt", ["InvStdDev"], ["inv_next"]),
    ]
    nexts = {"Y": "y_next", "Mean": "mean_next", "InvStdDev": "inv_next"}
    nodes = nodes[:1] + [n for n in nodes[1:] if n.input[0] in used]
    outputs = [helper.make_tensor_value_info(nexts[u], TensorProto.FLOAT, None) for u in used]
    graph = helper.make_graph(nodes, "ln", [x], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


USED = [("Y", "Mean", "InvStdDev"), ("Mean",), ("InvStdDev", "Y"), ("Y",)]


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize("axis", [1, -1])
@pytest.mark.parametrize("used", USED)
def test_layer_norm_statistics_feed_later_nodes(used, axis, target) -> None:
    model = _model(axis, used)
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32) * 3 + 1
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model, target=target).run({"x": x})
    for out, value in zip(model.graph.output, want, strict=True):
        assert got[out.name].shape == value.shape
        np.testing.assert_allclose(got[out.name], value, rtol=1e-5, atol=1e-5)


def test_layer_norm_statistics_of_another_type_are_refused_by_name() -> None:
    model = _model(-1, ("Y", "Mean"))
    model.graph.node[0].attribute.append(helper.make_attribute("stash_type", 16))
    with pytest.raises(ValueError, match=r"stash_type must be 1 \(float32 statistics\), not 16"):
        tensorforge.compile(model)


@pytest.mark.parametrize("stats", [False, True], ids=["y_only", "with_statistics"])
def test_rows_far_from_zero_keep_their_spread(stats: bool) -> None:
    """Hidden states around 300 with a spread of 0.05: the mean is summed as offsets from each
    row's first element, so x - mean keeps the spread's digits (a plain float32 sum of the row
    lost them: 1.2e-3 relative error against onnxruntime's 4e-5)."""
    n = 768
    outs = ["y", "mean", "inv"] if stats else ["y"]
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], outs, axis=-1)
    graph = helper.make_graph(
        [node],
        "offset",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, n))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [
            numpy_helper.from_array(np.ones(n, np.float32), "s"),
            numpy_helper.from_array(np.zeros(n, np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    x = (300 + np.random.default_rng(0).standard_normal((4, n)) * 0.05).astype(np.float32)
    wide = x.astype(np.float64)
    exact = (wide - wide.mean(-1, keepdims=True)) / np.sqrt(wide.var(-1, keepdims=True) + 1e-5)
    y = tensorforge.compile(model).run({"x": x})["y"]
    assert np.abs(y - exact).max() / np.abs(exact).max() < 2e-4  # float32 rounding of x itself


@pytest.mark.parametrize("stats", [False, True], ids=["y_only", "with_statistics"])
@pytest.mark.parametrize(("scale", "bias"), [((1, 4), (5, 1)), ((4,), None), ((), (1, 1))])
def test_scale_and_bias_broadcast_to_the_normalized_shape(stats, scale, bias) -> None:
    """ONNX lets Scale and B be any shape that broadcasts to the normalized shape ([5, 4] over
    the last two axes here), as the Mul and Add of its function body do."""
    rng = np.random.default_rng(3)
    outs = ["y", "mean", "inv"] if stats else ["y"]
    inits = [numpy_helper.from_array(rng.standard_normal(scale).astype(np.float32), "s")]
    if bias is not None:
        inits.append(numpy_helper.from_array(rng.standard_normal(bias).astype(np.float32), "b"))
    node = helper.make_node("LayerNormalization", ["x", "s", "b"][: len(inits) + 1], outs, axis=-2)
    graph = helper.make_graph(
        [node],
        "broadcast",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model).run({"x": x})
    for name, value in zip(outs, want, strict=True):
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5)

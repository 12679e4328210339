"""A fused group whose anchor (MatMul, Gemm, Conv) is followed in graph order by nodes that do
not read it (a bias computed from other runtime inputs: `MatMul(x, w) + (a + b)`, as unrolled
recurrent ops make): those nodes are computed inline as operands of the anchor's epilogue;
compiled code against onnxruntime, on the CPU and OpenCL."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge


def _model(anchor: str):
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    if anchor == "Conv":
        x_shape, w = (1, 3, 6, 6), rng.standard_normal((4, 3, 3, 3))
        bias_shape = (4, 1, 1)
        first = helper.make_node("Conv", ["x", "w"], ["m"], pads=[1, 1, 1, 1])
    else:
        x_shape, w, bias_shape = (3, 4), rng.standard_normal((4, 5)), (5,)
        first = helper.make_node(anchor, ["x", "w"], ["m"])
    nodes = [
        first,
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Sigmoid", ["s"], ["t"]),
        helper.make_node("Mul", ["m", "t"], ["u"]),
        helper.make_node("Add", ["u", "a"], ["y"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", f, x_shape),
        helper.make_tensor_value_info("a", f, bias_shape),
        helper.make_tensor_value_info("b", f, bias_shape),
    ]
    graph = helper.make_graph(
        nodes, anchor.lower(), inputs, [helper.make_tensor_value_info("y", f, None)],
        [numpy_helper.from_array(w.astype(np.float32), "w")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize("anchor", ["MatMul", "Gemm", "Conv"])
def test_operands_computed_after_the_anchor_match_onnxruntime(anchor, target) -> None:
    if target == "opencl":
        pytest.importorskip("pyopencl")
    model = _model(anchor)
    rng = np.random.default_rng(1)
    feeds = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
    }
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = tensorforge.compile(model, target=target, progress=False).run(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _residual(anchor: str, through: str | None):
    """`anchor(x) + x` (or of `through(x)`): the anchor reads x as a GEMM's 2-D matrix, the
    tail at x's own shape."""
    rng = np.random.default_rng(2)
    f = TensorProto.FLOAT
    if anchor == "Conv1x1":  # NCHW viewed as [C, H*W]
        x_shape, w = (1, 4, 3, 5), rng.standard_normal((4, 4, 1, 1))
        nodes = [helper.make_node("Conv", ["x", "w"], ["m"])]
    else:  # leading dims folded into rows
        x_shape, w = (2, 3, 4), rng.standard_normal((4, 4))
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"])]
    if through:
        nodes.append(helper.make_node(through, ["x"], ["r"]))
    nodes.append(helper.make_node("Add", ["m", "r" if through else "x"], ["y"]))
    graph = helper.make_graph(
        nodes, "residual", [helper.make_tensor_value_info("x", f, x_shape)],
        [helper.make_tensor_value_info("y", f, None)],
        [numpy_helper.from_array(w.astype(np.float32), "w")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
@pytest.mark.parametrize("through", [None, "Sigmoid"])
@pytest.mark.parametrize("anchor", ["MatMul", "Conv1x1"])
def test_the_anchors_own_operand_read_again_by_the_tail(anchor, through, target) -> None:
    """The same input bound once as the anchor's [rows, k] matrix and read again at its own
    shape by the epilogue (a residual around a linear layer) was refused: 'value must be read
    with one shape per kernel'."""
    if target == "opencl":
        pytest.importorskip("pyopencl")
    model = _residual(anchor, through)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model, target=target).run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

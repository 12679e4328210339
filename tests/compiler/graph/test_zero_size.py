"""Zero-size tensors: folded to constants at the graph level (no zero extent reaches a kernel),
yet accepted and produced by compiled modules, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph.passes import fold_constants
from tensorforge.compiler.graph.verify import verify_graph
from tensorforge.compiler.tir.stmt import LoweringError
from tensorforge.runtime.module import Module

RNG = np.random.default_rng(0)


def _const(name: str, values: list[int]):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _model():
    """x (empty) is reduced to zeros; an out-of-range Slice of y is empty, concatenated back
    onto y; the empty slice is an output too."""
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 0, 4]),
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
        helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4]),
    ]
    nodes = [
        helper.make_node("ReduceSum", ["x", "axes"], ["r"], keepdims=0),
        helper.make_node("Add", ["r", "z"], ["sum"]),
        helper.make_node("Slice", ["y", "starts", "ends", "sl_axes"], ["e"]),
        helper.make_node("Concat", ["e", "y", "e"], ["c"], axis=1),
        helper.make_node("Relu", ["c"], ["cat"]),
        helper.make_node("Exp", ["e"], ["empty"]),
    ]
    inits = [_const("axes", [1]), _const("starts", [5]), _const("ends", [9])]
    inits.append(_const("sl_axes", [1]))
    outputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("sum", "cat", "empty")
    ]
    graph = helper.make_graph(nodes, "zero_size", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def _feed() -> dict[str, np.ndarray]:
    return {
        "x": np.zeros((2, 0, 4), np.float32),
        "y": RNG.standard_normal((2, 3)).astype(np.float32),
        "z": RNG.standard_normal((2, 4)).astype(np.float32),
    }


def _check(got: dict[str, np.ndarray], want: list[np.ndarray]) -> None:
    for name, value in zip(("sum", "cat", "empty"), want, strict=True):
        assert got[name].shape == value.shape and got[name].dtype == value.dtype
        np.testing.assert_allclose(got[name], value, rtol=1e-6)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
def test_zero_size_tensors_match_onnxruntime(target: str, tmp_path) -> None:
    model, feed = _model(), _feed()
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    module = tensorforge.compile(model, target=target)
    _check(module.run(feed), want)
    module.save(tmp_path / "m.tfm")
    _check(Module.load(tmp_path / "m.tfm").run(feed), want)


def test_zero_size_values_fold_and_concat_drops_them() -> None:
    graph = fold_constants(from_onnx(_model()))
    verify_graph(graph)
    assert [n.op for n in graph.nodes] == ["Add", "Concat", "Relu"]
    concat = next(n for n in graph.nodes if n.op == "Concat")
    assert concat.inputs == ("y",)
    assert "x" in graph.inputs and "x" not in graph.constants
    assert graph.constants["empty"].shape == (2, 0)
    np.testing.assert_array_equal(graph.constants["r"], np.zeros((2, 4), np.float32))


def _split_model():
    """Split of y into pieces of 0, 2 and 1 rows: the empty piece is an output and feeds Relu."""
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    nodes = [
        helper.make_node("Split", ["y", "sizes"], ["a", "b", "c"], axis=0),
        helper.make_node("Relu", ["a"], ["ra"]),
        helper.make_node("Tanh", ["b"], ["tb"]),
    ]
    names = ("a", "ra", "tb", "c")
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names]
    graph = helper.make_graph(nodes, "split", [y], outputs, [_const("sizes", [0, 2, 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


@pytest.mark.parametrize("target", ["llvm", "opencl"])
def test_empty_outputs_of_a_computed_node_match_onnxruntime(target: str) -> None:
    model, feed = _split_model(), {"y": RNG.standard_normal((3, 4)).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    graph = fold_constants(from_onnx(model))
    verify_graph(graph)
    assert [n.outputs for n in graph.nodes if n.op == "Split"] == [("", "b", "c")]
    got = tensorforge.compile(model, target=target).run(feed)
    for out, value in zip(model.graph.output, want, strict=True):
        assert got[out.name].shape == value.shape
        np.testing.assert_allclose(got[out.name], value, rtol=1e-6)


def test_zero_size_operand_of_a_data_dependent_node_is_refused_by_name() -> None:
    inputs = [
        helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 0]),
        helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 3]),
    ]
    b = numpy_helper.from_array(np.zeros((0, 3), np.float32), "b")
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="gemm0")
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "g", inputs, [out], [b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    with pytest.raises(LoweringError, match=r"input '(a|b)' of node 'gemm0' \(Gemm\) must have"):
        tensorforge.compile(model)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd"])
def test_reduction_over_an_empty_axis_matches_onnxruntime(op: str) -> None:
    """An empty mean is 0 in onnxruntime (and torch's EmbeddingBag's empty bag), not NaN."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 3])
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)],
        "empty_reduce",
        [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [_const("axes", [0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    feed = {"x": np.zeros((0, 3), np.float32)}
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = tensorforge.compile(model).run(feed)["y"]
    np.testing.assert_array_equal(got, want)

"""An If whose condition is known at import (exporters' shape guards, folded on static shapes)
becomes its taken branch; one whose condition is computed at run time computes both branches
and selects with Where (checked with the condition true and false in one compiled module),
unless its branches differ in shape or give sequences, which is refused by name."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import UnsupportedOpError, from_onnx


def _branch(name: str, nodes: list, out: str, inits: tuple = ()) -> onnx.GraphProto:
    return oh.make_graph(
        nodes, name, [], [oh.make_tensor_value_info(out, TensorProto.FLOAT, None)], list(inits)
    )


def _model(channels: int, runtime_condition: bool = False) -> onnx.ModelProto:
    """y = If(x.shape[1] == 3): then Relu(x) * w (w a branch initializer; inside it a nested
    If(x.shape[0] == 1) adding 1 or 2), else Neg(x); both branches name a value `t`."""
    inner = oh.make_node(
        "If", ["is_one"], ["inner_out"],
        then_branch=_branch("one", [oh.make_node("Add", ["t", "c1"], ["o1"])], "o1",
                            [numpy_helper.from_array(np.float32(1.0), "c1")]),
        else_branch=_branch("many", [oh.make_node("Add", ["t", "c2"], ["o2"])], "o2",
                            [numpy_helper.from_array(np.float32(2.0), "c2")]),
    )  # fmt: skip
    then = _branch(
        "three",
        [oh.make_node("Relu", ["x"], ["r"]), oh.make_node("Mul", ["r", "w"], ["t"]), inner],
        "inner_out",
        [
            numpy_helper.from_array(
                np.array([0.5, 2.0, -1.0, 3.0], np.float32).reshape(1, 1, 4), "w"
            )
        ],
    )
    other = _branch("other", [oh.make_node("Neg", ["x"], ["t"])], "t")
    nodes = [
        oh.make_node("Shape", ["x"], ["shape"]),
        oh.make_node("Gather", ["shape", "one"], ["dim1"], axis=0),
        oh.make_node("Gather", ["shape", "zero"], ["dim0"], axis=0),
        oh.make_node("Equal", ["dim0", "one"], ["is_one"]),
        oh.make_node("Equal", ["dim1", "three"], ["is_three"]),
        oh.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
        oh.make_node("Greater", ["m", "zero_f"], ["positive"]),
        oh.make_node(
            "If", ["positive" if runtime_condition else "is_three"], ["y"],
            then_branch=then, else_branch=other, name="guard",
        ),
    ]  # fmt: skip
    inits = [
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(3, np.int64), "three"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero_f"),
    ]
    graph = oh.make_graph(
        nodes,
        "guarded",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, (2, channels, 4))],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("channels", [3, 5], ids=["then", "else"])
def test_an_if_on_static_shapes_becomes_its_taken_branch(channels: int) -> None:
    model = _model(channels)
    x = np.random.default_rng(0).standard_normal((2, channels, 4)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    graph = from_onnx(model)
    assert "If" not in {n.op for n in graph.nodes}
    (got,) = tensorforge.compile(model).run(x).values()
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_an_if_on_run_time_values_selects_its_branch_as_onnxruntime() -> None:
    """One compiled module, its condition true for one input and false for the other."""
    model = _model(3, runtime_condition=True)
    module = tensorforge.compile(model)
    session = ort.InferenceSession(model.SerializeToString())
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    for feed in (x, -np.abs(x)):  # max > 0: then; all negative: else
        (want,) = session.run(None, {"x": feed})
        (got,) = module.run({"x": feed}).values()
        np.testing.assert_allclose(got, want, rtol=1e-6)


def _torch_style(else_output: str = "sub") -> onnx.ModelProto:
    """`if x.sum() > 0: y = x * 2 else: y = x - 1` then Relu, as torch.jit.script exports it:
    a 0-d bool condition (Greater, Cast), branches reading the outer x, no declared shapes."""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    mul = oh.make_tensor_value_info("mul", TensorProto.FLOAT, None)
    then = oh.make_graph([oh.make_node("Mul", ["x", "two"], ["mul"])], "then", [], [mul], [two])
    other = oh.make_graph(
        [oh.make_node("Sub", ["x", "one"], ["sub"]), oh.make_node("ReduceSum", ["sub"], ["red"])],
        "else_branch", [], [oh.make_tensor_value_info(else_output, TensorProto.FLOAT, None)], [one],
    )  # fmt: skip
    nodes = [
        oh.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        oh.make_node("Greater", ["total", "zero"], ["gt"]),
        oh.make_node("Cast", ["gt"], ["cond"], to=TensorProto.BOOL),
        oh.make_node("If", ["cond"], ["picked"], then_branch=then, else_branch=other, name="if0"),
        oh.make_node("Relu", ["picked"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes, "scripted", [oh.make_tensor_value_info("x", TensorProto.FLOAT, (3, 5))],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(0.0, np.float32), "zero")],
    )  # fmt: skip
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def test_a_torch_scripted_if_on_the_sum_matches_onnxruntime_both_ways() -> None:
    model = _torch_style()
    module = tensorforge.compile(model)
    session = ort.InferenceSession(model.SerializeToString())
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    for feed in (np.abs(x), -np.abs(x)):
        (want,) = session.run(None, {"x": feed})
        np.testing.assert_allclose(module.run({"x": feed})["y"], want, rtol=1e-6)


def test_run_time_if_whose_branches_differ_in_shape_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedOpError, match=r"run time \(selecting needs output 'picked' "
                       r"of one shape and dtype in both branches, not float32 \[3, 5\] and "
                       r"float32 \[1, 1\]\) \(node 'if0'"):  # fmt: skip
        from_onnx(_torch_style(else_output="red"))


def test_run_time_if_whose_branches_give_sequences_is_refused_by_name() -> None:
    model = _torch_style()
    for branch in model.graph.node[3].attribute:
        made = oh.make_node("SequenceConstruct", [branch.g.output[0].name], ["seq"])
        branch.g.node.append(made)
        branch.g.output[0].CopyFrom(oh.make_tensor_sequence_value_info("seq", 1, None))
    with pytest.raises(UnsupportedOpError, match=r"tensor branches, not then_branch giving a "
                       r"sequence\) \(node 'if0'"):  # fmt: skip
        from_onnx(model)

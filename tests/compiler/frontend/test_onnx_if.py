"""An If whose condition is known at import (exporters' shape guards, folded on static shapes)
becomes its taken branch; one whose condition is computed at run time is refused by name."""

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


def test_an_if_on_run_time_values_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedOpError, match=r"If with a condition computed at run time"):
        from_onnx(_model(3, runtime_condition=True))

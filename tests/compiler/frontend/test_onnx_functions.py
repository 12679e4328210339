"""Model-local functions (what exporters emit for modules, e.g. torch's
export_modules_as_functions) are inlined at import, attributes and nesting included, and the
model computes what onnxruntime computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge

OPSETS = [oh.make_opsetid("", 17), oh.make_opsetid("local", 1)]


def _functions() -> list[onnx.FunctionProto]:
    # Act(a; alpha) = LeakyRelu(a, alpha) * Sigmoid(a): an attribute referenced from the caller
    leaky = oh.make_node("LeakyRelu", ["a"], ["l"])
    leaky.attribute.append(
        onnx.AttributeProto(name="alpha", ref_attr_name="alpha", type=onnx.AttributeProto.FLOAT)
    )
    act = oh.make_function(
        "local", "Act", ["a"], ["b"],
        [leaky, oh.make_node("Sigmoid", ["a"], ["s"]), oh.make_node("Mul", ["l", "s"], ["b"])],
        OPSETS, attributes=["alpha"],
    )  # fmt: skip
    # Block(x, w) = Act(MatMul(x, w); alpha=0.2): a function calling a function
    call = oh.make_node("Act", ["m"], ["y"], domain="local", alpha=0.2)
    block = oh.make_function(
        "local", "Block", ["x", "w"], ["y"], [oh.make_node("MatMul", ["x", "w"], ["m"]), call],
        OPSETS,
    )  # fmt: skip
    return [act, block]


def _model(hidden: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, hidden)).astype(np.float32)
    w2 = rng.standard_normal((hidden, 4)).astype(np.float32)
    nodes = [
        oh.make_node("Block", ["x", "w1"], ["h"], domain="local"),
        oh.make_node("Act", ["h"], ["g"], domain="local", alpha=0.05),
        oh.make_node("Block", ["g", "w2"], ["y"], domain="local"),
    ]
    graph = oh.make_graph(
        nodes,
        "functions",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, (3, 8))],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    return oh.make_model(graph, opset_imports=OPSETS, functions=_functions())


def _check(model: onnx.ModelProto, source: object) -> None:
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    (got,) = tensorforge.compile(source).run(x).values()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_local_functions_with_attributes_and_nesting_are_inlined() -> None:
    model = _model(16)
    _check(model, model)


def test_a_file_with_large_weights_and_functions(tmp_path: Path) -> None:
    model = _model(512)  # weights past the in-place reader's threshold
    path = tmp_path / "functions.onnx"
    onnx.save(model, path)
    _check(model, str(path))

"""SplitToSequence, SequenceMap, SequenceAt/Erase/Length and the optional ops resolved at
import (a sequence is a list of values, an optional the value it holds), compiled, against
onnxruntime; what only run time could decide is refused by name."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import UnsupportedOpError

F = TensorProto.FLOAT


def _model(nodes: list, inputs: list, outputs: list, inits: dict) -> onnx.ModelProto:
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info(n, F, s) for n, s in inputs],
        [oh.make_tensor_value_info(n, t, None) for n, t in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def _compare(model: onnx.ModelProto, feed: dict) -> None:
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = tensorforge.compile(model).run(feed)
    for value, expected in zip(model.graph.output, want, strict=True):
        np.testing.assert_allclose(got[value.name], expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("split", "attrs"),
    [(None, {"keepdims": 0}), (None, {}), (np.array(2, np.int64), {}),
     (np.array([1, 3, 1], np.int64), {"axis": -1})],
)  # fmt: skip
def test_split_to_sequence_then_map_and_concat(split: np.ndarray | None, attrs: dict) -> None:
    body = oh.make_graph(
        [oh.make_node("Mul", ["item", "w"], ["scaled"]), oh.make_node("Relu", ["scaled"], ["r"])],
        "body",
        [oh.make_tensor_value_info("item", F, None), oh.make_tensor_value_info("w", F, None)],
        [oh.make_tensor_value_info("r", F, None)],
    )
    inputs = ["x", "split"] if split is not None else ["x"]
    axis = attrs.get("axis", 0)
    nodes = [
        oh.make_node("SplitToSequence", inputs, ["seq"], **attrs),
        oh.make_node("SequenceMap", ["seq", "w"], ["mapped"], body=body),
        oh.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=axis, new_axis=0),
    ]
    inits = {"split": split} if split is not None else {}
    if attrs.get("keepdims") == 0:
        nodes[-1] = oh.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=0, new_axis=1)
    model = _model(nodes, [("x", (5, 4)), ("w", (1,))], [("y", F)], inits)
    if axis == -1:
        model = _model(nodes, [("x", (4, 5)), ("w", (1,))], [("y", F)], inits)
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((4, 5) if axis == -1 else (5, 4)).astype(np.float32),
            "w": np.array([1.5], np.float32)}  # fmt: skip
    _compare(model, feed)


def test_optionals_resolve_at_import() -> None:
    full = oh.make_tensor_type_proto(F, [3])
    nodes = [
        oh.make_node("Optional", ["x"], ["some"]),
        oh.make_node("Optional", [], ["none"], type=full),
        oh.make_node("OptionalHasElement", ["some"], ["has_some"]),
        oh.make_node("OptionalHasElement", ["none"], ["has_none"]),
        oh.make_node("OptionalGetElement", ["some"], ["got"]),
        oh.make_node("Neg", ["got"], ["y"]),
    ]
    outputs = [("y", F), ("has_some", TensorProto.BOOL), ("has_none", TensorProto.BOOL)]
    model = _model(nodes, [("x", (3,))], outputs, {})
    _compare(model, {"x": np.array([1.0, -2.0, 3.0], np.float32)})


def test_split_to_sequence_by_a_run_time_split_is_refused_by_name() -> None:
    nodes = [
        oh.make_node("SplitToSequence", ["x", "split"], ["seq"], name="chunks"),
        oh.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0),
    ]
    model = _model(nodes, [("x", (4,))], [("y", F)], {})
    model.graph.input.append(oh.make_tensor_value_info("split", TensorProto.INT64, (2,)))
    with pytest.raises(UnsupportedOpError, match=r"split computed at run time.*'chunks'"):
        tensorforge.compile(model)


def test_an_optional_model_output_is_refused_by_name() -> None:
    nodes = [oh.make_node("Optional", ["x"], ["y"])]
    model = _model(nodes, [("x", (3,))], [("y", F)], {})
    with pytest.raises(UnsupportedOpError, match=r"an optional as a model output"):
        tensorforge.compile(model)


I64 = TensorProto.INT64


@pytest.mark.parametrize("position", [0, 2, -1, -3])
def test_sequence_at_erase_and_length(position: int) -> None:
    """SequenceErase (at a constant position, and the last item by default), SequenceLength
    and SequenceAt at a constant position and at one the model reads as an input."""
    nodes = [
        oh.make_node("SplitToSequence", ["x"], ["seq"], axis=1, keepdims=0),
        oh.make_node("SequenceErase", ["seq", "one"], ["fewer"]),
        oh.make_node("SequenceErase", ["fewer"], ["fewest"]),
        oh.make_node("SequenceLength", ["fewest"], ["n"]),
        oh.make_node("SequenceAt", ["fewer", "at"], ["picked"]),
        oh.make_node("SequenceAt", ["seq", "where"], ["chosen"]),
        oh.make_node("Add", ["picked", "chosen"], ["y"]),
    ]
    inits = {"one": np.array(1, np.int64), "at": np.array(position, np.int64)}
    model = _model(nodes, [("x", (3, 5))], [("y", F), ("n", I64)], inits)
    model.graph.input.append(oh.make_tensor_value_info("where", I64, ()))
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    for where in (0, 3, -5):
        _compare(model, {"x": x, "where": np.array(where, np.int64)})


def test_sequence_at_a_run_time_position_over_unlike_items_is_refused_by_name() -> None:
    nodes = [
        oh.make_node("SequenceConstruct", ["x", "z"], ["seq"]),
        oh.make_node("SequenceAt", ["seq", "where"], ["y"], name="pick"),
    ]
    model = _model(nodes, [("x", (3,)), ("z", (4,))], [("y", F)], {})
    model.graph.input.append(oh.make_tensor_value_info("where", I64, ()))
    with pytest.raises(UnsupportedOpError, match=r"run-time position over items of .*'pick'"):
        tensorforge.compile(model)

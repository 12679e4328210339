"""A Scan is unrolled at import (its length is the scan inputs' static length): states threaded
from copy to copy, slices taken along any axis in either direction, scan outputs stacked along
any axis in either order, and opset 8's batched Scan; compiled, against onnxruntime. A body
with an unsupported op, mismatched lengths and opset 8's sequence_lens shorter than the
sequences are refused by name."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError, UnsupportedOpError

F = TensorProto.FLOAT


def _value(name: str, shape: list | None = None) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, F, shape)


def _body(extra_op: str = "Mul") -> onnx.GraphProto:
    """(s, p, a, b) -> (s + a, p * 0.9 + b, (s + a) * b, p - a): a [3] and b [3] slices."""
    nodes = [
        oh.make_node("Add", ["s", "a"], ["s2"]),
        oh.make_node(extra_op, ["p", "k"], ["pk"]),
        oh.make_node("Add", ["pk", "b"], ["p2"]),
        oh.make_node("Mul", ["s2", "b"], ["y1"]),
        oh.make_node("Sub", ["p", "a"], ["y2"]),
    ]
    k = oh.make_tensor("k", F, [], [0.9])
    return oh.make_graph(
        nodes,
        "body",
        [_value(n, [3]) for n in ("s", "p", "a", "b")],
        [_value(n, [3]) for n in ("s2", "p2", "y1", "y2")],
        [k],
    )


def _model(b_shape: list, opset: int = 16, body: onnx.GraphProto | None = None, **attrs):  # noqa: ANN003
    node = oh.make_node(
        "Scan",
        ["s0", "p0", "xa", "xb"],
        ["s", "p", "ys1", "ys2"],
        name="scan",
        body=body or _body(),
        num_scan_inputs=2,
        **attrs,
    )
    inputs = [_value("s0", [3]), _value("p0", [3]), _value("xa", [5, 3]), _value("xb", b_shape)]
    outputs = [_value(n) for n in ("s", "p", "ys1", "ys2")]
    graph = oh.make_graph([node], "g", inputs, outputs)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _feed(b_shape: list) -> dict:
    rng = np.random.default_rng(0)
    shapes = {"s0": [3], "p0": [3], "xa": [5, 3], "xb": b_shape}
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


@pytest.mark.parametrize(
    ("b_shape", "attrs"),
    [
        ([5, 3], {}),
        ([3, 5], {"scan_input_axes": [0, 1], "scan_input_directions": [1, 0]}),
        ([5, 3], {"scan_output_axes": [1, -2], "scan_output_directions": [1, 0]}),
    ],
)
def test_scan_matches_onnxruntime(b_shape: list, attrs: dict) -> None:
    model = _model(b_shape, **attrs)
    feed = _feed(b_shape)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = tensorforge.compile(model).run(feed)
    for name, expected in zip(["s", "p", "ys1", "ys2"], want, strict=True):
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6)


def test_scan_inputs_of_different_lengths_are_refused_by_name() -> None:
    with pytest.raises(OnnxImportError, match=r"Scan node 'scan'.*one length.*\[5, 4\]"):
        tensorforge.compile(_model([4, 3]))


def test_scan_body_with_an_unsupported_op_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedOpError, match=r"NoSuchOp"):
        tensorforge.compile(_model([5, 3], body=_body("NoSuchOp")))


def _batched_model(lengths: np.ndarray | None = None, **attrs) -> onnx.ModelProto:  # noqa: ANN003
    """Opset 8's Scan over a batch of 2: states [2, 3], scan inputs [2, 5, 3]; its body's
    Unsqueeze/Squeeze pair is opset 8's (axes an attribute), upgraded with the body."""
    body = _body()
    body.node.extend([oh.make_node("Unsqueeze", ["y2"], ["y2u"], axes=[0]),
                      oh.make_node("Squeeze", ["y2u"], ["y2s"], axes=[0])])  # fmt: skip
    body.output[3].name = "y2s"
    node = oh.make_node("Scan", ["" if lengths is None else "lens", "s0", "p0", "xa", "xb"],
                        ["s", "p", "ys1", "ys2"], name="old", body=body, num_scan_inputs=2,
                        **attrs)  # fmt: skip
    inputs = [_value("s0", [2, 3]), _value("p0", [2, 3]), _value("xa", [2, 5, 3]),
              _value("xb", [2, 5, 3])]  # fmt: skip
    inits = [] if lengths is None else [onnx.numpy_helper.from_array(lengths, "lens")]
    outputs = [_value(n) for n in ("s", "p", "ys1", "ys2")]
    graph = oh.make_graph([node], "g", inputs, outputs, inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 8)])


@pytest.mark.parametrize(
    ("lengths", "attrs"),
    [(None, {}), (None, {"directions": [1, 0]}), (np.array([5, 5], np.int64), {})],
)
def test_batched_scan_of_opset_8_matches_onnxruntime(lengths: np.ndarray | None, attrs: dict):
    model = _batched_model(lengths, **attrs)
    rng = np.random.default_rng(5)
    shapes = {"s0": (2, 3), "p0": (2, 3), "xa": (2, 5, 3), "xb": (2, 5, 3)}
    feed = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = tensorforge.compile(model).run(feed)
    for name, value in zip(("s", "p", "ys1", "ys2"), want, strict=True):
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)


def test_batched_scan_with_shorter_sequence_lens_is_refused_by_name() -> None:
    model = _batched_model(np.array([5, 3], np.int64))
    with pytest.raises(UnsupportedOpError, match=r"opset 8 with sequence_lens \[5, 3\].*'old'"):
        tensorforge.compile(model)

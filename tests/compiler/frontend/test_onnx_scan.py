"""A Scan is unrolled at import (its length is the scan inputs' static length): states threaded
from copy to copy, slices taken along any axis in either direction, scan outputs stacked along
any axis in either order; compiled, against onnxruntime. Opset 8's batched Scan, a body with an
unsupported op and mismatched lengths are refused by name."""

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


def test_batched_scan_of_opset_8_is_refused_by_name() -> None:
    node = oh.make_node("Scan", ["", "s0", "x"], ["s", "y"], name="old", body=_body(),
                        num_scan_inputs=1)  # fmt: skip
    graph = oh.make_graph([node], "g", [_value("s0", [1, 3]), _value("x", [1, 5, 3])],
                          [_value("s"), _value("y")])  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 8)])
    with pytest.raises(UnsupportedOpError, match=r"Scan as defined at opset 8.*'old'"):
        tensorforge.compile(model)

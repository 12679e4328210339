"""Dropout's mask output and training_mode: inference (and training with a ratio of 0) is the
identity with a mask of trues, compiled, against onnxruntime; training with a ratio above 0
and the random ops are refused by name, saying why."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import UnsupportedOpError, from_onnx

X = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)


def _model(inputs: list[str], consts: dict, extra_inputs=()):  # noqa: ANN001, ANN202
    nodes = [
        oh.make_node("Dropout", inputs, ["d", "mask"], name="drop"),
        oh.make_node("Relu", ["d"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, X.shape), *extra_inputs],
        [
            oh.make_tensor_value_info("y", TensorProto.FLOAT, None),
            oh.make_tensor_value_info("mask", TensorProto.BOOL, None),
        ],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


@pytest.mark.parametrize(
    ("inputs", "consts"),
    [
        (["x"], {}),
        (["x", "r"], {"r": np.array(0.3, np.float32)}),
        (["x", "r", "t"], {"r": np.array(0.3, np.float32), "t": np.array(False)}),
        (["x", "r", "t"], {"r": np.array(0.0, np.float32), "t": np.array(True)}),
    ],
)
def test_dropout_and_its_mask_match_onnxruntime(inputs: list[str], consts: dict) -> None:
    model = _model(inputs, consts)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": X})
    got = tensorforge.compile(model).run({"x": X})
    np.testing.assert_array_equal(got["y"], want[0])
    assert got["mask"].dtype == want[1].dtype == np.bool_
    np.testing.assert_array_equal(got["mask"], want[1])


def test_training_dropout_with_a_ratio_is_refused_as_random() -> None:
    model = _model(["x", "r", "t"], {"r": np.array(0.5, np.float32), "t": np.array(True)})
    with pytest.raises(UnsupportedOpError, match=r"ratio 0.5 \(a random draw.*node 'drop'"):
        from_onnx(model)


def test_training_dropout_default_ratio_is_refused_as_random() -> None:
    model = _model(["x", "", "t"], {"t": np.array(True)})
    with pytest.raises(UnsupportedOpError, match=r"ratio 0.5 \(a random draw.*node 'drop'"):
        from_onnx(model)


def test_training_mode_computed_at_run_time_is_refused_by_name() -> None:
    flag = oh.make_tensor_value_info("t", TensorProto.BOOL, [])
    model = _model(["x", "", "t"], {}, [flag])
    with pytest.raises(UnsupportedOpError, match=r"training_mode computed at run time.*'drop'"):
        from_onnx(model)


def test_bernoulli_is_refused_as_random() -> None:
    node = oh.make_node("Bernoulli", ["x"], ["y"], name="coin")
    graph = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 15)])
    with pytest.raises(UnsupportedOpError, match=r"Bernoulli \(a random draw.*'coin'"):
        from_onnx(model)

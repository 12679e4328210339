"""Modules with bfloat16, float8 and int4 inputs, outputs and constants: `run` takes and returns
ml_dtypes arrays, refuses other dtypes by name, and save/load keeps the types."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper

import tensorforge
from tensorforge.runtime.module import Module

SCALE = np.array([0.5, 0.25, 2.0], np.float32)
ZERO = np.array([-8, 3, 7], np.int8).astype(ml_dtypes.int4)  # a constant the kernel reads as int4


def _model():
    w = np.linspace(-2, 2, 6, dtype=np.float32).astype(ml_dtypes.bfloat16)
    nodes = [
        oh.make_node("Mul", ["x", "w"], ["y"]),
        oh.make_node("Cast", ["y"], ["y8"], to=T.FLOAT8E4M3FN),
        oh.make_node("Cast", ["q"], ["qi"], to=T.INT4),
        oh.make_node("Transpose", ["qi"], ["z"], perm=[1, 0]),
        oh.make_node("DequantizeLinear", ["qi", "s", "zp"], ["dq"], axis=1),
    ]
    graph = oh.make_graph(
        nodes,
        "narrow",
        [oh.make_tensor_value_info("x", T.BFLOAT16, (6,)),
         oh.make_tensor_value_info("q", T.INT8, (2, 3))],
        [oh.make_tensor_value_info("y", T.BFLOAT16, (6,)),
         oh.make_tensor_value_info("y8", T.FLOAT8E4M3FN, (6,)),
         oh.make_tensor_value_info("z", T.INT4, (3, 2)),
         oh.make_tensor_value_info("dq", T.FLOAT, (2, 3))],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(SCALE, "s"),
         numpy_helper.from_array(ZERO, "zp")],
    )  # fmt: skip
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 23)]), w


def _expected(x: np.ndarray, q: np.ndarray, w: np.ndarray) -> dict:
    y = (x.astype(np.float32) * w.astype(np.float32)).astype(ml_dtypes.bfloat16)
    z = q.astype(ml_dtypes.int4).T.copy()
    dq = (q.astype(ml_dtypes.int4).astype(np.int32) - ZERO.astype(np.int32)).astype(
        np.float32
    ) * SCALE
    return {"y": y, "y8": y.astype(np.float32).astype(ml_dtypes.float8_e4m3fn), "z": z, "dq": dq}


def _check(out: dict, want: dict) -> None:
    for name, value in want.items():
        assert out[name].dtype == value.dtype, name
        np.testing.assert_array_equal(out[name].view(np.uint8), value.view(np.uint8))


def test_run_takes_and_returns_ml_dtypes_arrays_and_save_load_keeps_them(tmp_path) -> None:
    model, w = _model()
    module = tensorforge.compile(model, progress=False)
    x = np.array([1.5, -2.25, 3.1, 0.0, -7.7, 9.9], np.float32).astype(ml_dtypes.bfloat16)
    q = np.array([[7, -8, 5], [100, -100, 0]], np.int8)
    want = _expected(x, q, w)
    _check(module.run({"x": x, "q": q}), want)
    path = tmp_path / "narrow.tfm"
    module.save(path)
    loaded = Module.load(path)
    assert loaded.tensors["x"].dtype == "bfloat16" and loaded.tensors["z"].dtype == "int4"
    assert loaded.constants["zp"].dtype == ml_dtypes.int4
    _check(loaded.run({"x": x, "q": q}), want)


def test_run_refuses_another_dtype_for_a_narrow_input() -> None:
    model, _ = _model()
    module = tensorforge.compile(model, progress=False)
    x32 = np.zeros(6, np.float32)
    with pytest.raises(ValueError, match=r"input 'x' must be bfloat16\[6\], not float32\[6\]"):
        module.run({"x": x32, "q": np.zeros((2, 3), np.int8)})

"""Float to 8- and 16-bit integer casts of out-of-range values, NaN and infinities (undefined in
ONNX) behave as onnxruntime's and numpy's on x86, in vector code and in the scalar tail alike:
through int32, so they wrap and NaN becomes 0 (LLVM's vector code saturated, its scalar code
wrapped)."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph import run_graph

VALUES = np.array(
    [np.nan, np.inf, -np.inf, 1e20, -1e20, 300.7, -200.2, 2.5, 70000.2, -70000.5, 65535.9, -3.0],
    np.float32,
)


@pytest.mark.parametrize(
    "to", [TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16]
)
def test_out_of_range_casts_wrap_as_onnxruntime_and_numpy(to: int) -> None:
    node = oh.make_node("Cast", ["x"], ["y"], to=to)
    graph = oh.make_graph(
        [node],
        "cast",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, (37,))],
        [oh.make_tensor_value_info("y", to, None)],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    x = np.resize(VALUES, 37)  # 32 lanes of vector code and a scalar tail of 5
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    (got,) = tensorforge.compile(model).run(x).values()
    np.testing.assert_array_equal(got, want)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "invalid value in cast"
        (ref,) = run_graph(from_onnx(model), {"x": x}).values()
    np.testing.assert_array_equal(got, ref)

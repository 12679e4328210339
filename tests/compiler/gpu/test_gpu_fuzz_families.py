"""One regression per defect family the differential fuzzer found on the GPU back-end
(`benchmarks/op_fuzz.py --target opencl`), each run on OpenCL (PoCL on this CPU) against
onnxruntime; their CUDA C compiled by NVRTC (skipped without the wheel) and run where a CUDA
device exists (`gpu`)."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.runtime.device.gpu import GPUError, open_device
from tensorforge.runtime.device.gpu.nvrtc import available as nvrtc_available

F32 = TensorProto.FLOAT
# tanh saturates to +-1 from |x| = 9.02 on: a tanh-GELU of -inf is NaN (-inf * 0), of -1e6 -0
EXTREMES = np.array([-np.inf, -1e6, -30.0, -9.5, -9.0, -1.0, 0.0, 2.5, 9.5, 1e6, np.inf], "f4")


def _model(node, x_shape, inits=(), opset=20):
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", F32, x_shape)],
        [helper.make_tensor_value_info("y", F32, None)],
        [numpy_helper.from_array(v, n) for n, v in inits],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _one_tap_conv(op: str, x_shape: list[int]):
    """A convolution (or LpPool, lowered to one) whose weights hold a single element: the
    1-D case views them as 2-D, beside the weights as they lie."""
    if op == "LpPool":
        node = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[1], p=1, strides=[3])
        return _model(node, x_shape)
    w = np.full([1, 1] + [1] * (len(x_shape) - 2), 0.5, np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[3] * (len(x_shape) - 2))
    return _model(node, x_shape, [("w", w)])


CASES = {
    "gelu_tanh": lambda: _model(helper.make_node("Gelu", ["x"], ["y"], approximate="tanh"), [11]),
    "tanh": lambda: _model(helper.make_node("Tanh", ["x"], ["y"]), [11]),
    "lppool_1d_one_tap": lambda: _one_tap_conv("LpPool", [1, 1, 17]),
    "conv_1d_one_weight": lambda: _one_tap_conv("Conv", [1, 1, 17]),
    "conv_2d_one_weight": lambda: _one_tap_conv("Conv", [1, 1, 9, 9]),
}


def _feed(model):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    if shape == [11]:
        return {"x": EXTREMES}
    return {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


def _check(model, got):
    want = ort.InferenceSession(model.SerializeToString()).run(None, _feed(model))[0]
    np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("name", CASES)
def test_fuzz_family_on_opencl_matches_onnxruntime(name: str) -> None:
    model = CASES[name]()
    _check(model, tensorforge.compile(model, target="opencl").run(_feed(model)))


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (nvidia-cuda-nvrtc-cu12) not installed")
@pytest.mark.parametrize("name", CASES)
def test_fuzz_family_compiles_for_cuda(name: str) -> None:
    module = tensorforge.compile(CASES[name](), target="cuda -arch=sm_80")
    for image in module.kernels:
        payload = json.loads(image.payload)
        assert all(f".visible .entry {k['name']}(" in payload["ptx"] for k in payload["kernels"])


@pytest.mark.gpu
@pytest.mark.parametrize("name", CASES)
def test_fuzz_family_on_cuda_matches_onnxruntime(name: str) -> None:
    try:
        open_device("cuda")
    except GPUError as e:
        pytest.skip(f"no CUDA device: {e}")
    model = CASES[name]()
    module = tensorforge.compile(model, target="cuda")
    _check(model, module.run(_feed(model)))

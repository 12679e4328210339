"""Whole models at the GPU back-end's edges (launch limits, tuned configs, odd shapes and
dtypes), on OpenCL (PoCL on this CPU) against onnxruntime, and their CUDA C through NVRTC
(skipped without the wheel)."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge

RNG = np.random.default_rng(0)
F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(v, n) for n, v in inits],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, target="opencl", rtol=1e-4, atol=1e-5):
    module = tensorforge.compile(model, target=target)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for got, ref in zip(module.run(feeds).values(), want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)
    return module


def _many_blocks_models():
    """Ops whose templates bind more than 65535 blocks to the grid's z axis."""
    w = RNG.standard_normal((70000, 1, 3, 3)).astype(np.float32)
    return {
        "batch_matmul": _model([helper.make_node("MatMul", ["x", "b"], ["y"])],
                               [("x", F32, [70000, 2, 3]), ("b", F32, [70000, 3, 2])],
                               [("y", F32, [70000, 2, 2])]),
        "depthwise": _model([helper.make_node("Conv", ["x", "w"], ["y"], group=70000,
                                              pads=[1, 1, 1, 1])],
                            [("x", F32, [1, 70000, 3, 3])], [("y", F32, [1, 70000, 3, 3])],
                            [("w", w)]),
    }  # fmt: skip


def _feeds(model):
    shapes = {
        i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input
    }
    return {n: RNG.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


@pytest.mark.parametrize("name", ["batch_matmul", "depthwise"])
def test_grids_past_the_z_limit_fold_into_x(name: str) -> None:
    model = _many_blocks_models()[name]
    module = _check(model, _feeds(model))
    (kernel,) = json.loads(module.kernels[0].payload)["kernels"]
    assert kernel["grid"][2] <= 65535 and kernel["grid"][0] >= 2


def test_folded_grids_compile_with_nvrtc() -> None:
    pytest.importorskip("nvidia.cuda_nvrtc")
    module = tensorforge.compile(_many_blocks_models()["depthwise"], target="cuda -arch=sm_80")
    payload = json.loads(module.kernels[0].payload)
    assert "block_fold" in payload["source"] and ".target sm_80" in payload["ptx"]


@pytest.mark.parametrize("target", ["opencl", "llvm"])
@pytest.mark.parametrize("n", [10, 100])  # 100: the row template (`gpu.row_reduce`)
def test_max_and_min_of_infinite_rows_are_infinite(n: int, target: str) -> None:
    """A max-reduction's identity is -inf, not the lowest finite float (TVM's): a row of -inf
    (a fully masked attention row) has max -inf (a max pool's padding stays the lowest finite
    value: onnxruntime's)."""
    x = np.full((3, n), -np.inf, np.float32)
    x[1] = RNG.standard_normal(n)
    nodes = [helper.make_node("ReduceMax", ["x"], ["hi"], axes=[1], keepdims=0),
             helper.make_node("Neg", ["x"], ["nx"]),
             helper.make_node("ReduceMin", ["nx"], ["lo"], axes=[1], keepdims=0),
             helper.make_node("Unsqueeze", ["x", "ax"], ["x4"]),
             helper.make_node("MaxPool", ["x4"], ["pool"], kernel_shape=[1, 3],
                              pads=[0, 1, 0, 1])]  # fmt: skip
    outs = [("hi", F32, [3]), ("lo", F32, [3]), ("pool", F32, [1, 1, 3, n])]
    model = _model(nodes, [("x", F32, [3, n])], outs, [("ax", np.array([0, 1], np.int64))])
    _check(model, {"x": x}, target)

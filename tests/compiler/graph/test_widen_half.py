"""float16 models: convolutions, products and reductions accumulate in float32 (widen_half), so
compiled results stay within float16's rounding of the exact (float64) answer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.autotune.templates import conv2d_numpy
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph.passes import widen_half
from tensorforge.compiler.graph.passes.widen_half import ACCUMULATING

RNG = np.random.default_rng(0)
#: float16 keeps 11 significant bits: a result rounded once is within 2^-11 of its magnitude
HALF_ROUNDING = 2.0**-11


def _model(node: onnx.NodeProto, shape: tuple[int, ...], consts: dict) -> onnx.ModelProto:
    graph = oh.make_graph(
        [node],
        "half",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT16, shape)],
        [oh.make_tensor_value_info(out, TensorProto.UNDEFINED, None) for out in node.output],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layer_norm(x: np.ndarray) -> np.ndarray:
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)


W = RNG.uniform(-1, 1, (2048, 8)).astype(np.float16)
K = RNG.uniform(-1, 1, (8, 256, 3, 3)).astype(np.float16)
CASES = {
    "MatMul": (oh.make_node("MatMul", ["x", "w"], ["y"]), (4, 2048), {"w": W},
               lambda x: x @ W.astype(np.float64)),
    "Conv": (oh.make_node("Conv", ["x", "k"], ["y"], pads=[1, 1, 1, 1]), (1, 256, 6, 6), {"k": K},
             lambda x: conv2d_numpy(x, K.astype(np.float64), 1, 1, 1)),
    "ReduceSum": (oh.make_node("ReduceSum", ["x", "axes"], ["y"]), (4, 4096),
                  {"axes": np.array([1], np.int64)}, lambda x: x.sum(1, keepdims=True)),
    "Softmax": (oh.make_node("Softmax", ["x"], ["y"], axis=-1), (4, 4096), {}, _softmax),
    "LayerNormalization": (
        oh.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv_std"], axis=-1),
        (4, 4096), {"s": np.ones(4096, np.float16), "b": np.zeros(4096, np.float16)},
        _layer_norm,
    ),
}  # fmt: skip


@pytest.mark.parametrize("op", sorted(CASES))
def test_float16_accumulates_in_float32(op: str) -> None:
    node, shape, consts, exact = CASES[op]
    model = _model(node, shape, consts)
    x = RNG.uniform(0.5, 1.5, shape).astype(np.float16)  # one-signed: float16 sums drift most
    module = tensorforge.compile(model)
    out = module.run({"x": x})
    y = out["y"]
    assert y.dtype == np.float16
    want = exact(x.astype(np.float64))
    error = np.abs(y.astype(np.float64) - want).max() / np.abs(want).max()
    assert error <= 2 * HALF_ROUNDING, f"{op}: error {error:.2e}"
    if op == "LayerNormalization":  # its statistics are float32 (stash_type) and exact too
        mean = x.astype(np.float64).mean(-1, keepdims=True)
        np.testing.assert_allclose(out["mean"], mean, rtol=1e-6)
        assert out["inv_std"].dtype == np.float32


def test_widened_ops_read_float32_and_constants_are_converted_once() -> None:
    node, shape, consts, _ = CASES["MatMul"]
    graph = from_onnx(_model(node, shape, consts))
    wide = widen_half(graph)
    (matmul,) = [n for n in wide.nodes if n.op == "MatMul"]
    assert [wide.types[i].dtype for i in matmul.inputs] == ["float32", "float32"]
    assert wide.constants["w"].dtype == np.float32  # read only by the MatMul: no Cast kernel
    np.testing.assert_array_equal(wide.constants["w"], W.astype(np.float32))
    assert [n.op for n in wide.nodes] == ["Cast", "MatMul", "Cast"]
    assert wide.types[wide.outputs[0]].dtype == "float16"
    assert widen_half(wide) is wide  # nothing left to widen
    for n in wide.nodes:
        assert n.op not in ACCUMULATING or all(
            wide.types[i].dtype != "float16" for i in n.inputs if i
        )


def test_float32_graphs_are_left_alone() -> None:
    node = oh.make_node("MatMul", ["x", "w"], ["y"])
    graph = oh.make_graph(
        [node],
        "f32",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, (2, 4))],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3))],
        [numpy_helper.from_array(np.ones((4, 3), np.float32), "w")],
    )
    g = from_onnx(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))
    assert widen_half(g) is g


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_batch_norm_applies_its_channel_factor_before_scaling_by_the_variance(dtype) -> None:  # noqa: ANN001
    """A zero scale zeroes a channel however far its input is from the mean: the factor
    scale / sqrt(var + epsilon) is taken first, as onnxruntime and the reference do. Scaling
    x - mean by 1 / sqrt(0.01) first overflowed float16 at x = -1e4 (inf * 0: NaN)."""
    big = 1e4 if dtype == np.float16 else 1e38
    x = np.array([[1.5], [-big]], dtype)
    consts = {name: np.array([v], dtype) for name, v in
              (("s", 0.0), ("b", 1.666), ("m", 0.0), ("v", 0.0))}  # fmt: skip
    node = oh.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=0.01)
    model = _model(node, x.shape, consts)
    model.graph.input[0].type.tensor_type.elem_type = oh.np_dtype_to_tensor_dtype(np.dtype(dtype))
    got = tensorforge.compile(model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, np.full_like(x, dtype(1.666)))

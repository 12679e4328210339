"""Models quantized by onnxruntime's dynamic quantizer (DynamicQuantizeLinear, MatMulInteger,
ConvInteger) compile to native code and compute the exact integer sums ONNX defines (onnx's
reference evaluator), as onnxruntime does where its kernels are exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

import tensorforge
from tensorforge.compiler.frontend.onnx_builders import mlp, small_cnn
from tensorforge.compiler.graph.ops.quant import dynamic_quantize_linear

quantization = pytest.importorskip("onnxruntime.quantization")
RNG = np.random.default_rng(0)


def _quantized(model: onnx.ModelProto, tmp_path: Path, **kw: object) -> onnx.ModelProto:
    src, dst = tmp_path / "float.onnx", tmp_path / "dynamic.onnx"
    onnx.save(model, src)
    quantization.quantize_dynamic(src, dst, weight_type=quantization.QuantType.QInt8, **kw)
    return onnx.load(dst)


def _ort(model: onnx.ModelProto, feed: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString()).run(None, feed)


@pytest.mark.parametrize("builder,shape", [(mlp, (2, 64)), (small_cnn, (1, 3, 32, 32))])
@pytest.mark.parametrize("per_channel", [False, True])
def test_dynamically_quantized_models_match_onnxruntime(
    builder, shape, per_channel: bool, tmp_path: Path
) -> None:  # noqa: ANN001
    model = _quantized(builder(), tmp_path, per_channel=per_channel)
    ops = {n.op_type for n in model.graph.node}
    assert "DynamicQuantizeLinear" in ops and ops & {"MatMulInteger", "ConvInteger"}
    x = RNG.standard_normal(shape).astype(np.float32)
    (got,) = tensorforge.compile(model).run({"x": x}).values()
    # the same integer sums and scales; float32 rescaling may round differently in the last bit
    (exact,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-6 * np.abs(exact).max())
    if not per_channel:
        # onnxruntime agrees here; with per-channel weights (full int8 range) its u8 x s8
        # kernels on CPUs without VNNI (AVX2) add pairs of products in saturating int16
        # (vpmaddubsw) and drift up to 10% from the exact sums (seen on an AMD EPYC, 11-25)
        (want,) = _ort(model, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())


def _dql_model(shape: tuple[int, ...]) -> onnx.ModelProto:
    node = oh.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero"])
    graph = oh.make_graph(
        [node],
        "dql",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [
            oh.make_tensor_value_info("y", TensorProto.UINT8, shape),
            oh.make_tensor_value_info("scale", TensorProto.FLOAT, ()),
            oh.make_tensor_value_info("zero", TensorProto.UINT8, ()),
        ],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "x",
    [
        RNG.standard_normal((3, 50)).astype(np.float32),
        RNG.uniform(0.5, 3, (40,)).astype(np.float32),  # all positive: min clamps to 0
        -RNG.uniform(0.5, 3, (4, 5)).astype(np.float32),  # all negative: max clamps to 0
    ],
)
def test_dynamic_quantize_linear_is_onnxruntimes(x: np.ndarray) -> None:
    model = _dql_model(x.shape)
    got = tensorforge.compile(model).run({"x": x})
    want = _ort(model, {"x": x})
    for name, w in zip(("y", "scale", "zero"), want, strict=True):
        np.testing.assert_array_equal(got[name], w, err_msg=name)
    ref = dynamic_quantize_linear({}, x)  # the numpy definition agrees too
    for r, w in zip(ref, want, strict=True):
        np.testing.assert_array_equal(r, w)


def test_conv_integer_per_channel_weight_zero_points_and_groups() -> None:
    x = RNG.integers(0, 255, (1, 4, 6, 6)).astype(np.uint8)
    w = RNG.integers(-128, 127, (6, 2, 3, 3)).astype(np.int8)
    w_zero = RNG.integers(-5, 5, (6,)).astype(np.int8)
    node = oh.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], group=2, pads=[1, 1, 1, 1])
    graph = oh.make_graph(
        [node],
        "ci",
        [oh.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
        [oh.make_tensor_value_info("y", TensorProto.INT32, None)],
        [
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(np.array(7, np.uint8), "xz"),
            numpy_helper.from_array(w_zero, "wz"),
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    (got,) = tensorforge.compile(model).run({"x": x}).values()
    # oracle: the float64 convolution of the centered integers, per group, in numpy
    xc = np.pad(x.astype(np.int64) - 7, ((0, 0), (0, 0), (1, 1), (1, 1)))
    wc = w.astype(np.int64) - w_zero.reshape(-1, 1, 1, 1)
    want = np.zeros((1, 6, 6, 6), np.int64)
    for k in range(6):
        g = k // 3
        for i in range(6):
            for j in range(6):
                want[0, k, i, j] = (xc[0, 2 * g : 2 * g + 2, i : i + 3, j : j + 3] * wc[k]).sum()
    np.testing.assert_array_equal(got, want.astype(np.int32))

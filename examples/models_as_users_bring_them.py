"""Models as users bring them, compiled for this CPU and checked against onnxruntime:
- a small CNN quantized by onnxruntime's dynamic quantizer (DynamicQuantizeLinear, ConvInteger,
  MatMulInteger), and by its static quantizer in the QOperator format (QLinearConv and the
  com.microsoft QLinearAdd/QLinearAveragePool/QLinearGlobalAveragePool/QGemm it writes);
- the same CNN in float16 (its convolutions and products accumulate in float32);
- an opset-9 model with an old Upsample (upgraded to opset 13 at import, its coordinate rule
  kept);
- an opset-7 file of the model zoo's kind (IR 3, tiny-YOLOv2's ImageScaler first);
- integer bit manipulation (BitwiseXor, then BitShift by amounts up to past the width);
and run with one array for a one-input model (`module.run(x)`)."""

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)

import tensorforge
from tensorforge.compiler.frontend.onnx_builders import small_cnn


def check(name: str, model: onnx.ModelProto, x: np.ndarray, rtol: float, exact=False) -> None:
    """`exact`: compare with onnx's reference evaluator (exact integer sums), since onnxruntime's
    int8 kernels on CPUs without VNNI (AVX2) saturate int16 pair sums; else with onnxruntime."""
    if exact:
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    else:
        (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    (got,) = tensorforge.compile(model).run(x).values()  # one array for the one input
    err = np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()
    oracle = "onnx's reference" if exact else "onnxruntime"
    print(f"{name:28s} {got.dtype}{list(got.shape)}  relative error vs {oracle} {err:.1e}")
    assert err < rtol, err


x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
float_model = small_cnn()

with tempfile.TemporaryDirectory() as tmp:  # onnxruntime's dynamic quantizer works on files
    src, dst = Path(tmp) / "cnn.onnx", Path(tmp) / "cnn_int8.onnx"
    onnx.save(float_model, src)
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
    check("dynamically quantized CNN", onnx.load(dst), x, 1e-5, exact=True)

    class Calibration(CalibrationDataReader):  # four random batches
        def __init__(self) -> None:
            rng = np.random.default_rng(1)
            self.left = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(4)]

        def get_next(self) -> dict | None:
            return {"x": self.left.pop()} if self.left else None

    static = Path(tmp) / "cnn_qop.onnx"
    quantize_static(src, static, Calibration(), quant_format=QuantFormat.QOperator)
    # a few quantization steps: onnxruntime's int8 sums saturate on CPUs without VNNI
    check("statically quantized CNN", onnx.load(static), x, 5e-2)

half = onnx.load_from_string(float_model.SerializeToString())
for t in half.graph.initializer:
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
for v in [*half.graph.input, *half.graph.output, *half.graph.value_info]:
    v.type.tensor_type.elem_type = TensorProto.FLOAT16
check("float16 CNN", half, x.astype(np.float16), 5e-3)

up = helper.make_node("Upsample", ["x", "scales"], ["y"], mode="linear")
graph = helper.make_graph(
    [up],
    "old",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 8, 8))],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    [numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "scales")],
)
old = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=4)
check("opset-9 bilinear Upsample", old, x[:, :, :8, :8].copy(), 1e-6)

scaler = helper.make_node("ImageScaler", ["x"], ["s"], scale=0.5, bias=[0.1, -0.2, 0.3])
conv = helper.make_node("Conv", ["s", "w"], ["y"], pads=[1, 1, 1, 1])
graph = helper.make_graph(
    [scaler, conv],
    "zoo",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 32, 32))],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    [numpy_helper.from_array(np.full((4, 3, 3, 3), 0.1, np.float32), "w")],
)
zoo = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=3)
check("opset-7 IR-3 ImageScaler+Conv", zoo, x, 1e-5)

xor = helper.make_node("BitwiseXor", ["x", "key"], ["t"])
shift = helper.make_node("BitShift", ["t", "amount"], ["y"], direction="RIGHT")
graph = helper.make_graph(
    [xor, shift],
    "bits",
    [helper.make_tensor_value_info("x", TensorProto.UINT32, (4, 8))],
    [helper.make_tensor_value_info("y", TensorProto.UINT32, None)],
    [
        numpy_helper.from_array(np.array([0x5A5A5A5A], np.uint32), "key"),
        numpy_helper.from_array(np.arange(0, 40, 5, dtype=np.uint32), "amount"),  # 35: past 32
    ],
)
bits = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
words = np.random.default_rng(1).integers(0, 2**32, (4, 8), dtype=np.uint32)
check("BitwiseXor + BitShift (uint32)", bits, words, 1e-12)

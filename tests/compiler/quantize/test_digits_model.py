"""The shipped digits CNN: float accuracy under onnxruntime, and int8 accuracy of its quantized
execution with compiler.quantize (pure numpy: observers, scales, requant steps, int8 reference)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from tensorforge.compiler.quantize import (
    AbsMaxObserver,
    EntropyObserver,
    PercentileObserver,
    RequantParams,
    choose_scale,
    conv2d_int8,
    conv2d_nchw,
    dense_int8,
    max_pool2d_int8,
    quantize,
    quantize_bias,
    quantize_weight,
    requant_params,
)
from tensorforge.hw.config import HWConfig

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tensorforge" / "data"
MODEL = DATA / "digits_cnn.onnx"
SPLIT = DATA / "digits_test.npz"
DOC = ROOT / "docs" / "quantization.md"


@pytest.fixture(scope="module")
def split() -> dict[str, np.ndarray]:
    with np.load(SPLIT) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return onnx.load(str(MODEL))


@pytest.fixture(scope="module")
def float_logits(split: dict[str, np.ndarray]) -> np.ndarray:
    sess = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": split["images"]})[0]


def _recorded_float_accuracy() -> float:
    match = re.search(r"float test accuracy: ([0-9.]+)", DOC.read_text())
    assert match, f"{DOC} must record the line 'float test accuracy: <value>'"
    return float(match.group(1))


def _accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(logits, axis=1) == labels))


def test_shipped_files_are_small_and_well_formed(split: dict[str, np.ndarray]) -> None:
    assert MODEL.stat().st_size + SPLIT.stat().st_size < 200_000
    images, labels, calib = split["images"], split["labels"], split["calib_images"]
    assert images.dtype == np.float32 and images.shape[1:] == (1, 8, 8)
    assert labels.dtype == np.int64 and labels.shape == (len(images),)
    assert calib.dtype == np.float32 and calib.shape[1:] == (1, 8, 8) and len(calib) >= 64
    assert images.min() >= 0 and images.max() <= 1
    assert set(np.unique(labels)) == set(range(10))


def test_onnx_model_loads_and_reaches_recorded_accuracy(
    model: onnx.ModelProto, float_logits: np.ndarray, split: dict[str, np.ndarray]
) -> None:
    onnx.checker.check_model(model)
    assert model.ir_version == 8
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17]
    acc = _accuracy(float_logits, split["labels"])
    assert acc == pytest.approx(_recorded_float_accuracy(), abs=5e-5)
    assert acc > 0.9


# ---- a sequential reading of the ONNX graph (this model is a chain) ------------------------


@dataclass
class Layer:
    kind: str  # conv, pool, flatten, dense
    weight: np.ndarray | None = None
    bias: np.ndarray | None = None
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    kernel: tuple[int, int] = (1, 1)
    relu: bool = False


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def read_layers(model: onnx.ModelProto) -> list[Layer]:
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    layers: list[Layer] = []
    for node in model.graph.node:
        a = _attrs(node)
        if node.op_type == "Conv":
            pads = a.get("pads", [0, 0, 0, 0])
            assert pads[:2] == pads[2:], "symmetric padding only"
            layers.append(
                Layer("conv", weights[node.input[1]], weights[node.input[2]],
                      tuple(a.get("strides", [1, 1])), tuple(pads[:2]))
            )  # fmt: skip
        elif node.op_type == "Relu":
            layers[-1].relu = True
        elif node.op_type == "MaxPool":
            layers.append(
                Layer("pool", kernel=tuple(a["kernel_shape"]), stride=tuple(a["strides"]))
            )
        elif node.op_type == "Flatten":
            layers.append(Layer("flatten"))
        elif node.op_type == "Gemm":
            assert a.get("transB") == 1
            layers.append(Layer("dense", weights[node.input[1]], weights[node.input[2]]))
        else:
            raise AssertionError(f"unexpected op {node.op_type}")
    return layers


def float_forward(layers: list[Layer], x: np.ndarray, record: list[np.ndarray]) -> np.ndarray:
    for layer in layers:
        if layer.kind == "conv":
            x = conv2d_nchw(x, layer.weight, layer.stride, layer.padding)
            x = x + layer.bias.reshape(1, -1, 1, 1)
        elif layer.kind == "dense":
            x = x @ layer.weight.T.astype(np.float64) + layer.bias
        elif layer.kind == "pool":
            win = np.lib.stride_tricks.sliding_window_view(x, layer.kernel, axis=(2, 3))
            x = win[:, :, :: layer.stride[0], :: layer.stride[1]].max(axis=(4, 5))
        else:
            x = x.reshape(len(x), -1)
        if layer.relu:
            x = np.maximum(x, 0)
        record.append(x)
    return x


@dataclass
class QLayer:
    layer: Layer
    weight: np.ndarray | None = None
    bias: np.ndarray | None = None
    requant: RequantParams | None = None


def quantize_model(
    layers: list[Layer], calib: np.ndarray, mode: str, observer: type, cfg: HWConfig
) -> tuple[float, list[QLayer]]:
    outputs: list[np.ndarray] = []
    float_forward(layers, calib.astype(np.float64), outputs)
    pow2 = mode == "shift"
    s_in = choose_scale(observer().observe(calib).threshold(), power_of_two=pow2)
    scale, qlayers = s_in, []
    for layer, out in zip(layers, outputs, strict=True):
        if layer.kind not in ("conv", "dense"):
            qlayers.append(QLayer(layer))
            continue
        qw = quantize_weight(layer.weight, power_of_two=pow2)
        qb = quantize_bias(layer.bias, scale * qw.scale, cfg.acc_width)
        s_out = choose_scale(observer().observe(out).threshold(), power_of_two=pow2)
        k = int(np.prod(layer.weight.shape[1:]))
        bound = k * 127 * 127 + int(np.abs(qb.values).max())
        params = requant_params(
            scale * qw.scale / s_out, cfg, mode=mode, relu=layer.relu, acc_bound=bound
        )
        qlayers.append(QLayer(layer, qw.values, qb.values, params))
        scale = s_out
    return s_in, qlayers


def int8_forward(qlayers: list[QLayer], x: np.ndarray) -> np.ndarray:
    for q in qlayers:
        layer = q.layer
        if layer.kind == "conv":
            x = conv2d_int8(
                x, q.weight, q.bias, stride=layer.stride, padding=layer.padding, requant=q.requant
            )
        elif layer.kind == "dense":
            x = dense_int8(x, q.weight, q.bias, requant=q.requant)
        elif layer.kind == "pool":
            x = max_pool2d_int8(x, layer.kernel, layer.stride)
        else:
            x = x.reshape(len(x), -1)
    return x


def test_numpy_float_forward_matches_onnxruntime(
    model: onnx.ModelProto, float_logits: np.ndarray, split: dict[str, np.ndarray]
) -> None:
    logits = float_forward(read_layers(model), split["images"].astype(np.float64), [])
    np.testing.assert_allclose(logits, float_logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("observer", [AbsMaxObserver, PercentileObserver, EntropyObserver])
@pytest.mark.parametrize(("mode", "preset_mul"), [("shift", False), ("mul", True)])
def test_int8_accuracy_within_two_points_of_float(
    model: onnx.ModelProto,
    float_logits: np.ndarray,
    split: dict[str, np.ndarray],
    mode: str,
    preset_mul: bool,
    observer: type,
) -> None:
    # The shift mode runs on a VTA-compatible config (no ALU MUL).
    cfg = HWConfig.preset("pynq").replace(alu_mul=preset_mul)
    s_in, qlayers = quantize_model(read_layers(model), split["calib_images"], mode, observer, cfg)
    steps = [s.op.name for q in qlayers if q.requant for s in q.requant.steps]
    assert ("MUL" in steps) == (mode == "mul")
    logits = int8_forward(qlayers, quantize(split["images"], s_in))
    assert logits.dtype == np.int8 and logits.shape == float_logits.shape
    float_acc = _accuracy(float_logits, split["labels"])
    int8_acc = _accuracy(logits, split["labels"])
    assert int8_acc >= float_acc - 0.02, (mode, observer.__name__, int8_acc, float_acc)

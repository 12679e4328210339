"""Real tf2onnx output: small Keras models (random weights) converted by tf2onnx 1.17 from
TensorFlow 2.21 / Keras 3 and saved with Keras's own output for a batch of 2
(`python benchmarks/keras_sweep.py --test-data` writes them; TensorFlow is not needed here).
Each file's batch dimension is tf2onnx's symbolic "unk__N", bound with `input_shapes`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import tensorforge

DATA = Path(__file__).resolve().parents[2] / "data" / "keras"
NAMES = (
    "tiny_mobilenet",  # ZeroPadding2D + strided Conv, unfused depthwise batch norm, SE, ReLU6
    pytest.param("tiny_text", marks=pytest.mark.slow),  # Embedding, Conv1D, LSTM, GRU as a Loop
    "tiny_transformer",  # LayerNormalization as GlobalAveragePools, MultiHeadAttention
    "tiny_decoder",  # Conv2DTranspose, UpSampling2D (bilinear), Resizing (nearest)
    "tiny_mlp",  # Dense + BatchNormalization, LeakyReLU, swish, Softmax
)


@pytest.mark.parametrize("name", NAMES)
def test_tf2onnx_file_matches_keras_and_onnxruntime(name: str) -> None:
    path = DATA / f"{name}.onnx"
    x = np.load(DATA / f"{name}.input.npy")
    keras_out = np.load(DATA / f"{name}.keras.npy")
    (inp,) = onnx.load(str(path)).graph.input
    assert inp.type.tensor_type.shape.dim[0].dim_param.startswith("unk__")  # dynamic batch
    module = tensorforge.compile(str(path), input_shapes={inp.name: x.shape}, progress=False)
    (got,) = module.run({inp.name: x}).values()
    (want,) = ort.InferenceSession(str(path)).run(None, {inp.name: x})
    scale = float(np.abs(keras_out).max())
    np.testing.assert_allclose(got, keras_out, rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * scale)

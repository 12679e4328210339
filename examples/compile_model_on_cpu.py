"""Compile an ONNX model for this CPU, check it against onnxruntime, profile, save and reload."""

import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

import tensorforge
from tensorforge.compiler.frontend.onnx_builders import small_cnn
from tensorforge.runtime.module import Module

model = small_cnn()  # an onnx.ModelProto with fixed random weights (x: 1x3x32x32)
module = tensorforge.compile(model)
x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
((name, y),) = module.run({"x": x}).items()
want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
print("matches onnxruntime; the slowest layers:")
print(module.profile({"x": x}, repeat=3).table(top=3))

path = Path(tempfile.mkdtemp()) / "small_cnn.tfm"
module.save(path)
np.testing.assert_array_equal(Module.load(path).run({"x": x})[name], y)
print(f"saved to {path} and reloaded: same outputs")

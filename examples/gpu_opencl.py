"""Compile a model for a GPU target, run it on OpenCL (PoCL on a CPU-only machine), check it
against onnxruntime, look at the generated kernels, and build the same model's CUDA C.

On a machine with an NVIDIA GPU, use target "cuda" to run it there instead.
"""

import json

import numpy as np
import onnxruntime as ort

import tensorforge
from tensorforge.compiler.frontend.onnx_builders import small_cnn
from tensorforge.runtime.device.gpu import open_device

model = small_cnn()  # x: 1x3x32x32
x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]

module = tensorforge.compile(model, target="opencl")
((name, y),) = module.run({"x": x}).items()
np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
print(f"OpenCL on {open_device('opencl').info.name}: matches onnxruntime")
print(module.profile({"x": x}, repeat=3).table(top=3))

first = json.loads(module.kernels[0].payload)
launch = first["kernels"][0]
print(f"kernel {launch['name']}: grid {launch['grid']}, block {launch['block']}; its source:")
print("\n".join(first["source"].splitlines()[:12]), "\n  ...")

cuda = tensorforge.compile(model, target="cuda -arch=sm_80")  # NVRTC: no GPU needed
ptx = json.loads(cuda.kernels[0].payload).get("ptx", "")
print(f"CUDA: {len(cuda.kernels)} kernels, PTX for sm_80 of {len(ptx)} characters")

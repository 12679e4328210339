"""1-D and 3-D convolutions: TensorForge vs onnxruntime on the CPU.

Each case is a small ONNX model (compiler/frontend/onnx_builders.py, fixed random weights)
compiled whole by `tensorforge.compile` (untuned defaults) and run by an onnxruntime session,
batch 1, float32, at each thread count in its own subprocess (both frameworks get that many
threads). Prints the median time of each, their ratio (TF/ORT) and TensorForge's kernel time
alone (`Module.profile`, without `Module.run`'s input and output copies); every TensorForge
output is checked against onnxruntime's first.

Cases: a whole keyword-spotting 1-D CNN on one second of 16 kHz audio (`audio_cnn_1d`), a
wav2vec2 feature-encoder layer (512 channels, 3 taps, stride 2), a dilated TCN layer; r3d_18's
stem (3x7x7, stride (1, 2, 2)) on an 8-frame 112x112 clip, a 3x3x3 conv-bn-relu at 64 x 8x28x28
(r3d_18's layer 1 of that clip, its rows and columns halved), r2plus1d_18's (1,3,3) spatial and
(3,1,1) temporal convs at that size, and two whole r3d_18 blocks (`r3d_block`: a basic block,
then a downsampling one).

Usage:
    python benchmarks/conv_nd.py [--threads 1] [--cases audio_cnn_1d,...|all] [--repeat 10]
"""

from __future__ import annotations

import sys
from typing import Any

from model_cases import main

# name: (spatial dims, channels in, channels out, input spatial shape, kernel, stride, dilation)
LAYERS: dict[str, tuple[int, int, int, tuple, tuple, tuple, int]] = {
    "w2v_512x799s2": (1, 512, 512, (799,), (3,), (2,), 1),
    "tcn_128x2000d4": (1, 128, 128, (2000,), (3,), (1,), 4),
    "r3d_stem_3x8x112": (3, 3, 64, (8, 112, 112), (3, 7, 7), (1, 2, 2), 1),
    "r3d_64x8x28": (3, 64, 64, (8, 28, 28), (3, 3, 3), (1, 1, 1), 1),
    "r2p1d_s_64x8x28": (3, 64, 144, (8, 28, 28), (1, 3, 3), (1, 1, 1), 1),
    "r2p1d_t_144x8x28": (3, 144, 64, (8, 28, 28), (3, 1, 1), (1, 1, 1), 1),
}
CASES = ["audio_cnn_1d", *LAYERS, "r3d_block"]


def build(name: str) -> Any:
    """The ONNX model of case `name`."""
    from tensorforge.compiler.frontend import onnx_builders as ob

    if name == "audio_cnn_1d":
        return ob.audio_cnn_1d(16000)
    if name == "r3d_block":
        return ob.r3d_block(8, 28, 64)
    dims, cin, cout, shape, k, stride, dil = LAYERS[name]
    b = ob.OnnxModelBuilder(name)
    x = b.input("x", (1, cin, *shape))
    w = b.weight((cout, cin, *k))
    pads = [(t - 1) * dil // 2 for t in k] * 2  # "same" padding
    y = b.op("Conv", [x, w], kernel_shape=list(k), strides=list(stride),
             dilations=[dil] * dims, pads=pads)  # fmt: skip
    return b.model([b.op("Relu", [b.bn(y, cout)])])


if __name__ == "__main__":
    sys.exit(main(__doc__, list(CASES), build, __file__, threads="1", repeat=10))

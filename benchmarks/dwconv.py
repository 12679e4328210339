"""Depthwise and grouped convolutions, squeeze-excitation and MBConv blocks: TensorForge vs
onnxruntime on the CPU.

Each case is a small ONNX model (compiler/frontend/onnx_builders.py, fixed random weights)
compiled whole by `tensorforge.compile` (untuned defaults) and run by an onnxruntime session,
batch 1, float32, at each thread count in its own subprocess (both frameworks get that many
threads). Prints the median time of each and their ratio (TF/ORT), and TensorForge's kernel
time alone (`Module.profile`: without `Module.run`'s copies of the input into its arena and of
the output out, which cost about 0.1 ms per MB); every TensorForge output is checked against
onnxruntime's first.

Cases: depthwise 3x3 and 5x5 convolutions at MobileNetV2/EfficientNet-B0 shapes (each with its
batch norm and activation, as the models have them), grouped 3x3 convolutions at
RegNetY-400MF shapes (group width 8 and 16), a squeeze-excitation block alone and a whole
EfficientNet MBConv block (expand 1x1 + SiLU, depthwise + SiLU, SE, project 1x1, residual).

Usage:
    python benchmarks/dwconv.py [--threads 1,2] [--cases dw3_32x112,...|all] [--repeat 30]
"""

from __future__ import annotations

import sys
from typing import Any

from model_cases import main

# name: (kind, channels, size, kernel, stride, group width or SE channels)
CASES: dict[str, tuple[str, int, int, int, int, int]] = {
    "dw3_32x112": ("dw", 32, 112, 3, 1, 0),
    "dw3_96x112s2": ("dw", 96, 112, 3, 2, 0),
    "dw3_144x56": ("dw", 144, 56, 3, 1, 0),
    "dw5_240x28": ("dw", 240, 28, 5, 1, 0),
    "dw3_480x14": ("dw", 480, 14, 3, 1, 0),
    "dw5_672x14s2": ("dw", 672, 14, 5, 2, 0),
    "dw5_1152x7": ("dw", 1152, 7, 5, 1, 0),
    "gc8_48x56": ("group", 48, 56, 3, 1, 8),
    "gc8_104x56s2": ("group", 104, 56, 3, 2, 8),
    "gc16_208x14": ("group", 208, 14, 3, 1, 16),
    "gc8_440x7": ("group", 440, 7, 3, 1, 8),
    "se_240x28": ("se", 240, 28, 0, 0, 10),
    "se_672x14": ("se", 672, 14, 0, 0, 28),
    "mbconv_40x28": ("mbconv", 40, 28, 5, 1, 10),
    "mbconv_112x14": ("mbconv", 112, 14, 3, 1, 28),
}


def build(name: str) -> Any:
    """The ONNX model of case `name`."""
    from tensorforge.compiler.frontend import onnx_builders as ob

    kind, c, size, k, stride, extra = CASES[name]
    if kind == "mbconv":
        return ob.mbconv_block(size, c, k, extra)
    b = ob.OnnxModelBuilder(name)
    x = b.input("x", (1, c, size, size))
    if kind == "dw":
        y = ob.silu(b, b.bn(b.conv(x, c, c, k, stride, group=c), c))
    elif kind == "group":
        y = b.op("Relu", [b.bn(b.conv(x, c, c, k, stride, group=c // extra), c)])
    else:
        y = ob.squeeze_excitation(b, x, c, extra)
    return b.model([y])


if __name__ == "__main__":
    sys.exit(main(__doc__, list(CASES), build, __file__, threads="1,2", repeat=30))

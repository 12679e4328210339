"""Per-op lowering rules of the CPU back-end: lazy elementwise/injective ops and anchors."""

from __future__ import annotations

from . import (
    conv,
    conv_transpose,
    grid_sample,
    indexing,
    layout,
    matmul,
    norm,
    qlinear,
    qnn,
    reduce,
    resize,
)
from .elemwise import ELEMENTWISE as _FLOAT_ELEMENTWISE

# the int8 graph ops of quantize_graph: strategy/qnn.py; ONNX's quantized ops: strategy/qlinear.py
ELEMENTWISE = {
    **_FLOAT_ELEMENTWISE,
    **resize.ELEMENTWISE,
    **indexing.ELEMENTWISE,
    **layout.ELEMENTWISE,
    **qnn.ELEMENTWISE,
    **qlinear.ELEMENTWISE,
}
ANCHORS = {
    **conv.ANCHORS,
    **layout.ANCHORS,
    **matmul.ANCHORS,
    **reduce.ANCHORS,
    **norm.ANCHORS,
    **conv_transpose.ANCHORS,
    **grid_sample.ANCHORS,
    **indexing.ANCHORS,
    **qnn.ANCHORS,
    **qlinear.ANCHORS,
}

__all__ = ["ANCHORS", "ELEMENTWISE"]

"""Model importers into the graph IR: ONNX, and PyTorch through torch's own ONNX export.

>>> from tensorforge.compiler.frontend import from_onnx  # doctest: +SKIP
"""

from __future__ import annotations

from ..graph.registry import UnsupportedOpError
from .onnx import OnnxImportError, UnsupportedDtypeError, from_onnx, from_onnx_split
from .torch import export_onnx, from_torch

__all__ = [
    "OnnxImportError",
    "UnsupportedDtypeError",
    "UnsupportedOpError",
    "export_onnx",
    "from_onnx",
    "from_onnx_split",
    "from_torch",
]

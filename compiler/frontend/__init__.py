"""Model importers into the graph IR: ONNX now; PyTorch (via torch's ONNX export) is not built yet.

>>> from tensorforge.compiler.frontend import from_onnx  # doctest: +SKIP
"""

from __future__ import annotations

from ..graph.registry import UnsupportedOpError
from .onnx import OnnxImportError, UnsupportedDtypeError, from_onnx


def from_torch(module: object, example_inputs: object) -> object:
    """Import a PyTorch module: not built yet (torch is not installed here)."""
    raise NotImplementedError(
        "from_torch is not built yet: export the module with torch.onnx.export and use from_onnx"
    )


__all__ = [
    "OnnxImportError",
    "UnsupportedDtypeError",
    "UnsupportedOpError",
    "from_onnx",
    "from_torch",
]

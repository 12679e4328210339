"""Per-op lowering rules of the CPU back-end: lazy elementwise/injective ops and anchors."""

from __future__ import annotations

from .elemwise import ELEMENTWISE
from .nn import ANCHORS

__all__ = ["ANCHORS", "ELEMENTWISE"]

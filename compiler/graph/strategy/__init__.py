"""Per-op lowering rules of the CPU back-end: lazy elementwise/injective ops and anchors."""

from __future__ import annotations

from . import qnn
from .elemwise import ELEMENTWISE as _FLOAT_ELEMENTWISE
from .nn import ANCHORS as _FLOAT_ANCHORS

ELEMENTWISE = {**_FLOAT_ELEMENTWISE, **qnn.ELEMENTWISE}  # the int8 graph ops: strategy/qnn.py
ANCHORS = {**_FLOAT_ANCHORS, **qnn.ANCHORS}

__all__ = ["ANCHORS", "ELEMENTWISE"]

"""Hardware-software design-space exploration (docs/dse.md): sweep accelerator configs, retune
each one's schedules on the cycle model, estimate its area with Yosys, keep the Pareto front.

    >>> from tensorforge.compiler.dse import HwSpace, explore  # doctest: +SKIP
    >>> result = explore("resnet18.onnx", "space.json", "dse/", trials=16)  # doctest: +SKIP
"""

from __future__ import annotations

from .area import Area, screen, synthesize
from .space import HwSpace, SpaceFileError, config_key
from .sweep import DseResult, explore, pareto_front

__all__ = ["Area", "DseResult", "HwSpace", "SpaceFileError", "config_key", "explore",
           "pareto_front", "screen", "synthesize"]  # fmt: skip

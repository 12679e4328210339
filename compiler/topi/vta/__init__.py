"""Accelerator operators: quantized conv2d and dense compiled to VTA program images.

See docs/vta_compiler.md for the guide; ``conv2d``/``dense`` compile, ``VtaKernel.run`` runs on
a device backend, and ``reference`` holds the numpy int8 oracle.
"""

from __future__ import annotations

from .conv2d import conv2d_tile_program
from .kernel import VtaKernel, conv2d, dense
from .layout import pack_bias, pack_nchw, pack_oihw, unpack_nchw
from .reference import conv2d_reference, dense_reference, requantize
from .schedule import Conv2dSchedule, Conv2dWorkload, candidate_schedules, default_schedule

__all__ = [
    "Conv2dSchedule",
    "Conv2dWorkload",
    "VtaKernel",
    "candidate_schedules",
    "conv2d",
    "conv2d_reference",
    "conv2d_tile_program",
    "default_schedule",
    "dense",
    "dense_reference",
    "pack_bias",
    "pack_nchw",
    "pack_oihw",
    "requantize",
    "unpack_nchw",
]

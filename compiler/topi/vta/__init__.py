"""Accelerator operators: quantized conv2d, dense and max pooling compiled to program images.

See docs/vta_compiler.md for the guide; ``conv2d``/``dense`` compile, ``VtaKernel.run`` runs on
a device backend, and ``reference`` wraps the int8 oracle of ``compiler.quantize``.
"""

from __future__ import annotations

from .kernel import VtaKernel, conv2d, dense, run_image
from .layout import pack_bias, pack_nchw, pack_oihw, unpack_nchw
from .pool import PoolKernel, PoolSchedule, PoolWorkload, default_pool_schedule, max_pool2d
from .reference import (
    conv2d_reference,
    dense_reference,
    max_pool2d_reference,
    requantize,
    shift_requant,
)
from .schedule import (
    Conv2dSchedule,
    Conv2dWorkload,
    candidate_schedules,
    default_schedule,
    tile_sizes,
)

__all__ = [
    "Conv2dSchedule",
    "Conv2dWorkload",
    "PoolKernel",
    "PoolSchedule",
    "PoolWorkload",
    "VtaKernel",
    "candidate_schedules",
    "conv2d",
    "conv2d_reference",
    "default_pool_schedule",
    "default_schedule",
    "dense",
    "dense_reference",
    "max_pool2d",
    "max_pool2d_reference",
    "pack_bias",
    "pack_nchw",
    "pack_oihw",
    "requantize",
    "run_image",
    "shift_requant",
    "tile_sizes",
    "unpack_nchw",
]

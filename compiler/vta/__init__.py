"""The accelerator back-end: quantized conv2d, dense and max pooling compiled to program images.

One path, one module per step, in the order a kernel takes them:

1. ``operators.py`` (and ``pool.py``): the TE operator in the blocked layouts of ``layout.py``,
   scheduled with VTA's recipe: tiles, ``cache_read`` into the SRAM scopes, ``pragma dma_copy``
   and ``pragma alu``, the GEMM tensorized with ``intrin.py``'s intrinsic, virtual threads; the
   knobs and the default choice are ``schedule.py``'s.
2. ``tir.lower(..., passes=lower.VTA_PIPELINE)``: the loop IR (verified after each pass).
3. ``lower.py`` (with ``lower_base.py``, ``lower_dma.py``, ``lower_compute.py``): loop IR -> the
   tile program of ``tile.py`` (buffers and DMA/GEMM/ALU statements); loops outside the
   accelerator's operations run at compile time; virtual threads interleave here.
4. ``codegen.py`` with ``passes.py``: ``verify_tile_program``, ``fold_uop_loops``,
   ``check_sram_capacity``, instruction encoding, ``dedupe_uop_kernels``,
   ``insert_dependency_tokens``, ``verify_tokens`` -> the ``ProgramImage``.
5. ``kernel.py``: ``conv2d``/``dense`` run the steps and return a ``VtaKernel`` that runs the
   image on a device backend and checks it against ``reference.py`` (the int8 oracle of
   ``compiler.quantize``).

See docs/vta_compiler.md for the guide.
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

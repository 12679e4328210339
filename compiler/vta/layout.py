"""Blocked layouts of the accelerator for the compiler: slot names, weights and bias packing.

Weights OIHW become ``OIHW{block_out}o{block_in}i``: (O/BLOCK_OUT, I/BLOCK_IN, KH, KW,
BLOCK_OUT, BLOCK_IN), one WGT element per trailing block, zero-padded. Data use
``NCHW{batch}n{block}c``, whose helpers (``pack_nchw``, ``unpack_nchw``) live in the runtime
(``runtime.device.vta.layout``), which packs a kernel's operands at launch; they are re-exported
here.

Example:
    >>> import numpy as np
    >>> from tensorforge.hw.config import HWConfig
    >>> w = np.ones((6, 4, 3, 3), dtype=np.int8)             # O=6 is padded to 2 blocks of 4
    >>> pack_oihw(HWConfig.preset("tiny"), w).shape
    (2, 1, 3, 3, 4, 4)
"""

from __future__ import annotations

import numpy as np

from ...hw.config import HWConfig
from ...runtime.device.vta.layout import blocks, pack_nchw, pad_to, unpack_nchw

__all__ = ["blocks", "pack_bias", "pack_nchw", "pack_oihw", "unpack_nchw"]

# The slots of a conv2d/dense program image: data ``NCHW{batch}n{block_in}c``, the output and
# a fused residual's operand ``NCHW{batch}n{block_out}c``; constants: packed weights, bias and
# (per-channel requantization) the multipliers, packed like the bias.
INPUT, OUTPUT, WEIGHTS, BIAS, RESIDUAL = "X", "Y", "W", "bias", "R"
MULTIPLIERS = "mult"


def pack_oihw(cfg: HWConfig, w: np.ndarray) -> np.ndarray:
    """(O, I, KH, KW) int8 -> (O/BLOCK_OUT, I/BLOCK_IN, KH, KW, BLOCK_OUT, BLOCK_IN), padded."""
    if w.ndim != 4:
        raise ValueError(f"weights must be 4-D OIHW, not shape {w.shape}")
    w = pad_to(pad_to(np.asarray(w), 0, cfg.block_out), 1, cfg.block_in)
    o, i, kh, kw = w.shape
    blocked = w.reshape(o // cfg.block_out, cfg.block_out, i // cfg.block_in, cfg.block_in, kh, kw)
    return np.ascontiguousarray(blocked.transpose(0, 2, 4, 5, 1, 3))


def pack_bias(cfg: HWConfig, bias: np.ndarray | None, channels: int) -> np.ndarray:
    """(O,) int32 -> ACC elements (O/BLOCK_OUT, BATCH, BLOCK_OUT): each row of a block the same
    (padded channels 0). Also packs the per-channel requantization multipliers."""
    ob = blocks(channels, cfg.block_out)
    b = np.zeros(ob * cfg.block_out, np.int32)
    if bias is not None:
        b[:channels] = np.asarray(bias, dtype=np.int32).reshape(channels)
    rows = b.reshape(ob, 1, cfg.block_out)
    return np.ascontiguousarray(np.broadcast_to(rows, (ob, cfg.batch, cfg.block_out)))

"""Blocked layouts of the accelerator, derived from the HWConfig, and numpy packing helpers.

Data NCHW becomes ``NCHW{batch}n{block_in}c``: an array (N/BATCH, C/BLOCK_IN, H, W, BATCH,
BLOCK_IN) whose trailing (BATCH, BLOCK_IN) block is one INP element. Weights OIHW become
``OIHW{block_out}o{block_in}i``: (O/BLOCK_OUT, I/BLOCK_IN, KH, KW, BLOCK_OUT, BLOCK_IN), one
WGT element per trailing block. Dimensions that are not multiples of the block are zero-padded
(zero channels add nothing to a convolution) and cropped again by ``unpack_nchw``.

Example:
    >>> import numpy as np
    >>> from tensorforge.hw.config import HWConfig
    >>> cfg = HWConfig.preset("tiny")
    >>> x = np.arange(2 * 6 * 3 * 3, dtype=np.int8).reshape(2, 6, 3, 3)
    >>> pack_nchw(cfg, x).shape
    (2, 2, 3, 3, 1, 4)
    >>> bool(np.array_equal(unpack_nchw(cfg, pack_nchw(cfg, x), 2, 6), x))
    True
"""

from __future__ import annotations

import numpy as np

from ....hw.config import HWConfig


def blocks(n: int, block: int) -> int:
    """How many blocks of ``block`` hold ``n`` (the last one zero-padded)."""
    return -(-n // block)


def _pad_to(a: np.ndarray, axis: int, block: int) -> np.ndarray:
    extra = blocks(a.shape[axis], block) * block - a.shape[axis]
    if not extra:
        return a
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, extra)
    return np.pad(a, widths)


def pack_nchw(cfg: HWConfig, x: np.ndarray, block: int | None = None) -> np.ndarray:
    """(N, C, H, W) int8 -> (N/BATCH, C/BLOCK, H, W, BATCH, BLOCK), zero-padded.

    ``block`` defaults to BLOCK_IN (an input); pass ``cfg.block_out`` for data in an output's
    layout (a residual operand).
    """
    if x.ndim != 4:
        raise ValueError(f"data must be 4-D NCHW, not shape {x.shape}")
    block = cfg.block_in if block is None else block
    x = _pad_to(_pad_to(np.asarray(x), 0, cfg.batch), 1, block)
    n, c, h, w = x.shape
    blocked = x.reshape(n // cfg.batch, cfg.batch, c // block, block, h, w)
    return np.ascontiguousarray(blocked.transpose(0, 2, 4, 5, 1, 3))


def unpack_nchw(cfg: HWConfig, y: np.ndarray, n: int, c: int) -> np.ndarray:
    """(N/BATCH, C/BLOCK, H, W, BATCH, BLOCK) -> (n, c, H, W), dropping the padding."""
    nb, cb, h, w, b, blk = y.shape
    full = y.transpose(0, 4, 1, 5, 2, 3).reshape(nb * b, cb * blk, h, w)
    return np.ascontiguousarray(full[:n, :c])


def pack_oihw(cfg: HWConfig, w: np.ndarray) -> np.ndarray:
    """(O, I, KH, KW) int8 -> (O/BLOCK_OUT, I/BLOCK_IN, KH, KW, BLOCK_OUT, BLOCK_IN), padded."""
    if w.ndim != 4:
        raise ValueError(f"weights must be 4-D OIHW, not shape {w.shape}")
    w = _pad_to(_pad_to(np.asarray(w), 0, cfg.block_out), 1, cfg.block_in)
    o, i, kh, kw = w.shape
    blocked = w.reshape(o // cfg.block_out, cfg.block_out, i // cfg.block_in, cfg.block_in, kh, kw)
    return np.ascontiguousarray(blocked.transpose(0, 2, 4, 5, 1, 3))


def pack_bias(cfg: HWConfig, bias: np.ndarray | None, channels: int) -> np.ndarray:
    """(O,) int32 -> ACC elements (O/BLOCK_OUT, BATCH, BLOCK_OUT): each row of a block the same."""
    ob = blocks(channels, cfg.block_out)
    b = np.zeros(ob * cfg.block_out, np.int32)
    if bias is not None:
        b[:channels] = np.asarray(bias, dtype=np.int32).reshape(channels)
    rows = b.reshape(ob, 1, cfg.block_out)
    return np.ascontiguousarray(np.broadcast_to(rows, (ob, cfg.batch, cfg.block_out)))

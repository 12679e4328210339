"""The accelerator's blocked data layout, derived from the HWConfig (numpy packing helpers).

Data NCHW becomes ``NCHW{batch}n{block}c``: an array (N/BATCH, C/BLOCK, H, W, BATCH, BLOCK)
whose trailing (BATCH, BLOCK) block is one buffer element; BLOCK is BLOCK_IN for an operator's
input and BLOCK_OUT for its output. Dimensions that are not multiples of the block are
zero-padded (zero channels add nothing to a convolution) and cropped again by ``unpack_nchw``.
The runtime packs and unpacks at a kernel's boundary with the CPU; a tensor that flows only
between accelerator kernels stays in this layout, in ``blocked_shape`` (the compiler's
``packed_tensors``). The compiler packs weights with the same helpers
(``compiler.vta.layout``).

Example:
    >>> import numpy as np
    >>> from tensorforge.hw.config import HWConfig
    >>> cfg = HWConfig.preset("tiny")
    >>> x = np.arange(2 * 6 * 3 * 3, dtype=np.int8).reshape(2, 6, 3, 3)
    >>> pack_nchw(cfg, x).shape
    (2, 2, 3, 3, 1, 4)
    >>> bool(np.array_equal(unpack_nchw(cfg, pack_nchw(cfg, x), 2, 6), x))
    True
    >>> blocked_shape(cfg, x.shape, cfg.block_out)
    (2, 2, 3, 3, 1, 4)
"""

from __future__ import annotations

import numpy as np

from ....hw.config import HWConfig


def blocks(n: int, block: int) -> int:
    """How many blocks of ``block`` hold ``n`` (the last one zero-padded)."""
    return -(-n // block)


def pad_to(a: np.ndarray, axis: int, block: int) -> np.ndarray:
    """``a`` zero-padded along ``axis`` to a multiple of ``block``."""
    extra = blocks(a.shape[axis], block) * block - a.shape[axis]
    if not extra:
        return a
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, extra)
    return np.pad(a, widths)


def blocked_shape(
    cfg: HWConfig, nchw: tuple[int, ...], block: int
) -> tuple[int, int, int, int, int, int]:
    """The shape ``pack_nchw(cfg, x, block)`` gives for ``x`` of shape ``nchw``."""
    if len(nchw) != 4:
        raise ValueError(f"shape must be 4-D NCHW, not {tuple(nchw)}")
    n, c, h, w = (int(d) for d in nchw)
    return (blocks(n, cfg.batch), blocks(c, block), h, w, cfg.batch, block)


def pack_nchw(cfg: HWConfig, x: np.ndarray, block: int | None = None) -> np.ndarray:
    """(N, C, H, W) int8 -> (N/BATCH, C/BLOCK, H, W, BATCH, BLOCK), zero-padded.

    ``block`` defaults to BLOCK_IN (an input); pass ``cfg.block_out`` for data in an output's
    layout (a residual operand).
    """
    if x.ndim != 4:
        raise ValueError(f"data must be 4-D NCHW, not shape {x.shape}")
    block = cfg.block_in if block is None else block
    x = pad_to(pad_to(np.asarray(x), 0, cfg.batch), 1, block)
    n, c, h, w = x.shape
    blocked = x.reshape(n // cfg.batch, cfg.batch, c // block, block, h, w)
    return np.ascontiguousarray(blocked.transpose(0, 2, 4, 5, 1, 3))


def unpack_nchw(cfg: HWConfig, y: np.ndarray, n: int, c: int) -> np.ndarray:
    """(N/BATCH, C/BLOCK, H, W, BATCH, BLOCK) -> (n, c, H, W), dropping the padding."""
    nb, cb, h, w, b, blk = y.shape
    full = y.transpose(0, 4, 1, 5, 2, 3).reshape(nb * b, cb * blk, h, w)
    return np.ascontiguousarray(full[:n, :c])

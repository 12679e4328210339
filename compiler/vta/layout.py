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

__all__ = [
    "blocks",
    "group_blocks",
    "pack_bias",
    "pack_grouped",
    "pack_nchw",
    "pack_oihw",
    "unpack_nchw",
]

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


def group_blocks(cfg: HWConfig, ic: int, oc: int, groups: int) -> tuple[int, int]:
    """How a conv with ``groups`` groups maps to channel blocks: ``(q, r)`` such that output
    block ``o`` reduces over the ``r`` input blocks ``(o // q) * r + j`` (``j < r``), which
    hold every input channel its groups read.

    An output block lies inside one group (a group's outputs a multiple of BLOCK_OUT) or holds
    whole groups (BLOCK_OUT a multiple of a group's outputs); either way it reads one
    contiguous span of input channels. A span of whole BLOCK_IN blocks gives ``r`` blocks per
    output block (wide groups: ``q`` output blocks share their group's); a span that divides
    BLOCK_IN shares one input block with the blocks next to it (``r == 1``; depthwise on square
    blocks: ``(1, 1)``, a channel multiplier of 2: ``(2, 1)``). Where the groups fill a block
    only in part, its weight tile is zero outside them (block-diagonal).

    Raises:
        ValueError: ``groups`` does not divide the channels, the spans fit no block, or the
            last output block's span would end past the input channels.

    Example:
        >>> cfg = HWConfig.preset("pynq")                     # 16 x 16 blocks
        >>> [group_blocks(cfg, 64, 64, groups) for groups in (1, 2, 64)]  # dense, wide, depthwise
        [(4, 4), (2, 2), (1, 1)]
        >>> group_blocks(cfg, 32, 64, 32)                     # depthwise, channel multiplier 2
        (2, 1)
    """
    bi, bo = cfg.block_in, cfg.block_out
    if groups < 1 or ic % groups or oc % groups:
        raise ValueError(f"conv2d groups must be >= 1 and divide the {ic} input and {oc} output "
                         f"channels, not {groups!r}")  # fmt: skip
    if groups == 1:
        return blocks(oc, bo), blocks(ic, bi)
    cg, og = ic // groups, oc // groups
    if og % bo == 0:  # an output block inside one group: the group's inputs
        span, share = cg, og // bo
    elif bo % og == 0:  # whole groups per output block: their inputs, one after another
        span, share = bo // og * cg, 1
    else:
        span, share = 0, 0
    if span and span % bi == 0:
        return _check_reads(cfg, ic, oc, cg, og, share, span // bi)
    if span and bi % span == 0:
        return _check_reads(cfg, ic, oc, cg, og, share * (bi // span), 1)
    raise ValueError(
        f"conv2d groups of {cg} input -> {og} output channels must fit the channel blocks: an "
        f"output block of {bo} must lie in one group or hold whole groups, and the input "
        f"channels it reads must be whole blocks of {bi} or divide one"
    )


def _check_reads(
    cfg: HWConfig, ic: int, oc: int, cg: int, og: int, q: int, r: int
) -> tuple[int, int]:
    """``(q, r)`` when the last output block's ``r`` input blocks lie in the input: an output
    block that holds whole groups reads the span of a full block's groups, so where the last
    block holds fewer (the groups are not a multiple of a block's), it would read past the
    input channels."""
    end = ((blocks(oc, cfg.block_out) - 1) // q + 1) * r
    if end > blocks(ic, cfg.block_in):
        raise ValueError(
            f"conv2d groups of {cg} input -> {og} output channels must fill the last output "
            f"block of {cfg.block_out}: its input span of {r} blocks of {cfg.block_in} would "
            f"end at block {end}, past the input's {blocks(ic, cfg.block_in)} blocks "
            f"({ic} channels)"
        )
    return q, r


def pack_grouped(cfg: HWConfig, w: np.ndarray, groups: int) -> np.ndarray:
    """Grouped (O, I/groups, KH, KW) int8 -> (O/BLOCK_OUT, r, KH, KW, BLOCK_OUT, BLOCK_IN): for
    each output block the weight tiles of the ``r`` input blocks it reduces over
    (``group_blocks``), zero outside its groups (block-diagonal where groups share a block)."""
    if w.ndim != 4:
        raise ValueError(f"weights must be 4-D OIHW, not shape {w.shape}")
    o, cg, kh, kw = w.shape
    q, r = group_blocks(cfg, cg * groups, o, groups)
    if groups == 1:
        return pack_oihw(cfg, w)
    dense = np.zeros((o, cg * groups, kh, kw), w.dtype)  # the equivalent ungrouped weight
    og = o // groups
    for g in range(groups):
        dense[g * og : (g + 1) * og, g * cg : (g + 1) * cg] = w[g * og : (g + 1) * og]
    full = pack_oihw(cfg, dense)
    first = np.arange(full.shape[0]) // q * r
    return np.ascontiguousarray(
        full[np.arange(full.shape[0])[:, None], first[:, None] + np.arange(r)]
    )


def pack_bias(cfg: HWConfig, bias: np.ndarray | None, channels: int) -> np.ndarray:
    """(O,) int32 -> ACC elements (O/BLOCK_OUT, BATCH, BLOCK_OUT): each row of a block the same
    (padded channels 0). Also packs the per-channel requantization multipliers."""
    ob = blocks(channels, cfg.block_out)
    b = np.zeros(ob * cfg.block_out, np.int32)
    if bias is not None:
        b[:channels] = np.asarray(bias, dtype=np.int32).reshape(channels)
    rows = b.reshape(ob, 1, cfg.block_out)
    return np.ascontiguousarray(np.broadcast_to(rows, (ob, cfg.batch, cfg.block_out)))

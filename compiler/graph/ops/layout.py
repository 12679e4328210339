"""Blocked-layout ops made by the alter_layout pass: LayoutTransform (NCHW <-> NCHW[c]c) and
ConvNCHWc, a 2-D convolution (ungrouped, grouped or depthwise) on channel-blocked data with a
packed OIHW[i]i[o]o weight."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..ir import TensorType
from ..registry import REQUIRED, Pattern, register
from .nn import window_geometry


def to_blocked(x: np.ndarray, block: int) -> np.ndarray:
    """(N, C, H, W) -> (N, C/block, H, W, block)."""
    n, c, *spatial = x.shape
    y = x.reshape(n, c // block, block, *spatial)
    return np.ascontiguousarray(np.moveaxis(y, 2, -1))


def pad_channels(x: np.ndarray, channels: int, axis: int = 1, value: float = 0) -> np.ndarray:
    """`x` with axis `axis` padded with `value` up to `channels` entries."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, channels - x.shape[axis])
    return np.pad(x, widths, constant_values=value)


def from_blocked(x: np.ndarray) -> np.ndarray:
    """(N, C/b, H, W, b) -> (N, C, H, W)."""
    n, cb, *spatial, b = x.shape
    return np.ascontiguousarray(np.moveaxis(x, -1, 2)).reshape(n, cb * b, *spatial)


def pack_weight(w: np.ndarray, block_in: int, block_out: int) -> np.ndarray:
    """OIHW -> (O/bo, I/bi, H, W, bi, bo), as a strided view of `w` (no copy: alter_layout
    keeps it as a view constant, `GraphBuilder.add_constant(view=True)`, and `compile_graph`
    copies it once into aligned memory after `optimize`, freeing `w` then)."""
    o, i, kh, kw = w.shape
    packed = w.reshape(o // block_out, block_out, i // block_in, block_in, kh, kw)
    return packed.transpose(0, 2, 4, 5, 3, 1)


def pack_channels_weight(
    w: np.ndarray, out_channels: int, in_channels: int, block_in: int, block_out: int
) -> np.ndarray:
    """`pack_weight` of OIHW `w` with zero filters up to `out_channels` and zero input channels
    up to `in_channels` (alter_layout's padded channels): a view of a read-only padded copy, or
    of `w` itself where nothing is padded."""
    o, i = w.shape[:2]
    if (o, i) != (out_channels, in_channels):
        w = np.pad(w, [(0, out_channels - o), (0, in_channels - i), (0, 0), (0, 0)])
        w.flags.writeable = False
    return pack_weight(w, block_in, block_out)


def _transform_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    shape, block, channels = types[0].shape, attrs["block"], attrs.get("channels", 0)
    if attrs["dst"] == "NCHWc":
        padded = channels or shape[1]
        if padded % block or padded < shape[1]:
            raise ValueError(
                f"LayoutTransform channels must be a multiple of block {block} and at least the "
                f"input's {shape[1]}, not {padded}"
            )
        out = (shape[0], padded // block, *shape[2:], block)
    else:
        stored = shape[1] * shape[-1]
        if channels > stored:
            raise ValueError(f"LayoutTransform channels must be at most {stored}, not {channels}")
        out = (shape[0], channels or stored, *shape[2:-1])
    return [TensorType(out, types[0].dtype)]


def _transform(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    channels = attrs.get("channels", 0)
    if attrs["dst"] == "NCHWc":
        pad = (channels or x.shape[1]) - x.shape[1]
        x = np.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)) if pad else x
        return to_blocked(x, attrs["block"])
    y = from_blocked(x)
    return np.ascontiguousarray(y[:, :channels]) if channels else y


register(
    "LayoutTransform",
    Pattern.INJECTIVE,
    _transform_type,
    _transform,
    # channels: NCHW -> NCHWc pads the channels to this many with zeros, NCHWc -> NCHW keeps
    # this many (the padded channels of `passes.alter_layout` sliced off); 0: all, no padding
    attrs={"src": REQUIRED, "dst": REQUIRED, "block": REQUIRED, "channels": 0},
)


def is_depthwise_nchwc(x: tuple[int, ...], w: tuple[int, ...], group: int) -> bool:
    """Whether a ConvNCHWc of blocked input shape `x`, packed weight shape `w` and `group` is
    depthwise (weight `(C/b, 1, KH, KW, 1, b)`), not grouped with whole blocks per group. An
    NCHW `x` (a chain's first layer) may have fewer channels than `group` (padded ones)."""
    if group == 1 or w[1] != 1 or w[4] != 1:
        return False
    if len(x) == 4:
        return group == w[0] * w[5] and x[1] <= group
    return len(x) == 5 and group == x[1] * x[4]


def _conv_nchwc_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x, w = types[0].shape, types[1].shape
    group = attrs["group"]
    if is_depthwise_nchwc(x, w, group):  # one input channel per group, the same blocks
        if len(x) == 5 and (w[0], w[5]) != (x[1], x[4]):
            raise ValueError(
                f"depthwise ConvNCHWc weight must be [{x[1]}, 1, KH, KW, 1, {x[4]}] for input "
                f"{list(x)}, not {list(w)}"
            )
    elif group != 1:  # grouped: each group's input and output channels whole blocks
        if len(x) != 5 or x[4] != w[4] or x[1] != w[1] * group or w[0] % group:
            raise ValueError(
                f"ConvNCHWc with group {group} must read whole blocks per group: input "
                f"{list(x)} must be [N, {w[1]} x {group}, H, W, {w[4]}] for weight {list(w)}"
            )
    elif len(x) == 4 and x[1] != w[1] * w[4]:  # NCHW input (a stem): packed in the kernel
        raise ValueError(f"ConvNCHWc input channels {x[1]} must match the weight's {w[1] * w[4]}")
    elif len(x) == 5 and (x[1] != w[1] or x[4] != w[4]):
        raise ValueError(
            f"ConvNCHWc input blocks {x[1]}x{x[4]} must match the weight's {w[1]}x{w[4]}"
        )
    *_, outs = window_geometry(attrs, x[2:4], w[2:4])
    return [TensorType((x[0], w[0], *outs, w[5]), types[0].dtype)]


def conv_nchwc(attrs: dict[str, Any], x: np.ndarray, w: np.ndarray, b: Any = None) -> np.ndarray:
    """Blocked 2-D convolution: x (N, C/bi, H, W, bi), or NCHW (a stem's input), w (O/bo, C/bi,
    KH, KW, bi, bo); a depthwise one (`group` = C) has w (C/b, 1, KH, KW, 1, b), a grouped one
    w (O/bo, (C/group)/bi, KH, KW, bi, bo)."""
    group = attrs.get("group", 1)
    if x.ndim == 4 and is_depthwise_nchwc(x.shape, w.shape, group):  # padded channels: zeros
        x = to_blocked(pad_channels(x, group), w.shape[5])
    elif x.ndim == 4:
        x = to_blocked(x, w.shape[4])
    if group != 1 and not is_depthwise_nchwc(x.shape, w.shape, group):
        ins, outs = x.shape[1] // group, w.shape[0] // group  # blocks per group
        one = {**attrs, "group": 1}
        parts = [
            conv_nchwc(one, x[:, g * ins : (g + 1) * ins], w[g * outs : (g + 1) * outs])
            for g in range(group)
        ]
        y = np.concatenate(parts, axis=1)
        if b is not None:
            y = y + b.reshape(1, b.shape[0], 1, 1, b.shape[1])
        return np.ascontiguousarray(y, dtype=x.dtype)
    begin, end, strides, dilations, outs = window_geometry(attrs, x.shape[2:4], w.shape[2:4])
    xp = np.pad(x, [(0, 0), (0, 0), *zip(begin, end, strict=True), (0, 0)])
    extents = [(k - 1) * d + 1 for k, d in zip(w.shape[2:4], dilations, strict=True)]
    win = sliding_window_view(xp, extents, axis=(2, 3))  # N, Cb, OH', OW', bi, KH', KW'
    win = win[
        :,
        :,
        : (outs[0] - 1) * strides[0] + 1 : strides[0],
        : (outs[1] - 1) * strides[1] + 1 : strides[1],
        :,
        :: dilations[0],
        :: dilations[1],
    ]
    if group != 1:  # depthwise: w (C/b, 1, KH, KW, 1, b)
        y = np.einsum("ncyxbij,cijb->ncyxb", win, w[:, 0, :, :, 0, :])
    else:
        y = np.tensordot(win, w, axes=([1, 5, 6, 4], [1, 2, 3, 4]))  # N, OH, OW, Ob, bo
        y = y.transpose(0, 3, 1, 2, 4)
    if b is not None:
        y = y + b.reshape(1, b.shape[0], 1, 1, b.shape[1])
    return np.ascontiguousarray(_real_channels(attrs, y), dtype=x.dtype)


def _real_channels(attrs: dict[str, Any], y: np.ndarray) -> np.ndarray:
    """`y` (N, O/bo, OH, OW, bo) with the channels from `channels` on (the padding of a
    padded output) set to 0: computed, they are 0 x the input, NaN where it is infinite."""
    real = attrs.get("channels", 0)
    if not real or real >= y.shape[1] * y.shape[4]:
        return y
    index = np.arange(y.shape[1])[:, None] * y.shape[4] + np.arange(y.shape[4])
    return np.where((index >= real)[None, :, None, None, :], np.zeros((), y.dtype), y)


register(
    "ConvNCHWc",
    Pattern.OUT_ELEMWISE_FUSABLE,
    _conv_nchwc_type,
    conv_nchwc,
    inputs=(2, 3),
    attrs={"auto_pad": "NOTSET", "dilations": None, "group": 1, "pads": None, "strides": None,
           "channels": 0},
)  # fmt: skip

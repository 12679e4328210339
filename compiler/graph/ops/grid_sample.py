"""GridSample (spatial transformers, optical-flow warping, deformable sampling): each output
pixel samples the input at the normalized position the grid gives, for 2-D images.

The arithmetic is ONNX's reference (PyTorch's grid_sampler): a grid value `g` in [-1, 1] maps to
`x = (g + 1) / 2 * (size - 1)` with `align_corners`, else `((g + 1) * size - 1) / 2`; nearest
rounds half to even; a coordinate outside [0, size - 1] (align_corners) or [-0.5, size - 0.5]
is clamped ("border") or reflected ("reflection") first; linear interpolates along x on the two
rows, then along y; a pixel index outside the image reads 0 ("zeros"), the nearest edge pixel
("border") or its reflection ("reflection"). Cubic is refused by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import TensorType
from ..registry import Pattern, UnsupportedOpError, register

MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest"}  # opset 16 and 20 names
PADDINGS = ("zeros", "border", "reflection")


def check_attrs(attrs: dict[str, Any]) -> tuple[str, str, bool]:
    """(mode: 'linear' or 'nearest', padding mode, align_corners), checked."""
    mode = str(attrs["mode"])
    if mode not in MODES:
        raise ValueError(
            f"GridSample mode must be one of {', '.join(MODES)}, not {mode!r} (cubic is not "
            "built yet)"
        )
    padding = str(attrs["padding_mode"])
    if padding not in PADDINGS:
        raise ValueError(f"GridSample padding_mode must be one of {PADDINGS}, not {padding!r}")
    return MODES[mode], padding, bool(attrs["align_corners"])


def _type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    check_attrs(attrs)
    x, grid = types
    if len(x.shape) == 5:
        raise UnsupportedOpError([("GridSample on volumes (only 2-D images are built)", "?", None)])
    if len(x.shape) != 4 or len(grid.shape) != 4 or grid.shape[-1] != 2:
        raise ValueError(
            f"GridSample takes a 4-D input and an [N, H, W, 2] grid (2-D images; N-D is not "
            f"built yet), not {list(x.shape)} and {list(grid.shape)}"
        )
    if grid.shape[0] != x.shape[0]:
        raise ValueError(f"GridSample grid batch {grid.shape[0]} must be the input's {x.shape[0]}")
    if x.dtype != grid.dtype:
        raise ValueError(
            f"GridSample input and grid must have one dtype, not {x.dtype}, {grid.dtype}"
        )
    return [TensorType((*x.shape[:2], *grid.shape[1:3]), x.dtype)]


def bounds(size: int, align_corners: bool) -> tuple[float, float]:
    """The interval a coordinate is clamped or reflected into."""
    return (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)


def reflect_np(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """ONNX's reflection of `v` by the nearer border until it lies in [lo, hi]."""
    span = hi - lo
    if span <= 0:
        return np.full_like(v, lo)
    below, above = v < lo, v > hi
    dx = np.where(below, lo - v, np.where(above, v - hi, 0)).astype(v.dtype)
    n = np.trunc(dx / span)
    r = dx - n * span
    even = np.fmod(n, 2) == 0
    low_side = np.where(even, lo + r, hi - r)
    high_side = np.where(even, hi - r, lo + r)
    return np.where(below, low_side, np.where(above, high_side, v)).astype(v.dtype)


def grid_sample(attrs: dict[str, Any], x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """numpy, vectorized over all output pixels (module docstring)."""
    mode, padding, align = check_attrs(attrs)
    n_, c_, h, w = x.shape
    coords = []
    for g, size in ((grid[..., 0], w), (grid[..., 1], h)):
        g = g.astype(np.float32)
        v = (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2
        v = np.rint(v) if mode == "nearest" else v
        lo, hi = bounds(size, align)
        if padding == "border":
            v = np.where((v < lo) | (v > hi), np.clip(v, 0, size - 1), v)
        elif padding == "reflection":
            v = reflect_np(v, lo, hi)
        coords.append(v.astype(np.float32))
    gx, gy = coords
    batch = np.arange(n_).reshape(n_, 1, 1)

    def pixel(iy: np.ndarray, ix: np.ndarray) -> np.ndarray:  # [N, C, Ho, Wo]
        if padding == "zeros":
            valid = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
        else:
            if padding == "reflection":
                ix = np.trunc(reflect_np(ix.astype(np.float32), *bounds(w, align))).astype(int)
                iy = np.trunc(reflect_np(iy.astype(np.float32), *bounds(h, align))).astype(int)
            valid = np.ones(ix.shape, bool)
        cx, cy = np.clip(ix, 0, w - 1), np.clip(iy, 0, h - 1)
        values = x[batch, :, cy, cx]  # [N, Ho, Wo, C]
        values = np.where(valid[..., None], values, 0).astype(x.dtype)
        return np.moveaxis(values, -1, 1)

    if mode == "nearest":
        return pixel(gy.astype(np.int64), gx.astype(np.int64))
    x0, y0 = np.floor(gx), np.floor(gy)
    wx1, wy1 = (gx - x0)[:, None], (gy - y0)[:, None]
    wx0, wy0 = 1 - wx1, 1 - wy1
    ix0, iy0 = x0.astype(np.int64), y0.astype(np.int64)
    row0 = wx0 * pixel(iy0, ix0) + wx1 * pixel(iy0, ix0 + 1)
    row1 = wx0 * pixel(iy0 + 1, ix0) + wx1 * pixel(iy0 + 1, ix0 + 1)
    return (wy0 * row0 + wy1 * row1).astype(x.dtype)


register(
    "GridSample",
    Pattern.OPAQUE,
    _type,
    grid_sample,
    inputs=(2, 2),
    attrs={"align_corners": 0, "mode": "linear", "padding_mode": "zeros"},
)

__all__ = ["MODES", "PADDINGS", "bounds", "check_attrs", "grid_sample", "reflect_np"]

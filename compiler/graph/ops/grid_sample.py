"""GridSample (spatial transformers, optical-flow warping, deformable sampling): each output
pixel samples the input at the normalized position the grid gives, for 2-D images and 3-D
volumes.

The arithmetic is ONNX's reference (PyTorch's grid_sampler): a grid value `g` in [-1, 1] maps to
`x = (g + 1) / 2 * (size - 1)` with `align_corners`, else `((g + 1) * size - 1) / 2` (the grid's
last axis lists the coordinates innermost axis first: x, y, z); nearest rounds half to even; a
coordinate outside [0, size - 1] (align_corners) or [-0.5, size - 0.5] is clamped ("border",
but in cubic mode, where onnxruntime and PyTorch clamp only each pixel's index and onnx's
reference evaluator the coordinate too) or reflected ("reflection") first; linear and cubic
interpolate separably, the innermost axis first, over 2 or 4 pixels an axis (`axis_taps`:
offsets from the floor and their weights, cubic's Keys' kernel with a = -0.75, shared with
Resize); a pixel index outside the input reads 0 ("zeros"), the nearest edge pixel ("border")
or its reflection ("reflection").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import TensorType
from ..registry import Pattern, register
from .resize import cubic_far, cubic_near

# opset 16 and 20 names
MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic",
         "cubic": "cubic"}  # fmt: skip
PADDINGS = ("zeros", "border", "reflection")
CUBIC_A = -0.75  # PyTorch's and ONNX's
SPATIAL_RANKS = (2, 3)  # images and volumes


def check_attrs(attrs: dict[str, Any]) -> tuple[str, str, bool]:
    """(mode: 'linear', 'nearest' or 'cubic', padding mode, align_corners), checked."""
    mode = str(attrs["mode"])
    if mode not in MODES:
        raise ValueError(f"GridSample mode must be one of {', '.join(MODES)}, not {mode!r}")
    padding = str(attrs["padding_mode"])
    if padding not in PADDINGS:
        raise ValueError(f"GridSample padding_mode must be one of {PADDINGS}, not {padding!r}")
    return MODES[mode], padding, bool(attrs["align_corners"])


def axis_taps(mode: str, t: Any) -> list[tuple[int, Any]]:
    """(offset from the floor, weight) of each pixel an axis interpolates, `t` the coordinate's
    fraction above its floor (numpy arrays or tensor expressions alike)."""
    if mode == "linear":
        return [(0, 1.0 - t), (1, t)]
    return [
        (-1, cubic_far(t + 1.0, CUBIC_A)),
        (0, cubic_near(t, CUBIC_A)),
        (1, cubic_near(1.0 - t, CUBIC_A)),
        (2, cubic_far(2.0 - t, CUBIC_A)),
    ]


def _type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    check_attrs(attrs)
    x, grid = types
    rank = len(x.shape) - 2
    if rank not in SPATIAL_RANKS or len(grid.shape) != rank + 2 or grid.shape[-1] != rank:
        raise ValueError(
            f"GridSample takes a 4-D input and an [N, H, W, 2] grid or a 5-D input and an "
            f"[N, D, H, W, 3] grid, not {list(x.shape)} and {list(grid.shape)}"
        )
    if grid.shape[0] != x.shape[0]:
        raise ValueError(f"GridSample grid batch {grid.shape[0]} must be the input's {x.shape[0]}")
    if x.dtype != grid.dtype:
        raise ValueError(
            f"GridSample input and grid must have one dtype, not {x.dtype}, {grid.dtype}"
        )
    return [TensorType((*x.shape[:2], *grid.shape[1:-1]), x.dtype)]


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
    dims = x.shape[2:]
    rank = len(dims)
    coords = []
    for axis, size in enumerate(dims):
        g = grid[..., rank - 1 - axis].astype(np.float32)
        v = (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2
        v = np.rint(v) if mode == "nearest" else v
        lo, hi = bounds(size, align)
        if padding == "border" and mode != "cubic":
            v = np.where((v < lo) | (v > hi), np.clip(v, 0, size - 1), v)
        elif padding == "reflection":
            v = reflect_np(v, lo, hi)
        coords.append(v.astype(np.float32))
    batch = np.arange(x.shape[0]).reshape(-1, *(1,) * rank)

    def pixel(index: list[np.ndarray]) -> np.ndarray:  # [N, C, *outs]
        valid = np.ones(index[0].shape, bool)
        clamped = []
        for i, size in zip(index, dims, strict=True):
            if padding == "zeros":
                valid &= (i >= 0) & (i < size)
            elif padding == "reflection":
                i = np.trunc(reflect_np(i.astype(np.float32), *bounds(size, align))).astype(int)
            clamped.append(np.clip(i, 0, size - 1))
        values = x[(batch, slice(None), *clamped)]  # [N, *outs, C]
        values = np.where(valid[..., None], values, 0).astype(x.dtype)
        return np.moveaxis(values, -1, 1)

    if mode == "nearest":
        return pixel([c.astype(np.int64) for c in coords])
    floors = [np.floor(c) for c in coords]
    taps = [axis_taps(mode, (c - f)[:, None]) for c, f in zip(coords, floors, strict=True)]
    starts = [f.astype(np.int64) for f in floors]

    def interpolate(axis: int, index: list[np.ndarray]) -> np.ndarray:
        """The innermost axes first: ONNX's reference order of the sums."""
        if axis == rank:
            return pixel(index)
        total = None
        for offset, weight in taps[axis]:
            term = weight * interpolate(axis + 1, [*index, starts[axis] + offset])
            total = term if total is None else total + term
        return total

    return interpolate(0, []).astype(x.dtype)


register(
    "GridSample",
    Pattern.OPAQUE,
    _type,
    grid_sample,
    inputs=(2, 2),
    attrs={"align_corners": 0, "mode": "linear", "padding_mode": "zeros"},
)

__all__ = ["MODES", "PADDINGS", "axis_taps", "bounds", "check_attrs", "grid_sample", "reflect_np"]

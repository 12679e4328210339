"""RoiAlign (opsets 10 and 16) as a composite: each region's bilinear samples become, per axis,
a [regions, bins x samples, length] table of corner weights (Equal against an iota, scaled by
the weight), so with the regions' images gathered the average is two batched MatMuls
(`Wy @ X @ Wx^T`) and the maximum a MatMul gather of the corners then a ReduceMax. The regions
may be computed at run time when `sampling_ratio` fixes the samples per bin; the adaptive
count (`sampling_ratio=0`, which depends on each region's size) needs them constant.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ir import DataDependentShapeError, GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter

_FLOATS = ("bfloat16", "float16", "float32", "float64")
_ATTRS = {
    "coordinate_transformation_mode": "half_pixel",
    "mode": "avg",
    "output_height": 1,
    "output_width": 1,
    "sampling_ratio": 0,
    "spatial_scale": 1.0,
}


def _check(attrs: dict[str, Any], x: tuple, rois: tuple, index: tuple) -> None:
    if attrs["mode"] not in ("avg", "max"):
        raise ValueError(f"RoiAlign attribute mode must be 'avg' or 'max', not {attrs['mode']!r}")
    ctm = attrs["coordinate_transformation_mode"]
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise ValueError(
            "RoiAlign attribute coordinate_transformation_mode must be 'half_pixel' or "
            f"'output_half_pixel', not {ctm!r}"
        )
    for key in ("output_height", "output_width"):
        if attrs[key] < 1:
            raise ValueError(f"RoiAlign attribute {key} must be positive, not {attrs[key]}")
    if attrs["sampling_ratio"] < 0:
        raise ValueError(
            f"RoiAlign attribute sampling_ratio must be 0 (adaptive) or more, not "
            f"{attrs['sampling_ratio']}"
        )
    if len(x) != 4 or len(rois) != 2 or rois[1] != 4 or index != (rois[0],):
        raise ValueError(
            f"RoiAlign inputs must have shapes [N, C, H, W], [R, 4] and [R], not {x}, {rois} "
            f"and {index}"
        )


def _roi_align_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x, rois, index = types
    _check(attrs, x.shape, rois.shape, index.shape)
    if x.dtype not in _FLOATS:
        raise ValueError(f"RoiAlign input must be a float type, not {x.dtype}")
    if index.dtype != "int64":
        raise ValueError(f"RoiAlign batch_indices must be int64, not {index.dtype}")
    if consts[2] is not None and ((consts[2] < 0) | (consts[2] >= x.shape[0])).any():
        raise ValueError(f"RoiAlign batch_indices must lie in [0, {x.shape[0] - 1}]")
    if attrs["sampling_ratio"] == 0 and consts[1] is None:  # (compiled: run in the tail)
        raise DataDependentShapeError(
            "RoiAlign with sampling_ratio 0 takes a number of samples per bin that depends on "
            "each region's size: its rois must be constants"
        )
    shape = (rois.shape[0], x.shape[1], attrs["output_height"], attrs["output_width"])
    return [TensorType(shape, x.dtype)]


def _bounds(attrs: dict[str, Any], rois: np.ndarray, col: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, size) of the regions along one axis (col 0: x, 1: y), in input pixels."""
    offset = 0.5 if attrs["coordinate_transformation_mode"] == "half_pixel" else 0.0
    scale = np.float32(attrs["spatial_scale"])
    start = rois[:, col] * scale - np.float32(offset)
    size = rois[:, col + 2] * scale - np.float32(offset) - start
    if not offset:
        size = np.maximum(size, 1)
    return start, size


def _grid(attrs: dict[str, Any], size: np.ndarray, bins: int) -> np.ndarray:
    if attrs["sampling_ratio"] > 0:
        return np.full(size.shape, attrs["sampling_ratio"], np.int64)
    return np.array([max(math.ceil(s / bins), 0) for s in size], np.int64)


def _samples(
    attrs: dict[str, Any], start: float, size: float, bins: int, grid: int, length: int
) -> list[list[tuple[int, int, float, float]]]:
    """Per bin, its samples as (low, high, low weight, high weight) (weights 0 outside)."""
    out = []
    step = size / bins
    for p in range(bins):
        row = []
        for i in range(grid):
            c = start + p * step + (i + 0.5) * step / grid
            if c < -1 or c > length:
                row.append((0, 0, 0.0, 0.0))
                continue
            c = min(max(c, 0.0), length - 1)
            low = int(c)
            high = min(low + 1, length - 1)
            row.append((low, high, 1 - (c - low), c - low))
        out.append(row)
    return out


def roi_align(attrs: dict[str, Any], x: np.ndarray, rois: np.ndarray, index: np.ndarray):
    """Average (or maximum of corner-weighted values) of bilinear samples per output bin."""
    attrs = {**_ATTRS, **attrs}
    ph, pw = attrs["output_height"], attrs["output_width"]
    y = np.zeros((rois.shape[0], x.shape[1], ph, pw), np.float64)
    ys, hs = _bounds(attrs, rois, 1)
    xs, ws = _bounds(attrs, rois, 0)
    gh, gw = _grid(attrs, hs, ph), _grid(attrs, ws, pw)
    for r in range(rois.shape[0]):
        if not gh[r] or not gw[r]:  # a region of no samples: 0
            continue
        image = x[index[r]].astype(np.float64)
        rows = np.array(_samples(attrs, ys[r], hs[r], ph, gh[r], x.shape[2]))  # [ph, gh, 4]
        cols = np.array(_samples(attrs, xs[r], ws[r], pw, gw[r], x.shape[3]))  # [pw, gw, 4]
        at_rows = rows[..., :2].astype(np.int64)[:, :, :, None, None, None]
        at_cols = cols[..., :2].astype(np.int64)[None, None, None]
        # every sample's four corners, weighted: [C, ph, gh, 2, pw, gw, 2]
        weights = rows[..., 2:][:, :, :, None, None, None] * cols[..., 2:][None, None, None]
        corners = weights * image[:, at_rows, at_cols]
        if attrs["mode"] == "avg":
            y[r] = corners.sum(axis=(2, 3, 5, 6)) / (gh[r] * gw[r])
        else:
            y[r] = corners.max(axis=(2, 3, 5, 6))
    return y.astype(x.dtype)


def _axis_weights(e: Emitter, node: Node, col: int, bins: int, length: int) -> tuple:
    """Per axis: ([R, bins * grid, 2] corner indices, [R, bins * grid, 2] weights, grid, the
    per-region divisor or None, [R, bins * grid, 2] additive mask of unused samples or None)."""
    attrs = {**_ATTRS, **node.attr_dict}
    rois = node.inputs[1]
    dtype = e.dtype(node.inputs[0])
    half = attrs["coordinate_transformation_mode"] == "half_pixel"

    def scalar(v: float) -> str:
        return e.const(np.array(v, dtype), "k")

    scale = scalar(attrs["spatial_scale"])
    start = e.add("Mul", [e.slice(rois, 1, col, col + 1), scale])
    end = e.add("Mul", [e.slice(rois, 1, col + 2, col + 3), scale])
    if half:
        start, end = (e.add("Sub", [v, scalar(0.5)]) for v in (start, end))
    size = e.add("Sub", [end, start])
    if not half:
        size = e.add("Max", [size, scalar(1.0)])
    step = e.add("Div", [size, scalar(bins)])
    constant = e.b.constants.get(rois)
    if attrs["sampling_ratio"] > 0:
        grids = np.full(1, attrs["sampling_ratio"])
    else:
        _, sizes = _bounds(attrs, constant.astype(np.float32), col)
        grids = _grid(attrs, sizes, bins)
    grid = max(int(grids.max(initial=0)), 1)
    i = np.arange(grid)
    offsets = np.arange(bins)[None, :, None] + (i + 0.5)[None, None, :] / np.maximum(
        grids, 1
    ).reshape(-1, 1, 1)  # [R or 1, bins, grid]
    used = np.broadcast_to(i[None, None, :] < grids.reshape(-1, 1, 1), offsets.shape)
    offsets = offsets.reshape(offsets.shape[0], bins * grid)
    c = e.add("Add", [start, e.add("Mul", [step, e.const(offsets.astype(dtype), "offsets")])])
    inside = e.add("And", [e.add("GreaterOrEqual", [c, scalar(-1.0)]),
                           e.add("LessOrEqual", [c, scalar(length)])])  # fmt: skip
    c = e.add("Min", [e.add("Max", [c, scalar(0.0)]), scalar(length - 1)])
    low = e.add("Floor", [c])
    high = e.add("Min", [e.add("Add", [low, scalar(1.0)]), scalar(length - 1)])
    frac = e.add("Sub", [c, low])
    keep = e.add("Cast", [inside], {"to": dtype})
    if not used.all():
        keep = e.add("Mul", [keep, e.const(used.reshape(-1, bins * grid).astype(dtype), "used")])
    w_low = e.add("Mul", [e.add("Sub", [scalar(1.0), frac]), keep])
    w_high = e.add("Mul", [frac, keep])
    corners = e.stack([low, high], 2)
    weights = e.stack([w_low, w_high], 2)
    divisor = None
    if attrs["sampling_ratio"] == 0:
        divisor = np.maximum(grids, 1).astype(dtype)
    bias = None
    if not used.all():
        # a region with no samples (zero size) gives 0, as onnxruntime: its first sample,
        # weighted 0, stays in the maximum
        counted = used | ((np.arange(grid) == 0) & (grids.reshape(-1, 1, 1) == 0))
        mask = np.where(counted.reshape(-1, bins * grid), 0, -np.inf).astype(dtype)
        bias = np.repeat(mask[..., None], 2, axis=2)
    return corners, weights, grid, divisor, bias


def _one_hot(e: Emitter, corners: str, length: int, dtype: str) -> str:
    """[R, K, 2] float indices -> [R, K, 2, length] one-hot rows."""
    iota = e.const(np.arange(length, dtype=dtype), "iota")
    hit = e.add("Equal", [e.add("Unsqueeze", [corners, e.ints([3], "axes")]), iota])
    return e.add("Cast", [hit], {"to": dtype})


def _expand_roi_align(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, _, index = node.inputs
    attrs = {**_ATTRS, **node.attr_dict}
    n, channels, height, width = e.shape(x)
    dtype = e.dtype(x)
    ph, pw = attrs["output_height"], attrs["output_width"]
    regions = e.shape(index)[0]
    images = e.add("Gather", [x, index], {"axis": 0})  # [R, C, H, W]
    rows = _axis_weights(e, node, 1, ph, height)
    cols = _axis_weights(e, node, 0, pw, width)
    if attrs["mode"] == "avg":
        wy = _average_weights(e, rows, regions, ph, height, dtype)  # [R, 1, PH, H]
        wx = _average_weights(e, cols, regions, pw, width, dtype)  # [R, 1, PW, W]
        part = e.add("MatMul", [wy, images])
        e.add("MatMul", [part, e.transpose(wx, [0, 1, 3, 2])], outputs=[node.outputs[0]])
        return
    values = []
    for (corners, weights, grid, _, bias), length in ((rows, height), (cols, width)):
        hot = e.reshape(_one_hot(e, corners, length, dtype), [regions, 1, -1, length])
        values.append((hot, e.reshape(weights, [regions, 1, -1]), grid, bias))
    (ey, wy, gy, by), (ex, wx, gx, bx) = values
    picked = e.add("MatMul", [e.add("MatMul", [ey, images]), e.transpose(ex, [0, 1, 3, 2])])
    outer = e.add("Mul", [e.reshape(wy, [regions, 1, ph * gy * 2, 1]),
                          e.reshape(wx, [regions, 1, 1, pw * gx * 2])])  # fmt: skip
    weighted = e.add("Mul", [picked, outer])  # [R, C, PH * gy * 2, PW * gx * 2]
    for bias, shape in ((by, [-1, 1, ph * gy * 2, 1]), (bx, [-1, 1, 1, pw * gx * 2])):
        if bias is not None:
            weighted = e.add("Add", [weighted, e.const(bias.reshape(shape), "unused")])
    grouped = e.reshape(weighted, [regions, channels, ph, gy * 2, pw, gx * 2])
    e.add("ReduceMax", [grouped, e.ints([3, 5], "axes")], {"keepdims": 0},
          outputs=[node.outputs[0]])  # fmt: skip


def _average_weights(e: Emitter, axis: tuple, regions: int, bins: int, length: int, dtype: str):
    """[R, 1, bins, length]: the mean over a bin's samples of their corner weights."""
    corners, weights, grid, divisor, _ = axis
    hot = _one_hot(e, corners, length, dtype)  # [R, K, 2, L]
    weighted = e.add("Mul", [hot, e.add("Unsqueeze", [weights, e.ints([3], "axes")])])
    table = e.reduce_sum(e.reshape(weighted, [regions, bins, grid * 2, length]), [2])
    if divisor is None:
        divisor = np.array(grid, dtype)
    else:
        divisor = divisor.reshape(-1, 1, 1)
    table = e.add("Div", [table, e.const(divisor, "count")])
    return e.reshape(table, [regions, 1, bins, length])


register("RoiAlign", Pattern.OPAQUE, _roi_align_type, roi_align, attrs=_ATTRS, inputs=(3, 3),
         expand=_expand_roi_align)  # fmt: skip

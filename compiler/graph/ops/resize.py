"""Resize (ONNX opsets 13 to 19): nearest, linear and cubic interpolation over any axes.

Resize is separable: each resized axis maps every output position to a few input positions
(taps) with weights, fixed by the static shapes and constant scales/sizes. `resize_plan` computes
those taps once; the numpy kernel applies them axis by axis and the native lowering
(`strategy/resize.py`) reads the same tables, so both agree by construction.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import TensorType, check_shape
from ..registry import Pattern, register
from .shape import normalize_axis

MODES = ("nearest", "linear", "cubic")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
    "tf_half_pixel_for_nn",  # opsets 11 and 12 only (tf2onnx's nearest resizes): (y + 0.5) / s
)
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


@dataclass(frozen=True)
class AxisTaps:
    """How one resized axis reads its input: output position i reads input positions
    `index[i, k]` with weights `weight[i, k]` (None for nearest: one tap, weight 1). A row whose
    `index[i, 0]` is -1 lies outside the crop (tf_crop_and_resize) and takes the
    extrapolation value; its other indices are valid positions."""

    axis: int
    index: np.ndarray  # int64 [out, taps]
    weight: np.ndarray | None  # float64 [out, taps]


@dataclass(frozen=True)
class ResizePlan:
    shape: tuple[int, ...]
    axes: tuple[AxisTaps, ...]  # only the axes that change
    extrapolation: float


def _choice(attrs: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = attrs[key]
    if value not in allowed:
        raise ValueError(f"Resize {key} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def _floats(value: Any) -> list[float] | None:
    if value is None or np.asarray(value).size == 0:
        return None
    return [float(v) for v in np.asarray(value, np.float64).reshape(-1)]


def _resized_axes(attrs: dict[str, Any], rank: int) -> list[int]:
    if attrs.get("axes") is None:
        return list(range(rank))
    axes = [normalize_axis(a, rank, "Resize axis") for a in attrs["axes"]]
    if len(set(axes)) != len(axes):
        raise ValueError(f"Resize axes must be distinct, not {attrs['axes']}")
    return axes


def _scales_and_shape(
    attrs: dict[str, Any], shape: tuple[int, ...], axes: list[int], scales: Any, sizes: Any
) -> tuple[list[float], list[int]]:
    """Per-axis scale factors (the coordinate transform's) and the output shape."""
    given_scales, given_sizes = _floats(scales), _floats(sizes)
    if (given_scales is None) == (given_sizes is None):
        raise ValueError("Resize must have exactly one of scales and sizes")
    count = len(given_scales if given_scales is not None else given_sizes)
    if count != len(axes):
        raise ValueError(f"Resize scales/sizes must have {len(axes)} values, not {count}")
    factor, out = [1.0] * len(shape), list(shape)
    if given_scales is not None:
        if any(s <= 0 for s in given_scales):
            raise ValueError(f"Resize scales must be positive, not {given_scales}")
        for a, s in zip(axes, given_scales, strict=True):
            # in float32, as onnxruntime (and torch, in float64 from the unrounded factor):
            # 10 * 0.7f is 7 there, 6.99999988 in float64
            factor[a], out[a] = s, math.floor(np.float32(s) * np.float32(shape[a]))
        return factor, out
    targets = [int(s) for s in given_sizes]
    if any(t < 0 for t in targets) or any(shape[a] == 0 for a in axes):
        raise ValueError(f"Resize sizes must be non-negative over non-empty axes, not {targets}")
    ratios = [t / shape[a] for a, t in zip(axes, targets, strict=True)]
    policy = _choice(attrs, "keep_aspect_ratio_policy", ASPECT_POLICIES)
    if policy == "stretch":
        for a, t, r in zip(axes, targets, ratios, strict=True):
            factor[a], out[a] = r, t
        return factor, out
    common = min(ratios) if policy == "not_larger" else max(ratios)
    for a in axes:  # sizes rounded half up, as the spec's round_int
        factor[a], out[a] = common, int(common * shape[a] + 0.5)
    return factor, out


#: coordinate modes whose nearest picks onnxruntime computes in float32
_SINGLE_MODES = ("asymmetric", "half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn")


def _source_coords(
    mode: str, out_len: int, in_len: int, scale: float, roi: tuple[float, float], single: bool
) -> np.ndarray:
    """The input coordinate of each output position (the coordinate transformation); in
    float32 when `single`, as onnxruntime and torch compute it: a nearest pick is decided by
    that rounding (scale 0.6: 3 / 0.6f is 4.9999998 in float64 and 5 in float32)."""
    if single and mode in _SINGLE_MODES:
        y32, s32, half = np.arange(out_len, dtype=np.float32), np.float32(scale), np.float32(0.5)
        if mode == "asymmetric":
            return (y32 / s32).astype(np.float64)
        if mode == "tf_half_pixel_for_nn":
            return ((y32 + half) / s32).astype(np.float64)
        if mode == "half_pixel" or scale * in_len != 1:
            return ((y32 + half) / s32 - half).astype(np.float64)
    y = np.arange(out_len, dtype=np.float64)
    length = scale * in_len  # the output length before truncation
    if mode == "align_corners":
        # the output's own (truncated) length, as onnxruntime and torch take it: with a scale
        # making 4.5 rows of 3 they map row 3 to input row 2 (onnx's reference evaluator divides
        # by 3.5, a silent shift of every row for torch's `align_corners=True` exports)
        return np.zeros(out_len) if out_len == 1 else y * (in_len - 1) / (out_len - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        if length == 1:
            return np.full(out_len, (hi - lo) * (in_len - 1) / 2 + lo * (in_len - 1))
        return y * (hi - lo) * (in_len - 1) / (length - 1) + lo * (in_len - 1)
    if mode == "pytorch_half_pixel" and length == 1:
        # the spec's `length_resized > 1 ? ... : 0` (onnxruntime's; onnx's reference evaluator
        # takes -0.5, which only a cubic resize to one sample can tell from 0)
        return np.zeros(out_len)
    offset = 0.0
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / length)
    return offset + (y + 0.5) / scale - 0.5


def _nearest(x: np.ndarray, how: str) -> np.ndarray:
    below = np.floor(x)
    frac = x - below
    up = {
        "round_prefer_floor": frac > 0.5,
        "round_prefer_ceil": frac >= 0.5,
        "floor": np.zeros_like(frac, bool),
        "ceil": frac > 0,
    }[how]
    return (below + up).astype(np.int64)


def cubic_near(d: Any, a: float) -> Any:
    """Keys' cubic convolution weight at a distance `d` in [0, 1] (arrays or expressions)."""
    return ((a + 2) * d - (a + 3)) * d * d + 1.0


def cubic_far(d: Any, a: float) -> Any:
    """Keys' cubic convolution weight at a distance `d` in [1, 2]."""
    return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a


def _cubic_kernel(a: float) -> Callable[[np.ndarray], np.ndarray]:
    def kernel(d: np.ndarray) -> np.ndarray:
        d = np.abs(d)
        return np.where(d <= 1, cubic_near(d, a), np.where(d < 2, cubic_far(d, a), 0.0))

    return kernel


def _linear_kernel(d: np.ndarray) -> np.ndarray:
    return np.clip(1 - np.abs(d), 0.0, 1.0)


def _filter_taps(
    attrs: dict[str, Any], x: np.ndarray, in_len: int, scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """The taps of linear/cubic interpolation at coordinates `x`: the `n` input positions
    nearest each coordinate (ties to the lower), weighted by the kernel; with antialias the
    kernel is stretched by 1/scale when downsampling and the weights normalized."""
    cubic = attrs["mode"] == "cubic"
    kernel = _cubic_kernel(attrs["cubic_coeff_a"]) if cubic else _linear_kernel
    support = 2 if cubic else 1
    stretch = min(scale, 1.0) if attrs["antialias"] else 1.0
    half = -math.floor(-support / stretch)  # taps on each side of the coordinate
    below = np.floor(x)
    first = np.where(x == below, x - half, below - half + 1).astype(np.int64)
    index = first[:, None] + np.arange(2 * half)[None, :]
    weight = kernel((index - x[:, None]) * stretch)
    if attrs["antialias"]:
        weight = weight / weight.sum(axis=1, keepdims=True)
    if attrs["exclude_outside"]:
        weight = np.where((index < 0) | (index >= in_len), 0.0, weight)
        total = weight.sum(axis=1, keepdims=True)
        weight = weight / np.where(total == 0, 1.0, total)
    return index, weight


def _axis_taps(
    attrs: dict[str, Any], axis: int, in_len: int, out_len: int, scale: float, roi: tuple
) -> AxisTaps:
    mode = _choice(attrs, "coordinate_transformation_mode", COORDINATE_MODES)
    x = _source_coords(mode, out_len, in_len, scale, roi, attrs["mode"] == "nearest")
    if attrs["mode"] == "nearest":
        index, weight = _nearest(x, attrs["nearest_mode"])[:, None], None
    else:
        index, weight = _filter_taps(attrs, x, in_len, scale)
    index = np.clip(index, 0, max(in_len - 1, 0))
    if mode == "tf_crop_and_resize":
        index[(x < 0) | (x > in_len - 1), 0] = -1
    return AxisTaps(axis, index, weight)


def _roi(attrs: dict[str, Any], roi: Any, rank: int, axes: list[int]) -> list[tuple]:
    bounds = [(0.0, 1.0)] * rank
    values = _floats(roi)
    if attrs["coordinate_transformation_mode"] != "tf_crop_and_resize":
        return bounds
    if values is None or len(values) != 2 * len(axes):
        raise ValueError(f"Resize tf_crop_and_resize needs a roi of {2 * len(axes)} values")
    for i, a in enumerate(axes):
        bounds[a] = (values[i], values[i + len(axes)])
    return bounds


def _geometry(
    attrs: dict[str, Any], shape: tuple[int, ...], roi: Any, scales: Any, sizes: Any
) -> tuple[list[int], list[float], tuple[int, ...], list[tuple]]:
    """The checked configuration: resized axes, scale factors, output shape (exact, bounded by
    MAX_TENSOR_BYTES before any table is built) and roi bounds per axis."""
    mode = _choice(attrs, "mode", MODES)
    _choice(attrs, "nearest_mode", NEAREST_MODES)
    _choice(attrs, "coordinate_transformation_mode", COORDINATE_MODES)
    if attrs["antialias"] and mode == "nearest":
        raise ValueError("Resize antialias must be 0 in nearest mode")
    axes = _resized_axes(attrs, len(shape))
    factor, out = _scales_and_shape(attrs, shape, axes, scales, sizes)
    return axes, factor, check_shape(out), _roi(attrs, roi, len(shape), axes)


def resize_shape(
    attrs: dict[str, Any], shape: tuple[int, ...], roi: Any, scales: Any, sizes: Any
) -> tuple[int, ...]:
    """The output shape of a Resize node (no tables built)."""
    return _geometry(attrs, shape, roi, scales, sizes)[2]


def resize_plan(
    attrs: dict[str, Any], shape: tuple[int, ...], roi: Any, scales: Any, sizes: Any
) -> ResizePlan:
    """The output shape and the taps of every axis a Resize node changes; ValueError naming the
    attribute or input for a configuration the op does not define."""
    axes, factor, out, bounds = _geometry(attrs, shape, roi, scales, sizes)
    taps = []
    for a in axes:
        if out[a] == shape[a] and factor[a] == 1.0 and bounds[a] == (0.0, 1.0):
            continue  # unchanged
        taps.append(_axis_taps(attrs, a, shape[a], out[a], factor[a], bounds[a]))
    return ResizePlan(out, tuple(taps), float(attrs["extrapolation_value"]))


def _optional_inputs(args: list) -> tuple[Any, Any, Any]:
    roi, scales, sizes = (list(args) + [None] * 3)[:3]
    return roi, scales, sizes


def _resize_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    out = resize_shape(attrs, types[0].shape, *_optional_inputs(consts[1:]))
    return [TensorType(out, types[0].dtype)]


def _apply_axis(data: np.ndarray, taps: AxisTaps, fill: float) -> np.ndarray:
    index = np.maximum(taps.index, 0)
    picked = np.take(data, index, axis=taps.axis)  # the tap axis follows taps.axis
    if taps.weight is None:
        result = np.squeeze(picked, axis=taps.axis + 1)
    else:
        shape = [1] * data.ndim
        shape[taps.axis : taps.axis + 1] = taps.weight.shape
        result = (picked * taps.weight.reshape(shape)).sum(axis=taps.axis + 1)
    outside = taps.index[:, 0] < 0
    if outside.any():
        mask = outside.reshape([-1 if i == taps.axis else 1 for i in range(data.ndim)])
        result = np.where(mask, fill, result)
    return result


def _resize(attrs: dict[str, Any], x: np.ndarray, *args: Any) -> np.ndarray:
    plan = resize_plan(attrs, x.shape, *_optional_inputs(list(args)))
    result = x.astype(np.float64) if attrs["mode"] != "nearest" else x
    for taps in plan.axes:
        result = _apply_axis(result, taps, plan.extrapolation)
    if x.dtype.kind in "iu" and result.dtype != x.dtype:
        info = np.iinfo(x.dtype)
        near = np.rint(result)  # integers exact, the rest truncated (strategy/resize.py)
        result = np.where(np.abs(result - near) < 1e-3, near, np.trunc(result))
        result = np.clip(result, info.min, info.max)
    return np.ascontiguousarray(result.reshape(plan.shape).astype(x.dtype))


register(
    "Resize",
    Pattern.INJECTIVE,
    _resize_type,
    _resize,
    inputs=(1, 4),
    const_inputs=(1, 2, 3),
    attrs={
        "antialias": 0,
        "axes": None,
        "coordinate_transformation_mode": "half_pixel",
        "cubic_coeff_a": -0.75,
        "exclude_outside": 0,
        "extrapolation_value": 0.0,
        "keep_aspect_ratio_policy": "stretch",
        "mode": "nearest",
        "nearest_mode": "round_prefer_floor",
    },
)

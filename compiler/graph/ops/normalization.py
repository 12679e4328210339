"""Normalizations that exported style-transfer nets, GANs, diffusion UNets and older ONNX-zoo
models use: InstanceNormalization, GroupNormalization, LpNormalization,
MeanVarianceNormalization and LRN. All are composite ops (`expand`, run by
`passes.expand_composites`); each also has its own numpy kernel, written from the ONNX spec.

InstanceNormalization and GroupNormalization expand into the LayerNormalization kernel: the
input viewed as one row per (batch, channel) (LayerNormalization from axis 2) or reshaped to one
per (batch, group), normalized over the row with a scale of ones (the same
`(x - mean) / sqrt(var + epsilon)`), then the per-channel scale and bias as a broadcast Mul and
Add."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ....runtime.dtypes import is_floating
from ..ir import GraphBuilder, Node, TensorType
from ..registry import REQUIRED, Pattern, register
from .emit import Emitter
from .shape import normalize_axis


def _floating(op: str, ty: TensorType) -> None:
    if not is_floating(ty.dtype):
        raise ValueError(f"{op} input must be a floating-point tensor, not {ty.dtype}")


def _channel_param(op: str, types: list, index: int, sizes: tuple[int, ...], what: str) -> None:
    ty = types[index] if len(types) > index else None
    if ty is None:
        raise ValueError(f"{op} {what} must be given")
    if ty.shape not in tuple((n,) for n in sizes):
        want = " or ".join(f"({n},)" for n in sorted(set(sizes)))
        raise ValueError(f"{op} {what} must have shape {want}, not {ty.shape}")


def _per_channel(v: np.ndarray, rank: int) -> np.ndarray:
    return v.astype(np.float64).reshape((-1, *(1,) * (rank - 2)))


def _rows_norm(x: np.ndarray, rows: int, eps: float) -> np.ndarray:
    """`x` normalized per row of its `rows`-row view, in float64."""
    z = x.astype(np.float64).reshape(rows, -1)
    mean = z.mean(axis=1, keepdims=True)
    var = ((z - mean) ** 2).mean(axis=1, keepdims=True)
    return ((z - mean) / np.sqrt(var + eps)).reshape(x.shape)


def _expand_rows_norm(b: GraphBuilder, node: Node, rows: int, scale: str, bias: str) -> None:
    """`node`'s output as LayerNormalization over `rows` rows of its input, then the channel
    scale and bias (1-D, one per channel). One row per (instance, channel) needs no Reshape
    (LayerNormalization from axis 2 is that); one per group views the input as [rows, cols]."""
    e = Emitter(b, node)
    x = node.inputs[0]
    shape, dtype = e.shape(x), e.dtype(x)
    cols = math.prod(shape) // rows
    by_channel = rows == shape[0] * shape[1]
    source = x if by_channel else e.reshape(x, [rows, cols])
    tail = list(shape[2:]) if by_channel else [cols]
    ones = e.const(np.ones(tail), "ones", dtype)
    normed = e.add(
        "LayerNormalization",
        [source, ones],
        {"axis": 2 if by_channel else 1, "epsilon": node.attr_dict["epsilon"]},
    )
    channel = [shape[1], *(1,) * (len(shape) - 2)]
    y = e.add("Mul", [e.reshape(normed, shape), e.reshape(scale, channel)])
    e.add("Add", [y, e.reshape(bias, channel)], outputs=[node.outputs[0]])


# ---- InstanceNormalization ------------------------------------------------------------------


def _instance_norm_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    _floating("InstanceNormalization", x)
    if len(x.shape) < 3:
        raise ValueError(f"InstanceNormalization input must be [N, C, D1, ...], not {x.shape}")
    for i, what in ((1, "scale"), (2, "B")):
        _channel_param("InstanceNormalization", types, i, (x.shape[1],), what)
    return [x]


def instance_norm(attrs: dict[str, Any], x: np.ndarray, scale: np.ndarray, bias: np.ndarray):  # noqa: ANN201
    """`scale * (x - mean) / sqrt(var + epsilon) + B`, statistics per instance and channel."""
    y = _rows_norm(x, x.shape[0] * x.shape[1], attrs["epsilon"])
    y = y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)
    return y.astype(x.dtype)


def expand_instance_norm(b: GraphBuilder, node: Node) -> None:
    shape = b.types[node.inputs[0]].shape
    _expand_rows_norm(b, node, shape[0] * shape[1], node.inputs[1], node.inputs[2])


register(
    "InstanceNormalization",
    Pattern.OPAQUE,
    _instance_norm_type,
    instance_norm,
    inputs=(3, 3),
    attrs={"epsilon": 1e-5},
    expand=expand_instance_norm,
)


# ---- GroupNormalization ---------------------------------------------------------------------
# Opset 21 takes a scale and bias per channel, opset 18 one per group; the shape tells which
# (with as many groups as channels the two agree), so both forms import as they are.


def _group_norm_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    _floating("GroupNormalization", x)
    groups = attrs["num_groups"]
    if len(x.shape) < 3:
        raise ValueError(f"GroupNormalization input must be [N, C, D1, ...], not {x.shape}")
    if groups < 1 or x.shape[1] % groups:
        raise ValueError(
            f"GroupNormalization num_groups must be positive and divide the {x.shape[1]} "
            f"channels, not {groups}"
        )
    if attrs["stash_type"] != 1:
        raise ValueError(
            f"GroupNormalization stash_type must be 1 (float32 statistics), not "
            f"{attrs['stash_type']!r}"
        )
    for i, what in ((1, "scale"), (2, "bias")):
        _channel_param("GroupNormalization", types, i, (x.shape[1], groups), what)
    return [x]


def _group_param(v: np.ndarray, channels: int) -> np.ndarray:
    """A per-group (opset 18) parameter repeated over each group's channels."""
    return np.repeat(v, channels // v.shape[0])


def group_norm(attrs: dict[str, Any], x: np.ndarray, scale: np.ndarray, bias: np.ndarray):  # noqa: ANN201
    """Statistics per instance and group of channels, then a per-channel scale and bias."""
    y = _rows_norm(x, x.shape[0] * attrs["num_groups"], attrs["epsilon"])
    c = x.shape[1]
    y = y * _per_channel(_group_param(scale, c), x.ndim)
    y = y + _per_channel(_group_param(bias, c), x.ndim)
    return y.astype(x.dtype)


def expand_group_norm(b: GraphBuilder, node: Node) -> None:
    x, scale, bias = node.inputs
    shape = b.types[x].shape
    groups = node.attr_dict["num_groups"]
    e = Emitter(b, node)
    params = []
    for value in (scale, bias):
        n = e.shape(value)[0]
        if n != shape[1]:  # per group: [G] -> [G, C/G] -> [C]
            grid = e.add("Expand", [e.reshape(value, [n, 1]), e.ints([n, shape[1] // n], "tile")])
            value = e.reshape(grid, [shape[1]])
        params.append(value)
    _expand_rows_norm(b, node, shape[0] * groups, *params)


register(
    "GroupNormalization",
    Pattern.OPAQUE,
    _group_norm_type,
    group_norm,
    inputs=(3, 3),
    attrs={"epsilon": 1e-5, "num_groups": REQUIRED, "stash_type": 1},
    expand=expand_group_norm,
)


# ---- LpNormalization ------------------------------------------------------------------------


def _lp_norm_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    _floating("LpNormalization", x)
    normalize_axis(attrs["axis"], len(x.shape), "LpNormalization axis")
    if attrs["p"] not in (1, 2):
        raise ValueError(f"LpNormalization p must be 1 or 2, not {attrs['p']!r}")
    return [x]


def lp_norm(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """`x` divided by its L1 or L2 norm along `axis`; a zero norm gives zeros (ONNX 22)."""
    z = x.astype(np.float64)
    axis = attrs["axis"]
    if attrs["p"] == 1:
        norm = np.abs(z).sum(axis=axis, keepdims=True)
    else:
        norm = np.sqrt((z * z).sum(axis=axis, keepdims=True))
    return (z / np.where(norm == 0, 1.0, norm)).astype(x.dtype)


def expand_lp_norm(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    (x,) = node.inputs
    attrs = node.attr_dict
    axes = e.ints([attrs["axis"]], "axes")
    op = "ReduceL1" if attrs["p"] == 1 else "ReduceL2"
    norm = e.add(op, [x, axes], {"keepdims": 1})
    zero, one = (e.const(v, hint, e.dtype(x)) for v, hint in ((0, "zero"), (1, "one")))
    safe = e.add("Where", [e.add("Equal", [norm, zero]), one, norm])
    e.add("Div", [x, safe], outputs=[node.outputs[0]])


register(
    "LpNormalization",
    Pattern.OPAQUE,
    _lp_norm_type,
    lp_norm,
    attrs={"axis": -1, "p": 2},
    expand=expand_lp_norm,
)


# ---- MeanVarianceNormalization --------------------------------------------------------------

_MVN_EPSILON = 1e-9  # added to the standard deviation (ONNX's function body)


def _mvn_axes(attrs: dict[str, Any], rank: int) -> tuple[int, ...]:
    axes = [normalize_axis(a, rank, "MeanVarianceNormalization axis") for a in attrs["axes"]]
    if len(set(axes)) != len(axes):
        raise ValueError(f"MeanVarianceNormalization axes must be distinct, not {attrs['axes']}")
    return tuple(sorted(axes))


def _mvn_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    _floating("MeanVarianceNormalization", types[0])
    _mvn_axes(attrs, len(types[0].shape))
    return [types[0]]


def mvn(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """`(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)` over `axes`."""
    axes = _mvn_axes(attrs, x.ndim)
    z = x.astype(np.float64)
    mean = z.mean(axis=axes, keepdims=True)
    var = (z * z).mean(axis=axes, keepdims=True) - mean * mean
    epsilon = float(np.asarray(_MVN_EPSILON, x.dtype))  # 0 in float16, as ONNX casts it
    with np.errstate(invalid="ignore"):
        return ((z - mean) / (np.sqrt(np.maximum(var, 0)) + epsilon)).astype(x.dtype)


def expand_mvn(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, finish = e.float32_input()  # float16 squares overflow; onnxruntime uses float32
    axes = e.ints(_mvn_axes(node.attr_dict, len(e.shape(x))), "axes")
    mean = e.add("ReduceMean", [x, axes], {"keepdims": 1})
    centered = e.add("Sub", [x, mean])
    var = e.add("ReduceMean", [e.add("Mul", [centered, centered]), axes], {"keepdims": 1})
    # ONNX's function body casts epsilon to the input's type: 0 in float16 (0 / 0 is NaN)
    epsilon = float(np.asarray(_MVN_EPSILON, e.dtype(node.inputs[0])))
    eps = e.const(epsilon, "epsilon", e.dtype(x))
    std = e.add("Add", [e.add("Sqrt", [var]), eps])
    finish("Div", [centered, std])


register(
    "MeanVarianceNormalization",
    Pattern.OPAQUE,
    _mvn_type,
    mvn,
    attrs={"axes": (0, 2, 3)},
    expand=expand_mvn,
)


# ---- LRN ------------------------------------------------------------------------------------


def _lrn_window(size: int, channels: int) -> tuple[int, int]:
    """Channels before and after each channel in its window, at most `channels - 1` each: those
    farther away are padding for every channel, so a huge `size` costs nothing."""
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    return min(before, channels - 1), min(after, channels - 1)


def _lrn_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    _floating("LRN", x)
    if len(x.shape) < 3:
        raise ValueError(f"LRN input must be [N, C, D1, ...], not {x.shape}")
    if isinstance(attrs["size"], bool) or not isinstance(attrs["size"], int) or attrs["size"] < 1:
        raise ValueError(f"LRN size must be a positive integer, not {attrs['size']!r}")
    return [x]


def lrn(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """`x / (bias + alpha / size * sum of x^2 over a window of channels) ^ beta`."""
    c = x.shape[1]
    before, after = _lrn_window(attrs["size"], c)
    z = x.astype(np.float64)
    padded = np.pad(z * z, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    total = sum(padded[:, k : k + c] for k in range(before + after + 1))
    scale = attrs["bias"] + attrs["alpha"] / attrs["size"] * total
    return (z / scale ** attrs["beta"]).astype(x.dtype)


def expand_lrn(b: GraphBuilder, node: Node) -> None:
    """The window sum as shifted slices of the zero-padded squares (`size` of them, or fewer
    where the window is wider than the channels)."""
    e = Emitter(b, node)
    x, finish = e.float32_input()
    attrs = node.attr_dict
    size, rank, dtype = attrs["size"], len(e.shape(x)), e.dtype(x)
    c = e.shape(x)[1]
    before, after = _lrn_window(size, c)
    pads = [0, before, *(0,) * (rank - 2), 0, after, *(0,) * (rank - 2)]
    squares = e.add("Mul", [x, x])
    padded = e.add("Pad", [squares, e.ints(pads, "pads")]) if before or after else squares
    total = e.slice(padded, 1, 0, c)
    for k in range(1, before + after + 1):
        total = e.add("Add", [total, e.slice(padded, 1, k, k + c)])
    alpha = e.const(attrs["alpha"] / size, "alpha", dtype)
    bias = e.const(attrs["bias"], "bias", dtype)
    beta = e.const(attrs["beta"], "beta", dtype)
    scale = e.add("Pow", [e.add("Add", [e.add("Mul", [total, alpha]), bias]), beta])
    finish("Div", [x, scale])


register(
    "LRN",
    Pattern.OPAQUE,
    _lrn_type,
    lrn,
    attrs={"alpha": 1e-4, "beta": 0.75, "bias": 1.0, "size": REQUIRED},
    expand=expand_lrn,
)

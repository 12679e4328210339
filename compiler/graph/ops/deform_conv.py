"""DeformConv (opsets 19 and 22, 2-D) as a composite: each kernel tap's sampling points (the
regular grid moved by the run-time offsets) are read with a bilinear, zero-padded GridSample
per offset group, scaled by the mask, and contracted with the weights by a grouped MatMul.
Its numpy kernel samples each point with explicit bilinear arithmetic."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter

_FLOATS = ("bfloat16", "float16", "float32", "float64")
_ATTRS = {
    "dilations": None,
    "group": 1,
    "kernel_shape": None,
    "offset_group": 1,
    "pads": None,
    "strides": None,
}


def _geometry(attrs: dict[str, Any], types: list) -> dict[str, Any]:
    """Checked sizes: kernel, strides, dilations, pads and the output's spatial shape."""
    x, w, offset = (t.shape for t in types[:3])
    if len(x) != 4 or len(w) != 4:
        raise ValueError(f"DeformConv input and weight must be 4-D (2-D images), not {x} and {w}")
    kernel = list(attrs.get("kernel_shape") or w[2:])
    strides = list(attrs.get("strides") or (1, 1))
    dilations = list(attrs.get("dilations") or (1, 1))
    pads = list(attrs.get("pads") or (0, 0, 0, 0))
    if (len(kernel), len(strides), len(dilations), len(pads)) != (2, 2, 2, 4):
        raise ValueError(
            "DeformConv kernel_shape, strides and dilations must have 2 values and pads 4, not "
            f"{kernel}, {strides}, {dilations} and {pads}"
        )
    if tuple(kernel) != tuple(w[2:]):
        raise ValueError(f"DeformConv kernel_shape {kernel} must match the weight's {w[2:]}")
    group, offset_group = attrs.get("group", 1), attrs.get("offset_group", 1)
    if x[1] != w[1] * group or w[0] % group:
        raise ValueError(
            f"DeformConv input channels must be weight dim 1 x group ({w[1]} x {group}) and "
            f"outputs a multiple of group, not {x[1]} and {w[0]}"
        )
    if offset_group < 1 or x[1] % offset_group:
        raise ValueError(
            f"DeformConv offset_group must divide the {x[1]} channels, not {offset_group}"
        )
    out = [
        (n + pads[i] + pads[i + 2] - (k - 1) * d - 1) // s + 1
        for i, (n, k, d, s) in enumerate(zip(x[2:], kernel, dilations, strides, strict=True))
    ]
    taps = kernel[0] * kernel[1]
    if min(out) < 1 or offset != (x[0], offset_group * taps * 2, *out):
        raise ValueError(
            f"DeformConv offset must have shape {(x[0], offset_group * taps * 2, *out)}, not "
            f"{offset}"
        )
    mask = types[4] if len(types) > 4 else None
    if mask is not None and mask.shape != (x[0], offset_group * taps, *out):
        raise ValueError(
            f"DeformConv mask must have shape {(x[0], offset_group * taps, *out)}, not {mask.shape}"
        )
    bias = types[3] if len(types) > 3 else None
    if bias is not None and bias.shape != (w[0],):
        raise ValueError(f"DeformConv bias must have shape {(w[0],)}, not {bias.shape}")
    return {"kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads,
            "out": out, "group": group, "offset_group": offset_group}  # fmt: skip


def _deform_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    if x.dtype not in _FLOATS:
        raise ValueError(f"DeformConv input must be a float type, not {x.dtype}")
    geo = _geometry(attrs, types)
    return [TensorType((x.shape[0], types[1].shape[0], *geo["out"]), x.dtype)]


def _bases(geo: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """[taps, out_h] rows and [taps, out_w] columns of the undeformed sampling points."""
    (kh, kw), (sh, sw), (dh, dw) = geo["kernel"], geo["strides"], geo["dilations"]
    oh, ow = geo["out"]
    taps = np.arange(kh * kw)
    rows = (taps // kw)[:, None] * dh + np.arange(oh)[None, :] * sh - geo["pads"][0]
    cols = (taps % kw)[:, None] * dw + np.arange(ow)[None, :] * sw - geo["pads"][1]
    return rows, cols


def _bilinear(image: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """[C, *points] bilinear samples of [C, H, W] `image`, zero outside."""
    h, w = image.shape[1:]
    y0, x0 = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
    out = np.zeros((image.shape[0], *y.shape))
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = y0 + dy, x0 + dx
            weight = (1 - np.abs(y - yy)) * (1 - np.abs(x - xx))
            inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            value = image[:, np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)]
            out += np.where(inside, weight, 0.0) * value
    return out


def deform_conv(attrs: dict[str, Any], x, w, offset, b=None, mask=None) -> np.ndarray:
    types = [TensorType(a.shape, str(a.dtype)) if a is not None else None
             for a in (x, w, offset, b, mask)]  # fmt: skip
    geo = _geometry(attrs, types)
    n, channels = x.shape[:2]
    taps, (oh, ow), groups = len(_bases(geo)[0]), geo["out"], geo["offset_group"]
    rows, cols = _bases(geo)
    off = offset.astype(np.float64).reshape(n, groups, taps, 2, oh, ow)
    scale = (
        np.ones((n, groups, taps, oh, ow)) if mask is None else mask.reshape(off[:, :, :, 0].shape)
    )
    per = channels // groups
    columns = np.zeros((n, channels, taps, oh, ow))
    for i in range(n):
        for g in range(groups):
            y = rows[:, :, None] + off[i, g, :, 0]
            xs = cols[:, None, :] + off[i, g, :, 1]
            image = x[i, g * per : (g + 1) * per].astype(np.float64)
            columns[i, g * per : (g + 1) * per] = _bilinear(image, y, xs) * scale[i, g]
    group = geo["group"]
    wg = w.astype(np.float64).reshape(group, w.shape[0] // group, -1)
    cg = columns.reshape(n, group, -1, oh * ow)
    y = np.matmul(wg[None], cg).reshape(n, w.shape[0], oh, ow)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return y.astype(x.dtype)


def _expand_deform_conv(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, w, offset = node.inputs[:3]
    types = [b.types[v] if v else None for v in node.inputs]
    geo = _geometry(node.attr_dict, types)
    n, channels, height, width = e.shape(x)
    dtype = e.dtype(x)
    groups, (oh, ow) = geo["offset_group"], geo["out"]
    rows, cols = _bases(geo)
    taps = rows.shape[0]
    off = e.reshape(offset, [n, groups, taps, 2, oh, ow])
    # GridSample without align_corners reads pixel p at (2p + 1) / size - 1
    points = []
    for part, base, size, shape in ((1, cols, width, [1, 1, taps, 1, ow]),
                                    (0, rows, height, [1, 1, taps, oh, 1])):  # fmt: skip
        at = e.add(
            "Add", [e.take(off, 3, part), e.const(base.reshape(shape).astype(dtype), "base")]
        )
        scaled = e.add("Mul", [at, e.const(np.array(2 / size, dtype), "scale")])
        points.append(e.add("Add", [scaled, e.const(np.array(1 / size - 1, dtype), "shift")]))
    grid = e.reshape(e.stack(points, 5), [n * groups, taps * oh, ow, 2])
    images = e.reshape(x, [n * groups, channels // groups, height, width])
    sampled = e.add("GridSample", [images, grid], {"mode": "linear", "padding_mode": "zeros",
                                                   "align_corners": 0})  # fmt: skip
    sampled = e.reshape(sampled, [n, groups, channels // groups, taps, oh * ow])
    mask = node.inputs[4] if len(node.inputs) > 4 and node.inputs[4] else None
    if mask:
        sampled = e.add("Mul", [sampled, e.reshape(mask, [n, groups, 1, taps, oh * ow])])
    group, outs = geo["group"], e.shape(w)[0]
    columns = e.reshape(sampled, [n, group, channels // group * taps, oh * ow])
    weights = e.reshape(w, [group, outs // group, channels // group * taps])
    y = e.reshape(e.add("MatMul", [weights, columns]), [n, outs, oh, ow])
    bias = node.inputs[3] if len(node.inputs) > 3 and node.inputs[3] else None
    if bias:
        y = e.add("Add", [y, e.reshape(bias, [1, outs, 1, 1])])
    e.rename(y, node.outputs[0])


register("DeformConv", Pattern.OPAQUE, _deform_type, deform_conv, attrs=_ATTRS, inputs=(3, 5),
         expand=_expand_deform_conv)  # fmt: skip

"""Col2Im (opset 18; torch's `F.fold` / `nn.Fold` through the dynamo exporter) as a composite:
a grouped ConvTranspose whose constant weight is one-hot per kernel tap, so the overlapping
patches are summed by a kernel every back-end already compiles. Its numpy kernel follows the
ONNX definition with explicit index arithmetic."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter

_FLOATS = ("bfloat16", "float16", "float32", "float64")


def _geometry(attrs: dict[str, Any], image: np.ndarray, block: np.ndarray) -> tuple:
    """(image sizes, block sizes, strides, dilations, pads, blocks per axis), all checked."""
    image = [int(v) for v in np.asarray(image).reshape(-1)]
    block = [int(v) for v in np.asarray(block).reshape(-1)]
    nd = len(image)
    if nd == 0 or len(block) != nd:
        raise ValueError(
            f"Col2Im image_shape and block_shape must have one positive length, not "
            f"{len(image)} and {len(block)}"
        )
    strides = list(attrs.get("strides") or (1,) * nd)
    dilations = list(attrs.get("dilations") or (1,) * nd)
    pads = list(attrs.get("pads") or (0,) * 2 * nd)
    if len(strides) != nd or len(dilations) != nd or len(pads) != 2 * nd:
        raise ValueError(
            f"Col2Im strides, dilations and pads must have {nd}, {nd} and {2 * nd} values, not "
            f"{len(strides)}, {len(dilations)} and {len(pads)}"
        )
    for what, values, low in (
        ("image_shape", image, 1), ("block_shape", block, 1), ("strides", strides, 1),
        ("dilations", dilations, 1), ("pads", pads, 0),
    ):  # fmt: skip
        if min(values) < low:
            raise ValueError(f"Col2Im {what} must be at least {low}, not {values}")
    counts = [
        (i + pads[a] + pads[nd + a] - d * (k - 1) - 1) // s + 1
        for a, (i, k, s, d) in enumerate(zip(image, block, strides, dilations, strict=True))
    ]
    if min(counts) < 1:
        raise ValueError(f"Col2Im block_shape {block} must fit the padded image {image}")
    return image, block, strides, dilations, pads, counts


def _col2im_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    if x.dtype not in _FLOATS:
        raise ValueError(f"Col2Im input must be a float type, not {x.dtype}")
    image, block, *_, counts = _geometry(attrs, consts[1], consts[2])
    taps, blocks = int(np.prod(block)), int(np.prod(counts))
    if len(x.shape) != 3 or x.shape[1] % taps or x.shape[2] != blocks:
        raise ValueError(
            f"Col2Im input must have shape [N, C * {taps}, {blocks}] (block_shape {block} over "
            f"image_shape {image}), not {x.shape}"
        )
    return [TensorType((x.shape[0], x.shape[1] // taps, *image), x.dtype)]


def col2im(attrs: dict[str, Any], x: np.ndarray, image: Any, block: Any) -> np.ndarray:
    """`y[n, c, p] += x[n, c * K + k, l]` where tap `k` of block `l` lands on pixel `p` (pixels
    in the padding are dropped)."""
    image, block, strides, dilations, pads, counts = _geometry(attrs, image, block)
    nd, taps = len(image), int(np.prod(block))
    n, channels = x.shape[0], x.shape[1] // taps
    cols = x.reshape(n, channels, taps, *counts).astype(np.float64)
    y = np.zeros((n, channels, *image), np.float64)
    for k, tap in enumerate(itertools.product(*(range(b) for b in block))):
        for at in itertools.product(*(range(c) for c in counts)):
            pixel = [at[a] * strides[a] + tap[a] * dilations[a] - pads[a] for a in range(nd)]
            if all(0 <= p < i for p, i in zip(pixel, image, strict=True)):
                y[(slice(None), slice(None), *pixel)] += cols[(slice(None), slice(None), k, *at)]
    return y.astype(x.dtype)


def _expand_col2im(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, image_value, block_value = node.inputs
    image, block, strides, dilations, pads, counts = _geometry(
        node.attr_dict, b.constants[image_value], b.constants[block_value]
    )
    nd, taps = len(image), int(np.prod(block))
    n, depth, _ = e.shape(x)
    channels = depth // taps
    # input channel c * K + k of group c carries tap k to the group's one output channel
    weight = np.zeros((depth, 1, taps), e.dtype(x))
    weight[np.arange(depth), 0, np.arange(depth) % taps] = 1
    # the output padding makes up the rows the blocks' floor division left out at the end
    extra = [
        i + pads[a] + pads[nd + a] - (s * (c - 1) + d * (k - 1) + 1)
        for a, (i, k, s, d, c) in enumerate(
            zip(image, block, strides, dilations, counts, strict=True)
        )
    ]
    attrs = {
        "group": channels,
        "strides": strides,
        "dilations": dilations,
        "pads": pads,
        "output_padding": extra,
    }
    grid = e.reshape(x, [n, depth, *counts])
    w = e.const(weight.reshape(depth, 1, *block), "taps")
    e.add("ConvTranspose", [grid, w], attrs, outputs=[node.outputs[0]])


register("Col2Im", Pattern.OPAQUE, _col2im_type, col2im, inputs=(3, 3), const_inputs=(1, 2),
         attrs={"dilations": None, "pads": None, "strides": None},
         expand=_expand_col2im)  # fmt: skip

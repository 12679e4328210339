"""Dropping convolution taps that only ever read padding: a dilated convolution on an input
smaller than its dilation (DeepLabV3's ASPP, dilations 12-36, on a feature map of a few pixels)
becomes the smaller convolution of the taps that reach the input."""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, TensorType
from ..ops.nn import window_geometry
from .fold_batch_norm import _fresh


def _live_taps(size: int, begin: int, stride: int, dilation: int, kernel: int, out: int) -> list:
    """The taps of one axis that read an input position for at least one output position."""
    positions = np.arange(out) * stride - begin
    return [
        t
        for t in range(kernel)
        if np.any((positions + t * dilation >= 0) & (positions + t * dilation < size))
    ]


def _kept_taps(graph: Graph, conv: Node) -> tuple[list[tuple[int, int]], dict] | None:
    """Per spatial axis the kept taps `(first, last)`, and the new attributes; None when every
    tap is kept (or dropping them would need negative pads)."""
    x, w = graph.types[conv.inputs[0]], graph.types[conv.inputs[1]]
    spatial, kernel = tuple(x.shape[2:]), tuple(w.shape[2:])
    attrs = conv.attr_dict
    begin, end, strides, dilations, outs = window_geometry(attrs, spatial, kernel)
    kept, pads, new_kernel, new_dilations = [], [list(begin), list(end)], [], list(dilations)
    for axis, (n, k, d) in enumerate(zip(spatial, kernel, dilations, strict=True)):
        live = _live_taps(n, begin[axis], strides[axis], d, k, outs[axis])
        first, last = (live[0], live[-1]) if live else (0, k - 1)
        contiguous = live == list(range(first, last + 1))
        b, e = begin[axis] - first * d, end[axis] - (k - 1 - last) * d
        if not live or not contiguous or b < 0 or e < 0:
            first, last, b, e = 0, k - 1, begin[axis], end[axis]
        elif begin[axis] == end[axis]:  # symmetric pads stay symmetric: as many taps off each end
            drop = min(first, k - 1 - last)
            first, last = drop, k - 1 - drop
            b, e = begin[axis] - drop * d, end[axis] - drop * d
        kept.append((first, last))
        pads[0][axis], pads[1][axis] = b, e
        new_kernel.append(last - first + 1)
        if new_kernel[-1] == 1:
            new_dilations[axis] = 1
    if all(k == (0, n - 1) for k, n in zip(kept, kernel, strict=True)):
        return None
    attrs.update(
        kernel_shape=tuple(new_kernel),
        pads=tuple(pads[0] + pads[1]),
        dilations=tuple(new_dilations),
        auto_pad="NOTSET",
    )
    return kept, attrs


def drop_padding_taps(graph: Graph) -> Graph:
    """Cut a Conv's constant kernel to the taps that read the input for some output position;
    the pads shrink by the dropped taps' reach, so the output is the same. Symmetric pads stay
    symmetric (as many taps off each end of an axis): the accelerator's convolution takes only
    those, and a ResNet-18 at 32x32 lost its 2x2 -> 1x1 strided layer to the CPU when one
    padding-only tap was cut from one side.

    Before: `%y = Conv[kernel 3x3, dilations 36, pads 36](%x: 1x960x6x5, %w: 256x960x3x3)`
    After:  `%y = Conv[kernel 1x1, pads 0](%x, %w[:, :, 1:2, 1:2])`
    """
    constants, types = dict(graph.constants), dict(graph.types)
    taken = set(types)
    nodes = []
    for node in graph.nodes:
        found = None
        if node.op == "Conv" and node.inputs[1] in graph.constants:
            found = _kept_taps(graph, node)
        if found is None:
            nodes.append(node)
            continue
        kept, attrs = found
        window = tuple(slice(first, last + 1) for first, last in kept)
        weight = np.ascontiguousarray(graph.constants[node.inputs[1]][(..., *window)])
        name = _fresh(f"{node.name}_w_taps", taken)
        constants[name] = weight
        types[name] = TensorType(weight.shape, str(weight.dtype))
        inputs = (node.inputs[0], name, *node.inputs[2:])
        nodes.append(Node("Conv", node.name, inputs, node.outputs, tuple(attrs.items())))
    if len(constants) == len(graph.constants):
        return graph
    return graph.replace(nodes=tuple(nodes), constants=constants, types=types)

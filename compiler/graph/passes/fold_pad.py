"""Pad folding: a zero constant Pad of a convolution's spatial axes becomes the Conv's own
padding (tf2onnx writes Keras's ZeroPadding2D and TensorFlow's asymmetric "same" padding of
strided convolutions as an explicit Pad before a Conv with `pads` 0)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Graph, Node
from ..ops.nn import window_geometry
from ..ops.shape import pad_widths


def _zero_spatial_pads(graph: Graph, pad: Node) -> list[tuple[int, int]] | None:
    """The (before, after) widths of each spatial axis when `pad` adds zeros around them only
    (constant mode, a constant zero fill, no pad or crop of the batch and channel axes)."""
    if pad.op != "Pad" or pad.attr_dict.get("mode", "constant") != "constant":
        return None
    inputs = [*pad.inputs, "", "", ""][:4]
    if any(name and name not in graph.constants for name in inputs[1:]):
        return None
    if inputs[2] and np.any(np.asarray(graph.constants[inputs[2]]) != 0):
        return None
    rank = len(graph.types[pad.inputs[0]].shape)
    axes = graph.constants[inputs[3]] if inputs[3] else None
    widths = pad_widths(rank, graph.constants[inputs[1]], axes)
    if rank < 3 or any(w != (0, 0) for w in widths[:2]) or any(min(w) < 0 for w in widths):
        return None
    return widths[2:]


def _folded_attrs(graph: Graph, conv: Node, widths: list[tuple[int, int]]) -> dict[str, Any]:
    attrs = conv.attr_dict
    padded = graph.types[conv.inputs[0]].shape[2:]
    kernel = graph.types[conv.inputs[1]].shape[2:]
    begin, end, *_ = window_geometry(attrs, tuple(padded), tuple(kernel))
    attrs["pads"] = tuple(b + w[0] for b, w in zip(begin, widths, strict=True)) + tuple(
        e + w[1] for e, w in zip(end, widths, strict=True)
    )
    attrs["auto_pad"] = "NOTSET"
    return attrs


def fold_pad_into_conv(graph: Graph) -> Graph:
    """Give a float Conv that reads a zero Pad of its spatial axes the Pad's input and the
    widths as pads of its own (the Pad stays while something else reads it). The convolution
    kernels pad inside their own loops, or in the blocked layout, where a lone Pad kernel
    ended the layout's chain (two layout transforms around every such Pad: 4 in Keras's
    MobileNetV2, 18% of its time).

    Before: `%p = Pad(%x, pads=[0,0,0,0, 0,0,1,1]); %y = Conv[pads 0,0,0,0](%p, %w)`
    After:  `%y = Conv[pads 0,0,1,1](%x, %w)`
    """
    producers = graph.producers()
    nodes, changed = [], False
    for node in graph.nodes:
        pad = producers.get(node.inputs[0]) if node.op == "Conv" and node.inputs else None
        widths = _zero_spatial_pads(graph, pad) if pad is not None else None
        if widths is None or not graph.types[node.inputs[0]].dtype.startswith("float"):
            nodes.append(node)
            continue
        attrs = _folded_attrs(graph, node, widths)
        inputs = (pad.inputs[0], *node.inputs[1:])
        nodes.append(Node(node.op, node.name, inputs, node.outputs, tuple(attrs.items())))
        changed = True
    return graph.replace(nodes=tuple(nodes)) if changed else graph

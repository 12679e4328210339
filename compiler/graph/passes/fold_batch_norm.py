"""Batch-norm folding: Conv followed by an inference BatchNormalization becomes one Conv."""

from __future__ import annotations

import numpy as np

from ....runtime import ndarray as nd
from ..ir import Graph, Node, TensorType


def _fresh(name: str, taken: set[str]) -> str:
    candidate, i = name, 0
    while candidate in taken:
        i += 1
        candidate = f"{name}_{i}"
    taken.add(candidate)
    return candidate


def _folded_params(graph: Graph, conv: Node, bn: Node) -> tuple[np.ndarray, np.ndarray]:
    c = graph.constants
    weight = c[conv.inputs[1]]  # float64 products, element by element (no float64 copy)
    bias = c[conv.inputs[2]].astype(np.float64) if len(conv.inputs) > 2 and conv.inputs[2] else 0.0
    scale, shift, mean, var = (c[name].astype(np.float64) for name in bn.inputs[1:5])
    factor = scale / np.sqrt(var + bn.attr("epsilon"))
    new_bias = (bias - mean) * factor + shift
    dtype = graph.types[conv.outputs[0]].dtype
    # written straight into an aligned read-only array, which the new graph keeps as it is: a
    # writable result was copied again by `Graph`, and the model's folded weights were then
    # alive twice beside the originals (an unfolded ResNet-18's compile peak, 3x its weights)
    new_weight = nd.empty(weight.shape, dtype).numpy()
    np.multiply(weight, factor.reshape(-1, *(1,) * (weight.ndim - 1)), out=new_weight)
    new_weight.setflags(write=False)
    return new_weight, np.asarray(new_bias, dtype).reshape(-1)


def _can_fold(graph: Graph, conv: Node, bn: Node, consumers: dict) -> bool:
    params = [*conv.inputs[1:], *bn.inputs[1:5]]
    return (
        conv.op == "Conv"
        and bn.op == "BatchNormalization"
        and bn.inputs[0] == conv.outputs[0]
        and all(p in graph.constants for p in params if p)
        and len(consumers.get(conv.outputs[0], [])) == 1
        and conv.outputs[0] not in graph.outputs
    )


def fold_batch_norm(graph: Graph) -> Graph:
    """Fold `BatchNormalization(Conv(x, W, B))` with constant parameters into `Conv(x, W', B')`,
    W' = W * s, B' = (B - mean) * s + beta, s = scale / sqrt(var + eps) per output channel.

    Before: `%c = Conv(%x, %w); %y = BatchNormalization(%c, %s, %b, %m, %v)`
    After:  `%y = Conv(%x, %w_bn, %b_bn)` (the old parameters are left for eliminate_dead_code).
    """
    producers, consumers = graph.producers(), graph.consumers()
    constants, types = dict(graph.constants), dict(graph.types)
    taken = set(types)
    replaced: dict[str, Node | None] = {}
    for bn in graph.nodes:
        conv = producers.get(bn.inputs[0]) if bn.op == "BatchNormalization" else None
        if conv is None or not _can_fold(graph, conv, bn, consumers):
            continue
        weight, bias = _folded_params(graph, conv, bn)
        w_name, b_name = _fresh(f"{conv.name}_w_bn", taken), _fresh(f"{conv.name}_b_bn", taken)
        constants[w_name], constants[b_name] = weight, bias
        for name, value in ((w_name, weight), (b_name, bias)):
            types[name] = TensorType(value.shape, str(value.dtype))
        fused = Node(
            "Conv", conv.name, (conv.inputs[0], w_name, b_name), bn.outputs[:1], conv.attrs
        )
        replaced[conv.name], replaced[bn.name] = None, fused
        del types[conv.outputs[0]]
    if not replaced:
        return graph
    # the folded Conv takes the BatchNormalization's place; the old Conv goes
    nodes = [replaced.get(n.name, n) for n in graph.nodes]
    return graph.replace(
        nodes=tuple(n for n in nodes if n is not None), constants=constants, types=types
    )


def _channel_vector(graph: Graph, name: str, out_rank: int, channels: int) -> np.ndarray | None:
    """Constant `name` as one value per output channel when it broadcasts along the channel
    axis of a Conv's output only (`[C, 1, 1]`, `[1, C, 1, 1]`, a scalar), else None."""
    value = graph.constants.get(name)
    if value is None or value.ndim > out_rank or value.dtype.kind != "f":
        return None
    shape = (1,) * (out_rank - value.ndim) + value.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1).astype(np.float64), (channels,))


def _scale_or_shift(graph: Graph, conv: Node, node: Node) -> tuple[str, np.ndarray] | None:
    """("Mul" or "Add", per-channel factor or term) when `node` multiplies or adds `conv`'s
    output by a per-channel constant."""
    if node.op not in ("Mul", "Add") or conv.outputs[0] not in node.inputs:
        return None
    other = node.inputs[1] if node.inputs[0] == conv.outputs[0] else node.inputs[0]
    out = graph.types[conv.outputs[0]]
    vector = _channel_vector(graph, other, len(out.shape), out.shape[1])
    same_type = graph.types[node.outputs[0]] == out
    return (node.op, vector) if vector is not None and same_type else None


def fold_conv_scale_shift(graph: Graph) -> Graph:
    """Fold a per-channel `Mul` or `Add` by a constant after a Conv with constant weights into
    its weights and bias (tf2onnx writes the batch norm after a depthwise convolution as
    `x * s + t`, unfused: Keras's MobileNet has 13), until none is left.

    Before: `%c = Conv(%x, %w, %b); %m = Mul(%c, %s[1,C,1,1]); %y = Add(%m, %t[1,C,1,1])`
    After:  `%y = Conv(%x, %w * s, %b * s + t)`
    """
    while True:
        producers, consumers = graph.producers(), graph.consumers()
        found = next(
            (f for n in graph.nodes if (f := _candidate(graph, n, producers, consumers))), None
        )
        if found is None:
            return graph
        graph = _folded(graph, *found)


def _candidate(graph: Graph, node: Node, producers: dict, consumers: dict) -> tuple | None:
    """(conv, node, op, vector) when `node` is a per-channel Mul or Add `fold_conv_scale_shift`
    folds into the Conv it reads."""
    if node.op not in ("Mul", "Add") or len(node.inputs) != 2:
        return None
    for name in node.inputs:
        conv = producers.get(name)
        if conv is None or conv.op != "Conv" or conv.inputs[1] not in graph.constants:
            continue
        if len(conv.inputs) > 2 and conv.inputs[2] and conv.inputs[2] not in graph.constants:
            continue
        if len(consumers.get(name, [])) != 1 or name in graph.outputs:
            continue
        if (found := _scale_or_shift(graph, conv, node)) is not None:
            return (conv, node, *found)
    return None


def _folded(graph: Graph, conv: Node, node: Node, op: str, vector: np.ndarray) -> Graph:
    c, types = graph.constants, dict(graph.types)
    dtype = graph.types[conv.outputs[0]].dtype
    weight = c[conv.inputs[1]]
    channels = weight.shape[0]
    bias = c[conv.inputs[2]].astype(np.float64) if len(conv.inputs) > 2 and conv.inputs[2] else 0.0
    bias = np.broadcast_to(bias, (channels,))
    if op == "Mul":
        new_weight = nd.empty(weight.shape, dtype).numpy()
        np.multiply(weight, vector.reshape(-1, *(1,) * (weight.ndim - 1)), out=new_weight)
        new_weight.setflags(write=False)
        new_bias = bias * vector
    else:
        new_weight, new_bias = weight, bias + vector
    taken = set(types)
    constants = dict(c)
    w_name, b_name = _fresh(f"{conv.name}_w_affine", taken), _fresh(f"{conv.name}_b_affine", taken)
    constants[w_name], constants[b_name] = new_weight, np.asarray(new_bias, dtype)
    for name in (w_name, b_name):
        types[name] = TensorType(constants[name].shape, str(constants[name].dtype))
    fused = Node("Conv", conv.name, (conv.inputs[0], w_name, b_name), node.outputs, conv.attrs)
    del types[conv.outputs[0]]
    nodes = tuple(fused if n is node else n for n in graph.nodes if n is not conv)
    return graph.replace(nodes=nodes, constants=constants, types=types)

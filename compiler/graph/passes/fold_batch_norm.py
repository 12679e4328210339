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

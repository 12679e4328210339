"""float16 accumulation in float32: every op that sums many float16 terms (convolutions,
matrix products, reductions, softmax, normalizations, average pooling) computes in float32
between casts, so only its result is rounded to float16.

Summing thousands of terms in float16 loses most of the result's bits (a MatMul over 4096
terms: 0.2 relative error; onnxruntime's CPU kernels and cuBLAS's default accumulate in
float32 and stay at float16's rounding, about 3e-4). Element-wise ops keep computing in
float16: each rounds once, as onnxruntime's do. Tensors between kernels stay float16 (the
casts fuse into the kernels' prologues and epilogues), and float16 constants read only by a
widened op become float32 constants instead of casts.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, GraphBuilder

#: the dtype that accumulates in float32
HALF = "float16"

#: ops whose result sums (or multiplies) many of their inputs' elements
ACCUMULATING = frozenset({
    "AveragePool", "Conv", "ConvTranspose", "CumSum", "Gemm", "GlobalAveragePool",
    "LayerNormalization", "LogSoftmax", "MatMul", "ReduceMean", "ReduceProd", "ReduceSum",
    "Softmax",
})  # fmt: skip


def _widens(graph: Graph, op: str, inputs: tuple[str, ...]) -> bool:
    return op in ACCUMULATING and any(i and graph.types[i].dtype == HALF for i in inputs)


def widen_half(graph: Graph) -> Graph:
    """Graph with each accumulating op over float16 inputs computing in float32.

    Before: `%y = MatMul(%x, %w)` with `%x`, `%w`, `%y` float16
    After:  `%x32 = Cast[to=float32](%x); %y32 = MatMul(%x32, %w32); %y = Cast[to=float16](%y32)`
            where `%w32` is the float32 copy of constant `%w`
    """
    if not any(_widens(graph, n.op, n.inputs) for n in graph.nodes):
        return graph
    b = GraphBuilder(graph.name)
    for name in graph.inputs:
        ty = graph.types[name]
        b.add_input(name, ty.shape, ty.dtype)
    consumers = graph.consumers()
    wide_only = {  # float16 constants that only widened ops read: converted, not cast
        name
        for name, value in graph.constants.items()
        if value.dtype == np.float16
        and name not in graph.outputs
        and all(_widens(graph, c.op, c.inputs) for c in consumers.get(name, []))
    }
    for name, value in graph.constants.items():
        if name in wide_only:
            b.add_constant(name, value.astype(np.float32))
        else:
            b.add_constant(name, value, copy=False)  # graph constants are immutable: shared
    widened: dict[str, str] = {name: name for name in wide_only}  # float16 value -> float32
    for node in graph.nodes:
        if not _widens(graph, node.op, node.inputs):
            b.add_node(node.op, node.inputs, node.attr_dict, name=node.name, outputs=node.outputs)
            continue
        inputs = []
        for value in node.inputs:
            if value and graph.types[value].dtype == HALF and value not in widened:
                (widened[value],) = b.add_node("Cast", [value], {"to": "float32"},
                                               name=f"{value}_f32")  # fmt: skip
            inputs.append(widened.get(value, value) if value else value)
        half = [bool(out) and graph.types[out].dtype == HALF for out in node.outputs]
        wide_outputs = [
            b.fresh(f"{out}_f32") if is_half else out
            for out, is_half in zip(node.outputs, half, strict=True)
        ]
        b.add_node(node.op, inputs, node.attr_dict, name=node.name, outputs=wide_outputs)
        for out, wide, is_half in zip(node.outputs, wide_outputs, half, strict=True):
            if is_half:  # (LayerNormalization's float32 statistics keep their names)
                b.add_node("Cast", [wide], {"to": HALF}, name=f"{out}_f16", outputs=[out])
    return b.build(graph.outputs)


__all__ = ["ACCUMULATING", "widen_half"]

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

from ..ir import Graph, Node
from .widen import widen_nodes

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

    def flags(node: Node, values: tuple[str, ...]) -> list[bool]:
        widens = _widens(graph, node.op, node.inputs)
        return [widens and bool(v) and graph.types[v].dtype == HALF for v in values]

    # (only float16 outputs are cast back: LayerNormalization's float32 statistics stay)
    return widen_nodes(
        graph,
        lambda node: flags(node, node.inputs),
        lambda node: flags(node, node.outputs),
        lambda dtype: "float32",
        ("_f32", "_f16"),
    )


__all__ = ["ACCUMULATING", "widen_half"]

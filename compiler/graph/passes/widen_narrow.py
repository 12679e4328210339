"""Ops on narrow types (bfloat16, float8, float4e2m1, int4, uint4) compute in a wide type:
float32 (int8/uint8 for int4/uint4) between casts, each narrow result rounded back once (to
nearest even), as ONNX's reference computes a bfloat16 op and as onnxruntime's bfloat16 kernels
do. Kernels thus never do arithmetic on a narrow type: they read and write its bits, and only
Cast, CastLike, QuantizeLinear and DequantizeLinear convert them (`registry.NARROW_NATIVE`,
lowered by `te.narrow`). Tensors between kernels stay narrow; the casts fuse into the kernels'
prologues and epilogues. Narrow constants read only by widened ops become wide constants.

The numpy reference (`OpSpec.run`) widens the same way, so both agree bit for bit per op.
"""

from __future__ import annotations

from ....runtime.dtypes import is_narrow, wide_dtype
from ..ir import Graph, Node
from ..registry import narrow_positions
from .widen import widen_nodes


def _widened_inputs(graph: Graph, node: Node) -> list[bool]:
    native = narrow_positions(node.op)[0]
    return [
        bool(v) and k not in native and is_narrow(graph.types[v].dtype)
        for k, v in enumerate(node.inputs)
    ]


def _widened_outputs(graph: Graph, node: Node) -> list[bool]:
    native = narrow_positions(node.op)[1]
    return [
        bool(v) and k not in native and is_narrow(graph.types[v].dtype)
        for k, v in enumerate(node.outputs)
    ]


def widen_narrow(graph: Graph) -> Graph:
    """Graph where no op but Cast, CastLike, QuantizeLinear and DequantizeLinear reads or
    writes a narrow type.

    Before: `%y = Relu(%x)` with `%x`, `%y` bfloat16
    After:  `%x32 = Cast[to=float32](%x); %y32 = Relu(%x32); %y = Cast[to=bfloat16](%y32)`
    """
    return widen_nodes(
        graph,
        lambda node: _widened_inputs(graph, node),
        lambda node: _widened_outputs(graph, node),
        wide_dtype,
        ("_wide", "_narrow"),
    )


__all__ = ["widen_narrow"]

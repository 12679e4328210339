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
from ..ir import Graph, GraphBuilder, Node
from ..registry import narrow_positions


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


def _widens(graph: Graph, node: Node) -> bool:
    return any(_widened_inputs(graph, node)) or any(_widened_outputs(graph, node))


def widen_narrow(graph: Graph) -> Graph:
    """Graph where no op but Cast, CastLike, QuantizeLinear and DequantizeLinear reads or
    writes a narrow type.

    Before: `%y = Relu(%x)` with `%x`, `%y` bfloat16
    After:  `%x32 = Cast[to=float32](%x); %y32 = Relu(%x32); %y = Cast[to=bfloat16](%y32)`
    """
    if not any(_widens(graph, n) for n in graph.nodes):
        return graph
    b = GraphBuilder(graph.name)
    for name in graph.inputs:
        ty = graph.types[name]
        b.add_input(name, ty.shape, ty.dtype)
    consumers = graph.consumers()
    wide_only = {  # narrow constants that only widened positions read: converted, not cast
        name
        for name, value in graph.constants.items()
        if is_narrow(str(value.dtype))
        and name not in graph.outputs
        and all(
            w
            for c in consumers.get(name, [])
            for v, w in zip(c.inputs, _widened_inputs(graph, c), strict=True)
            if v == name
        )
    }
    for name, value in graph.constants.items():
        if name in wide_only:
            b.add_constant(name, value.astype(wide_dtype(str(value.dtype))))
        else:
            b.add_constant(name, value, copy=False)  # graph constants are immutable: shared
    widened: dict[str, str] = {name: name for name in wide_only}  # narrow value -> wide
    for node in graph.nodes:
        if not _widens(graph, node):
            b.add_node(node.op, node.inputs, node.attr_dict, name=node.name, outputs=node.outputs)
            continue
        inputs = []
        for value, wide in zip(node.inputs, _widened_inputs(graph, node), strict=True):
            if wide and value not in widened:
                to = wide_dtype(graph.types[value].dtype)
                (widened[value],) = b.add_node("Cast", [value], {"to": to}, name=f"{value}_wide")
            inputs.append(widened[value] if wide else value)
        narrow = _widened_outputs(graph, node)
        outputs = [
            b.fresh(f"{out}_wide") if is_narrow_out else out
            for out, is_narrow_out in zip(node.outputs, narrow, strict=True)
        ]
        b.add_node(node.op, inputs, node.attr_dict, name=node.name, outputs=outputs)
        for out, wide, is_narrow_out in zip(node.outputs, outputs, narrow, strict=True):
            if is_narrow_out:
                to = graph.types[out].dtype
                b.add_node("Cast", [wide], {"to": to}, name=f"{out}_narrow", outputs=[out])
    return b.build(graph.outputs)


__all__ = ["widen_narrow"]

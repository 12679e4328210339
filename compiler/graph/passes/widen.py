"""The rewrite `widen_half` and `widen_narrow` share: chosen inputs and outputs of chosen nodes
move to a wider dtype between Casts, and constants read only there are converted instead."""

from __future__ import annotations

from collections.abc import Callable

from ..ir import Graph, GraphBuilder, Node

#: node -> one flag per input (or output): whether that value is widened
Positions = Callable[[Node], list[bool]]


def widen_nodes(
    graph: Graph,
    inputs: Positions,
    outputs: Positions,
    wide: Callable[[str], str],
    suffixes: tuple[str, str],
) -> Graph:
    """`graph` where each flagged input of a node is read through `Cast[to=wide(dtype)]` (one
    per value) and each flagged output is computed wide and cast back to its dtype, keeping its
    name. `suffixes`: the names' endings for wide values and for the casts back."""
    if not any(any(inputs(n)) or any(outputs(n)) for n in graph.nodes):
        return graph
    wide_suffix, back_suffix = suffixes
    b = GraphBuilder(graph.name)
    for name in graph.inputs:
        ty = graph.types[name]
        b.add_input(name, ty.shape, ty.dtype)
    only_wide: dict[str, bool] = {}  # constant -> whether every read of it is widened
    for node in graph.nodes:
        for value, flag in zip(node.inputs, inputs(node), strict=True):
            if value in graph.constants:
                only_wide[value] = only_wide.get(value, True) and flag
    for name, value in graph.constants.items():
        if only_wide.get(name) and name not in graph.outputs:  # converted, not cast
            b.add_constant(name, value.astype(wide(str(value.dtype))))
        else:
            b.add_constant(name, value, copy=False)  # graph constants are immutable: shared
    widened = {n: n for n, flag in only_wide.items() if flag and n not in graph.outputs}
    for node in graph.nodes:
        in_flags, out_flags = inputs(node), outputs(node)
        if not any(in_flags) and not any(out_flags):
            b.add_node(node.op, node.inputs, node.attr_dict, name=node.name, outputs=node.outputs)
            continue
        args = []
        for value, flag in zip(node.inputs, in_flags, strict=True):
            if flag and value not in widened:
                to = wide(graph.types[value].dtype)
                (widened[value],) = b.add_node("Cast", [value], {"to": to},
                                               name=f"{value}{wide_suffix}")  # fmt: skip
            args.append(widened[value] if flag else value)
        results = [
            b.fresh(f"{out}{wide_suffix}") if flag else out
            for out, flag in zip(node.outputs, out_flags, strict=True)
        ]
        b.add_node(node.op, args, node.attr_dict, name=node.name, outputs=results)
        for out, result, flag in zip(node.outputs, results, out_flags, strict=True):
            if flag:
                to = graph.types[out].dtype
                b.add_node("Cast", [result], {"to": to}, name=f"{out}{back_suffix}", outputs=[out])
    return b.build(graph.outputs)


__all__ = ["widen_nodes"]

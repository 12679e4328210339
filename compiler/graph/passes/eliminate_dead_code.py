"""Dead-code elimination: drop nodes and constants that no graph output depends on."""

from __future__ import annotations

from ..ir import Graph


def eliminate_dead_code(graph: Graph) -> Graph:
    """Keep only nodes (and constants) that some graph output needs; inputs always stay.

    Before: `%a = Relu(%x); %b = Exp(%x); return %a`
    After:  `%a = Relu(%x); return %a`
    """
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs if o):
            kept.append(node)
            live.update(i for i in node.inputs if i)
    kept.reverse()
    constants = {k: v for k, v in graph.constants.items() if k in live}
    if len(kept) == len(graph.nodes) and len(constants) == len(graph.constants):
        return graph
    names = set(graph.inputs) | set(constants) | {o for n in kept for o in n.outputs if o}
    types = {k: v for k, v in graph.types.items() if k in names}
    return graph.replace(nodes=tuple(kept), constants=constants, types=types)

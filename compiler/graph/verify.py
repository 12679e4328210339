"""The graph verifier: checks every invariant of a graph; run after each pass in tests."""

from __future__ import annotations

from .ir import Graph, GraphError, Node
from .registry import UnsupportedOpError, get_op

# What must hold, checked in this order:
#   values      every value is defined once: an input, a constant or one node output
#   order       a node reads only values defined before it (topological order)
#   ops         each op is registered and its attributes are exactly the schema's, normalized
#   types       re-inferring each node's outputs gives the types the graph records
#   outputs     graph outputs are defined values
#   groups      (if fused) every node is in exactly one group; groups can run in some order
#   plan        (if planned) tensors live at the same time never share bytes


def verify_graph(graph: Graph) -> None:
    """Raise GraphError listing every broken invariant of `graph` (None if it is well formed)."""
    problems: list[str] = []
    defined = _check_values(graph, problems)
    for node in graph.nodes:
        _check_node(graph, node, defined, problems)
        defined.update(o for o in node.outputs if o)
    problems += [f"graph output {o!r} must be defined" for o in graph.outputs if o not in defined]
    if graph.groups is not None:
        _check_groups(graph, problems)
    if graph.memory_plan is not None:
        problems += graph.memory_plan.problems(graph)
    if problems:
        raise GraphError(f"graph {graph.name!r} is malformed:\n  " + "\n  ".join(problems))


def _check_values(graph: Graph, problems: list[str]) -> set[str]:
    seen: dict[str, int] = {}
    names = [*graph.inputs, *graph.constants, *(o for n in graph.nodes for o in n.outputs if o)]
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        if name not in graph.types:
            problems.append(f"value {name!r} must have a type")
    problems += [
        f"value {n!r} must be defined once, not {c} times" for n, c in seen.items() if c > 1
    ]
    return set(graph.inputs) | set(graph.constants)


def _check_node(graph: Graph, node: Node, defined: set[str], problems: list[str]) -> None:
    where = f"node {node.name!r} ({node.op})"
    undefined = [i for i in node.inputs if i and i not in defined]
    if undefined:
        problems.append(f"{where} must read values defined before it, not {undefined!r}")
        return
    try:
        spec = get_op(node.op)
        attrs = spec.normalize_attrs(node.attr_dict, node.name)
        if tuple(sorted(attrs.items())) != node.attrs:
            problems.append(
                f"{where} attributes must be normalized to {attrs!r}, not {node.attrs!r}"
            )
        inferred = spec.infer_node(node, graph.types, graph.constants)
    except (GraphError, UnsupportedOpError) as exc:
        problems.append(f"{where}: {exc}")
        return
    for out, ty in zip(node.outputs, inferred, strict=False):
        if out and graph.types.get(out) != ty:
            problems.append(
                f"{where} output {out!r} must have type {ty}, not {graph.types.get(out)}"
            )


def _check_groups(graph: Graph, problems: list[str]) -> None:
    from .passes.fuse_ops import group_order

    counts = {n.name: 0 for n in graph.nodes}
    for group in graph.groups or ():
        for name in group.nodes:
            if name not in counts:
                problems.append(f"group {group.name!r} must list graph nodes, not {name!r}")
            else:
                counts[name] += 1
    problems += [f"node {n!r} must be in one group, not {c}" for n, c in counts.items() if c != 1]
    if not problems:
        try:
            group_order(graph)
        except GraphError as exc:
            problems.append(str(exc))

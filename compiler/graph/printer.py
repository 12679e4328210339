"""The stable text form of a graph, for golden tests and debugging."""

from __future__ import annotations

import numpy as np

from .ir import AttrValue, Graph, Node

_INLINE_LIMIT = 8  # constants with at most this many elements print their values


def format_attr(value: AttrValue) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    if isinstance(value, str):
        return repr(value)
    return repr(value)


def format_node(graph: Graph, node: Node) -> str:
    outs = ", ".join(f"%{o}" if o else "_" for o in node.outputs)
    args = ", ".join(f"%{i}" if i else "_" for i in node.inputs)
    attrs = ", ".join(f"{k}={format_attr(v)}" for k, v in node.attrs)
    types = ", ".join(str(graph.types[o]) for o in node.outputs if o)
    attr_text = f" {{{attrs}}}" if attrs else ""
    return f"{node.name}: {outs} = {node.op}({args}){attr_text} : {types}"


def _format_constant(name: str, value: np.ndarray) -> str:
    text = f"const %{name}: {value.dtype}[{', '.join(map(str, value.shape))}]"
    if value.size <= _INLINE_LIMIT:
        text += f" = {np.array2string(value.reshape(-1), separator=', ')}"
    return text


def print_graph(graph: Graph) -> str:
    """The graph as text: signature, constants, nodes, groups and memory plan if annotated.

    >>> from tensorforge.compiler.graph import GraphBuilder
    >>> b = GraphBuilder("tiny")
    >>> x = b.add_input("x", (2, 3), "float32")
    >>> (y,) = b.add_node("Transpose", [x], {"perm": [1, 0]}, name="t")
    >>> print(print_graph(b.build([y])))
    graph tiny(%x: float32[2, 3]) {
      t: %t = Transpose(%x) {perm=[1, 0]} : float32[3, 2]
      return %t
    }
    """
    params = ", ".join(f"%{n}: {graph.types[n]}" for n in graph.inputs)
    lines = [f"graph {graph.name}({params}) {{"]
    lines += [f"  {_format_constant(n, v)}" for n, v in graph.constants.items()]
    lines += [f"  {format_node(graph, node)}" for node in graph.nodes]
    lines.append(f"  return {', '.join('%' + o for o in graph.outputs)}")
    for group in graph.groups or ():
        lines.append(
            f"  group {group.name} ({group.pattern.name.lower()}): {', '.join(group.nodes)}"
        )
    if graph.memory_plan is not None:
        plan = graph.memory_plan
        lines.append(f"  memory plan: peak {plan.peak_bytes} bytes, naive {plan.naive_bytes} bytes")
        for slot in plan.slots:
            lines.append(
                f"    %{slot.value} @ {slot.offset} +{slot.nbytes} live [{slot.first}, {slot.last}]"
            )
    lines.append("}")
    return "\n".join(lines)

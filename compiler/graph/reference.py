"""The graph reference executor: runs a `Graph` with the numpy kernels of the op registry.

Without annotations it runs node by node. After `fuse_ops` and `plan_memory` it runs group by
group, reading group inputs from and writing group outputs to their planned offsets in one byte
arena, so a wrong plan (two live tensors sharing bytes) gives wrong results, not silence.
Every result is checked against the type the graph declares for it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...runtime.checks import is_check, raise_failed, split_outputs
from .ir import Graph, GraphError, Node
from .registry import get_op


def _check_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    missing = [n for n in graph.inputs if n not in inputs]
    if missing:
        raise ValueError(f"inputs must include {missing!r} (graph {graph.name!r})")
    result = {}
    for name in graph.inputs:
        value, ty = np.asarray(inputs[name]), graph.types[name]
        if value.shape != ty.shape or str(value.dtype) != ty.dtype:
            raise ValueError(f"input {name!r} must be {ty}, not {value.dtype}{list(value.shape)}")
        result[name] = value
    return result


def run_node(graph: Graph, node: Node, env: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Evaluate one node; returns its outputs after checking them against their declared types."""
    arrays = [env[name] if name else None for name in node.inputs]
    values = get_op(node.op).run(node, arrays)
    result = {}
    for name, value in zip(node.outputs, values, strict=False):
        if not name:
            continue
        value, ty = np.asarray(value), graph.types[name]
        if value.shape != ty.shape or str(value.dtype) != ty.dtype:
            raise GraphError(
                f"node {node.name!r} ({node.op}) output {name!r} must be {ty}, not "
                f"{value.dtype}{list(value.shape)}"
            )
        result[name] = value
    # a run-time check fails here, before the node whose indices it checks (the importer puts
    # the check first) reads out of range
    raise_failed(result, [name for name in result if is_check(name)])
    return result


def run_graph(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Execute `graph` on `inputs` (name -> array); returns output name -> array. The graph's
    run-time checks (`runtime.checks`) raise `CheckFailed` when one fails and are not returned.

    >>> from tensorforge.compiler.graph import GraphBuilder
    >>> b = GraphBuilder()
    >>> x = b.add_input("x", (3,), "float32")
    >>> (y,) = b.add_node("Relu", [x])
    >>> run_graph(b.build([y]), {"x": np.array([-1, 0, 2], np.float32)})[y]
    array([0., 0., 2.], dtype=float32)
    """
    env: dict[str, np.ndarray] = dict(graph.constants)
    env.update(_check_inputs(graph, inputs))
    if graph.memory_plan is not None:
        from .passes.plan_memory import run_planned

        result = run_planned(graph, env)
    else:
        for node in graph.nodes:
            env.update(run_node(graph, node, env))
        result = {name: np.array(env[name]) for name in graph.outputs}
    outputs, checks = split_outputs(graph.outputs)
    raise_failed(result, checks)  # an index out of range: the error onnxruntime gives
    return {name: result[name] for name in outputs}

"""The graph layer: graph IR, op registry, printer, verifier, passes and a numpy executor.

See docs/graph.md for the user guide.
"""

from __future__ import annotations

from .ir import DTYPES, Graph, GraphBuilder, GraphError, Node, TensorType
from .reference import run_graph
from .registry import OPS, OpSpec, Pattern, UnsupportedOpError, get_op

__all__ = [
    "DTYPES",
    "OPS",
    "Graph",
    "GraphBuilder",
    "GraphError",
    "Node",
    "OpSpec",
    "Pattern",
    "TensorType",
    "UnsupportedOpError",
    "get_op",
    "run_graph",
]

"""widen_narrow: ops on bfloat16, float8 and int4 values compute in float32 (int8) between
Casts, and only Cast, CastLike, QuantizeLinear and DequantizeLinear keep narrow operands."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.passes import widen_narrow


def _ops(graph) -> list[tuple[str, tuple[str, ...]]]:
    return [(n.op, tuple(graph.types[o].dtype for o in n.outputs)) for n in graph.nodes]


def test_widen_narrow_before_and_after() -> None:
    b = GraphBuilder("g")
    x = b.add_input("x", (4,), "bfloat16")
    w = b.add_constant("w", np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16))
    (s,) = b.add_node("Add", [x, w])
    (y,) = b.add_node("Relu", [s])
    (z,) = b.add_node("Cast", [y], {"to": "float8_e4m3fn"})
    graph = b.build([y, z])
    widened = widen_narrow(graph)
    assert _ops(widened) == [
        ("Cast", ("float32",)),  # x; the constant w became float32 itself
        ("Add", ("float32",)),
        ("Cast", ("bfloat16",)),  # Add's result, rounded once
        ("Cast", ("float32",)),
        ("Relu", ("float32",)),
        ("Cast", ("bfloat16",)),
        ("Cast", ("float8_e4m3fn",)),  # a Cast keeps its narrow operand
    ]
    assert widened.constants["w"].dtype == np.float32
    assert widened.outputs == graph.outputs
    feed = {"x": np.array([-3.3, 1.01, 2.5, 100.7], np.float32).astype(ml_dtypes.bfloat16)}
    want = run_graph(graph, feed)  # the reference widens each op the same way
    got = run_graph(widened, feed)
    for name in graph.outputs:
        assert got[name].dtype == want[name].dtype
        np.testing.assert_array_equal(got[name].view(np.uint8), want[name].view(np.uint8))


def test_graph_without_narrow_values_is_unchanged() -> None:
    b = GraphBuilder("g")
    x = b.add_input("x", (4,), "float16")
    (y,) = b.add_node("Relu", [x])
    graph = b.build([y])
    assert widen_narrow(graph) is graph

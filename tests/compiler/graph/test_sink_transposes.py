"""sink_transposes on random chains of Transposes, element-wise ops, broadcasts with constants,
reductions and Pads: the graph it returns is well formed and computes the same outputs (the
registry's numpy kernels), and Transposes that compose to the identity leave no kernel."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.passes import sink_transposes
from tensorforge.compiler.graph.verify import verify_graph

SHAPE = (2, 3, 4, 5)


@st.composite
def chains(draw: st.DrawFn) -> tuple:
    b = GraphBuilder("chain")
    values = [b.add_input("x", SHAPE, "float32")]
    for i in range(draw(st.integers(1, 10))):
        a = draw(st.sampled_from(values))
        shape = b.types[a].shape
        kind = draw(
            st.sampled_from(["transpose", "transpose", "unary", "const", "add", "reduce", "pad"])
        )
        if kind == "transpose":
            perm = draw(st.permutations(range(len(shape))))
            (y,) = b.add_node("Transpose", [a], {"perm": list(perm)}, name=f"t{i}")  # even ()
        elif kind == "unary":
            (y,) = b.add_node(draw(st.sampled_from(["Relu", "Neg", "Sigmoid"])), [a], name=f"u{i}")
        elif kind == "const":  # a constant broadcast over some trailing axes
            rank = draw(st.integers(0, len(shape)))
            dims = [d if draw(st.booleans()) else 1 for d in shape[len(shape) - rank :]]
            value = np.random.default_rng(i).standard_normal(dims).astype(np.float32)
            c = b.add_constant(f"c{i}", value)
            (y,) = b.add_node("Mul", [a, c] if draw(st.booleans()) else [c, a], name=f"m{i}")
        elif kind == "add":
            same = [v for v in values if b.types[v].shape == shape]
            (y,) = b.add_node("Add", [a, draw(st.sampled_from(same))], name=f"a{i}")
        elif kind == "reduce" and shape:
            axes = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
            k = b.add_constant(f"axes{i}", np.array(axes, np.int64))
            keep = int(draw(st.booleans()))
            (y,) = b.add_node("ReduceSum", [a, k], {"keepdims": keep}, name=f"r{i}")
        elif kind == "pad" and shape:
            widths = [draw(st.integers(0, 2)) for _ in range(2 * len(shape))]
            p = b.add_constant(f"pads{i}", np.array(widths, np.int64))
            (y,) = b.add_node("Pad", [a, p], name=f"p{i}")
        else:
            continue
        values.append(y)
    outputs = draw(st.lists(st.sampled_from(values[1:] or values), min_size=1, max_size=3))
    return b.build(dict.fromkeys(outputs))


@settings(max_examples=80, deadline=None)
@given(chains())
def test_sinking_transposes_keeps_every_output(graph) -> None:  # noqa: ANN001
    sunk = sink_transposes(graph)
    verify_graph(sunk)
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    want, got = run_graph(graph, {"x": x}), run_graph(sunk, {"x": x})
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)
    before = sum(n.op == "Transpose" for n in graph.nodes)
    assert sum(n.op == "Transpose" for n in sunk.nodes) <= before + len(graph.outputs)


def test_inverse_transposes_around_element_wise_ops_vanish() -> None:
    b = GraphBuilder("nhwc")
    x = b.add_input("x", (1, 8, 4, 4), "float32")
    (t,) = b.add_node("Transpose", [x], {"perm": [0, 2, 3, 1]})
    bias = b.add_constant("bias", np.arange(8, dtype=np.float32))
    (a,) = b.add_node("Add", [t, bias])
    (r,) = b.add_node("Relu", [a])
    (u,) = b.add_node("Transpose", [r], {"perm": [0, 3, 1, 2]})
    sunk = sink_transposes(b.build([u]))
    assert [n.op for n in sunk.nodes] == ["Add", "Relu", "Identity"]
    assert sunk.types[sunk.nodes[0].inputs[1]].shape == (1, 8, 1, 1)

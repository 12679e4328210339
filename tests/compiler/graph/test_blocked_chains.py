"""The CPU compile's blocked convolution chains (`alter_layout(..., chains_only=True)`, on by
default in `compile_graph`): which convolutions move, and compiled results against the
reference executor of the graph as imported."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.compile import compile_graph
from tensorforge.compiler.graph.passes import alter_layout
from tensorforge.compiler.graph.passes.alter_layout import CPU_BLOCK
from tensorforge.compiler.graph.verify import verify_graph

RNG = np.random.default_rng(3)


def _conv(b: GraphBuilder, x: str, cin: int, cout: int, k: int = 3, name: str = "", **attrs):
    w = (RNG.standard_normal((cout, cin // attrs.get("group", 1), k, k)) * 0.3).astype("f4")
    bias = RNG.standard_normal(cout).astype("f4")
    inputs = [x, b.add_constant(f"{name}_w", w), b.add_constant(f"{name}_b", bias)]
    (y,) = b.add_node("Conv", inputs, {"pads": [k // 2] * 4, **attrs}, name=name)
    return y


def _relu(b: GraphBuilder, x: str, name: str) -> str:
    return b.add_node("Relu", [x], name=name)[0]


def _residual_net(channels: int, side: int = 9):
    """Stem conv -> max pool -> two residual blocks (the second strided, with a 1x1 projection)
    -> global average pool: ResNet's shape at toy size."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 3, side, side), "float32")
    s = _relu(b, _conv(b, x, 3, channels, name="stem"), "stem_relu")
    (p,) = b.add_node("MaxPool", [s], {"kernel_shape": [2, 2], "strides": [1, 1]}, name="pool")
    a = _relu(b, _conv(b, p, channels, channels, name="a1"), "a1_relu")
    (a,) = b.add_node("Add", [_conv(b, a, channels, channels, name="a2"), p], name="a_add")
    a = _relu(b, a, "a_out")
    wide = channels * 2
    c = _relu(b, _conv(b, a, channels, wide, name="b1", strides=[2, 2]), "b1_relu")
    proj = _conv(b, a, channels, wide, k=1, name="proj", strides=[2, 2], pads=[0, 0, 0, 0])
    (c,) = b.add_node("Add", [_conv(b, c, wide, wide, name="b2"), proj], name="b_add")
    (g,) = b.add_node("GlobalAveragePool", [_relu(b, c, "b_out")], name="gap")
    return _build(b, [g])


def _build(b: GraphBuilder, outputs: list[str]):
    graph = b.build(outputs)
    verify_graph(graph)
    return graph


def _compiled_matches_reference(graph) -> None:
    x = RNG.standard_normal(graph.types["x"].shape).astype("f4")
    want = run_graph(graph, {"x": x})
    got = compile_graph(graph, progress=False).run({"x": x})
    for name in graph.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


def test_only_chains_move_and_the_stem_keeps_nchw() -> None:
    graph = _residual_net(16)
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    moved = [n.name for n in after.nodes if n.op == "ConvNCHWc"]
    # the stem feeds only the max pool: moving it would trade its own pack for two transforms
    assert moved == ["a1", "a2", "b1", "proj", "b2"]
    transforms = [n for n in after.nodes if n.op == "LayoutTransform"]
    assert [(t.attr("dst"), t.attr("block")) for t in transforms] == [("NCHWc", 16), ("NCHW", 32)]
    adds = [n for n in after.nodes if n.op == "Add"]
    assert all(len(after.types[n.outputs[0]].shape) == 5 for n in adds)  # residuals stay blocked


def test_pointwise_gemm_depthwise_and_lone_convs_keep_nchw() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (1, 8, 6, 6), "float32")
    e = _relu(b, _conv(b, x, 8, 24, k=1, name="expand", pads=[0, 0, 0, 0]), "e_relu")
    d = _relu(b, _conv(b, e, 24, 24, name="dw", group=24), "d_relu")
    lone = _conv(b, d, 24, 12, name="lone")
    graph = _build(b, [lone])
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    assert [n.op for n in after.nodes] == ["Conv", "Relu", "Conv", "Relu", "Conv"]
    assert alter_layout(graph, CPU_BLOCK).nodes[-2].op == "ConvNCHWc"  # without chains_only


@pytest.mark.parametrize("channels", [16, 12, 6], ids=["c16", "c12", "c6"])
def test_residual_net_compiles_to_the_reference_result(channels: int) -> None:
    """Blocks of 16 and 32, 12 and 24 (not powers of two), 6 and 12."""
    _compiled_matches_reference(_residual_net(channels))


def test_chain_into_concat_depthwise_and_pooling() -> None:
    """A chain whose blocked output is read in NCHW by a Concat, a depthwise conv and a pool,
    and whose first conv has asymmetric padding and a stride."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 10, 11, 11), "float32")
    c1 = _relu(b, _conv(b, x, 10, 20, name="c1", pads=[0, 1, 1, 0], strides=[2, 2]), "r1")
    c2 = _conv(b, c1, 20, 20, name="c2")
    (cat,) = b.add_node("Concat", [c2, c1], {"axis": 1}, name="cat")
    dw = _conv(b, c2, 20, 20, name="dw", group=20)
    (pool,) = b.add_node("AveragePool", [c2], {"kernel_shape": [3, 3]}, name="avg")
    graph = _build(b, [cat, dw, pool])
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    assert [n.name for n in after.nodes if n.op == "ConvNCHWc"] == ["c1", "c2"]
    _compiled_matches_reference(graph)

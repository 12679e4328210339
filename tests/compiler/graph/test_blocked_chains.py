"""The CPU compile's blocked convolution chains (`alter_layout(..., chains_only=True)`, on by
default in `compile_graph`): which convolutions move, and compiled results against the
reference executor of the graph as imported."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler import te
from tensorforge.compiler.autotune.dispatch import ApplyBest, workload_key
from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.compile import compile_graph
from tensorforge.compiler.graph.passes import alter_layout
from tensorforge.compiler.graph.passes.alter_layout import CPU_BLOCK
from tensorforge.compiler.graph.strategy.conv import conv_workload
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


def _residual_net(channels: int, side: int = 17):
    """Stem conv -> max pool -> two residual blocks (the second strided, with a 1x1 projection)
    -> global average pool: ResNet's shape at toy size."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 3, side, side), "float32")
    s = _relu(b, _conv(b, x, 3, channels, name="stem"), "stem_relu")
    pool = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}  # ResNet's
    (p,) = b.add_node("MaxPool", [s], pool, name="pool")
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


def test_residual_net_stays_blocked_from_the_stem_to_the_global_pool() -> None:
    graph = _residual_net(16)
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    moved = [n.name for n in after.nodes if n.op == "ConvNCHWc"]
    assert moved == ["stem", "a1", "a2", "b1", "proj", "b2"]
    transforms = [n for n in after.nodes if n.op == "LayoutTransform"]
    # the stem packs the RGB input itself; the pooled [1, 32, 1, 1] out
    assert [(t.attr("dst"), t.attr("block")) for t in transforms] == [("NCHW", 32)]
    assert after.nodes[0].op == "ConvNCHWc" and after.nodes[0].inputs[0] == "x"
    pooled = {n.name: after.types[n.outputs[0]].shape for n in after.nodes}
    assert pooled["pool"] == (1, 1, 9, 9, 16) and pooled["gap"] == (1, 1, 1, 1, 32)
    adds = [n for n in after.nodes if n.op == "Add"]
    assert all(len(after.types[n.outputs[0]].shape) == 5 for n in adds)  # residuals stay blocked


def _mobile_block(b: GraphBuilder, x: str, cin: int, wide: int) -> str:
    """MBConv at toy size: expand 1x1 + ReLU6, depthwise 3x3 + SiLU, squeeze-excitation,
    project 1x1, residual add."""
    lo, hi = b.add_constant("lo", np.float32(0)), b.add_constant("hi", np.float32(6))
    e = _conv(b, x, cin, wide, k=1, name="expand", pads=[0, 0, 0, 0])
    (e,) = b.add_node("Clip", [e, lo, hi], name="relu6")
    d = _conv(b, e, wide, wide, name="dw", group=wide)
    (sig,) = b.add_node("Sigmoid", [d], name="dw_sig")
    (d,) = b.add_node("Mul", [d, sig], name="dw_silu")
    (g,) = b.add_node("GlobalAveragePool", [d], name="se_pool")
    g = _relu(b, _conv(b, g, wide, 4, k=1, name="squeeze", pads=[0, 0, 0, 0]), "se_relu")
    (g,) = b.add_node("Sigmoid", [_conv(b, g, 4, wide, k=1, name="excite", pads=[0, 0, 0, 0])],
                      name="se_gate")  # fmt: skip
    (d,) = b.add_node("Mul", [g, d], name="se_scale")  # the gate first, as torchvision has it
    p = _conv(b, d, wide, cin, k=1, name="project", pads=[0, 0, 0, 0])
    return b.add_node("Add", [p, x], name="residual")[0]


def test_mobile_block_moves_whole_and_lone_or_grouped_convs_keep_nchw() -> None:
    """The stem starts the chain; a pointwise conv whose input is NCHW would not (a GEMM on
    NCHW as it lies: nothing to save); a grouped conv and a lone one after it keep NCHW."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 3, 6, 6), "float32")
    y = _mobile_block(b, _conv(b, x, 3, 8, name="stem"), 8, 24)
    (p,) = b.add_node("MaxPool", [y], {"kernel_shape": [2, 2]}, name="pool")
    grouped = _conv(b, p, 8, 8, name="grouped", group=2)
    lone = _conv(b, grouped, 8, 12, name="lone")
    graph = _build(b, [lone])
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    moved = [n.name for n in after.nodes if n.op == "ConvNCHWc"]
    assert moved == ["stem", "expand", "dw", "squeeze", "excite", "project"]
    assert [n.name for n in after.nodes if n.op == "Conv"] == ["grouped", "lone"]
    (pool,) = [n for n in after.nodes if n.name == "se_pool"]
    assert pool.op == "ReduceMean"  # GlobalAveragePool over the blocked rows and columns
    assert after.types[pool.outputs[0]].shape == (1, 3, 1, 1, 8)
    # out before the max pool (the stem packs the input itself)
    assert sum(n.op == "LayoutTransform" for n in after.nodes) == 1
    _compiled_matches_reference(graph)


@pytest.mark.parametrize("channels", [16, 8, 40], ids=["c16", "c8", "c40"])
def test_residual_net_compiles_to_the_reference_result(channels: int) -> None:
    """Blocks of 16 and 32, 8 and 16, 8 (40 channels) and 16 (80)."""
    _compiled_matches_reference(_residual_net(channels))


def test_chain_into_concat_depthwise_and_pooling() -> None:
    """A chain whose blocked output is read in NCHW by a Concat and a pool, and goes on into
    a depthwise conv; its first conv has asymmetric padding and a stride."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 3, 11, 11), "float32")
    c1 = _relu(b, _conv(b, x, 3, 24, name="c1", pads=[0, 1, 1, 0], strides=[2, 2]), "r1")
    c2 = _conv(b, c1, 24, 24, name="c2")
    (cat,) = b.add_node("Concat", [c2, c1], {"axis": 1}, name="cat")
    dw = _conv(b, c2, 24, 24, name="dw", group=24)
    (pool,) = b.add_node("AveragePool", [c2], {"kernel_shape": [3, 3]}, name="avg")
    graph = _build(b, [cat, dw, pool])
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    assert [n.name for n in after.nodes if n.op == "ConvNCHWc"] == ["c1", "c2", "dw"]
    _compiled_matches_reference(graph)


def test_strided_5x5_depthwise_between_pointwise_convs() -> None:
    """40 channels (blocks of 8), a 5x5 depthwise conv of stride 2 with asymmetric padding;
    the expand conv reads the NCHW input as a GEMM, and so does the project conv (8-lane
    blocks out where the chain would end): the depthwise conv alone keeps NCHW too."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 16, 13, 13), "float32")
    e = _relu(b, _conv(b, x, 16, 40, k=1, name="expand", pads=[0, 0, 0, 0]), "e_relu")
    d = _relu(b, _conv(b, e, 40, 40, k=5, name="dw", group=40, strides=[2, 2],
                       pads=[2, 1, 1, 2]), "d_relu")  # fmt: skip
    graph = _build(b, [_conv(b, d, 40, 24, k=1, name="project", pads=[0, 0, 0, 0])])
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    assert [n.name for n in after.nodes if n.op == "ConvNCHWc"] == []
    _compiled_matches_reference(graph)


def test_a_chain_the_lookahead_expected_but_an_add_ended_is_undone() -> None:
    """RegNet's shortcut: a strided 1x1 conv whose output meets an NCHW branch (after a grouped
    conv whose groups of 4 channels take no whole-vector blocks) in the residual Add; moving it
    alone would only add two transforms."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 16, 8, 8), "float32")
    a = _relu(b, _conv(b, x, 16, 16, k=1, name="a", pads=[0, 0, 0, 0]), "a_relu")
    g = _relu(b, _conv(b, a, 16, 16, name="grouped", group=4, strides=[2, 2]), "g_relu")
    c = _conv(b, g, 16, 16, k=1, name="c", pads=[0, 0, 0, 0])
    short = _conv(b, x, 16, 16, k=1, name="shortcut", strides=[2, 2], pads=[0, 0, 0, 0])
    (s,) = b.add_node("Add", [c, short], name="residual")
    out = _conv(b, _relu(b, s, "out_relu"), 16, 16, k=1, name="next", pads=[0, 0, 0, 0])
    graph = _build(b, [out])
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    assert [n.op for n in after.nodes].count("ConvNCHWc") == 0
    assert "LayoutTransform" not in [n.op for n in after.nodes]
    _compiled_matches_reference(graph)


def test_channel_counts_without_whole_vector_blocks_keep_nchw() -> None:
    """36 channels would take blocks of 18 lanes, and padding them to 48 adds a third: those
    convs keep NCHW (116, padded to 128, move: test_blocked_padding.py)."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 3, 9, 9), "float32")
    s = _relu(b, _conv(b, x, 3, 36, name="stem"), "stem_relu")
    c = _conv(b, _relu(b, _conv(b, s, 36, 36, name="c1"), "r"), 36, 32, name="c2")
    after = alter_layout(_build(b, [c]), CPU_BLOCK, chains_only=True)
    assert "ConvNCHWc" not in [n.op for n in after.nodes]


def test_a_log_of_nchw_kernels_leaves_the_chains_blocked() -> None:
    """A config measured on a conv's NCHW kernel (a log from before the blocked kernels were
    tuned) neither takes the conv out of its chain nor applies to its blocked kernel: the
    blocked default runs, a warning names the workload, and the result is the reference's."""
    graph = _residual_net(16)
    node = next(n for n in graph.nodes if n.name == "a2")
    data = te.placeholder(graph.types[node.inputs[0]].shape, "float32")
    wl = conv_workload(data, graph.types[node.inputs[1]].shape, 1, 1, 1)
    values = {"ic_bn": 8, "oc_bn": 8, "reg_n": 3, "pack_data": False, "parallel": True}
    best = {workload_key("x86.conv2d_nchwc", wl): values}
    with ApplyBest(best):
        after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    moved = [n.name for n in after.nodes if n.op == "ConvNCHWc"]
    assert moved == ["stem", "a1", "a2", "b1", "proj", "b2"]
    with ApplyBest(best) as ctx, pytest.warns(UserWarning, match="runs blocked"):
        _compiled_matches_reference(graph)
    assert ctx.applied == [] and len(ctx.fallback) == 6  # a1 and a2: one workload, asked twice

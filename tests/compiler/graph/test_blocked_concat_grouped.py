"""Blocked chains through channel Concats, grouped convolutions, channel shuffles and lone batch
norms (`alter_layout(..., chains_only=True)`): the layout each value takes, and compiled
results against the reference executor of the graph as imported (numpy)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.compile import compile_graph
from tensorforge.compiler.graph.ops.layout import conv_nchwc, pack_weight, to_blocked
from tensorforge.compiler.graph.passes import alter_layout
from tensorforge.compiler.graph.passes.alter_layout import CPU_BLOCK
from tensorforge.compiler.graph.verify import verify_graph

RNG = np.random.default_rng(5)
NO_PADS = {"pads": [0, 0, 0, 0]}


def _conv(b: GraphBuilder, x: str, cin: int, cout: int, k: int = 3, name: str = "", **attrs):
    w = (RNG.standard_normal((cout, cin // attrs.get("group", 1), k, k)) * 0.3).astype("f4")
    bias = RNG.standard_normal(cout).astype("f4")
    inputs = [x, b.add_constant(f"{name}_w", w), b.add_constant(f"{name}_b", bias)]
    (y,) = b.add_node("Conv", inputs, {"pads": [k // 2] * 4, **attrs}, name=name)
    return b.add_node("Relu", [y], name=f"{name}_relu")[0]


def _batch_norm(b: GraphBuilder, x: str, channels: int, name: str) -> str:
    params = [
        RNG.uniform(0.5, 1.5, channels),  # scale
        RNG.standard_normal(channels),  # bias
        RNG.standard_normal(channels),  # mean
        RNG.uniform(0.5, 2.0, channels),  # variance
    ]
    names = [b.add_constant(f"{name}_{i}", p.astype("f4")) for i, p in enumerate(params)]
    return b.add_node("BatchNormalization", [x, *names], {"epsilon": 1e-3}, name=name)[0]


def _check(graph, stays: dict[str, int]) -> None:
    """`stays`: node name -> the rank its output has after alter_layout (5: blocked); then the
    compiled graph against the reference executor."""
    verify_graph(graph)
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    verify_graph(after)
    ranks = {n.name: len(after.types[n.outputs[0]].shape) for n in after.nodes}
    assert {name: ranks[name] for name in stays} == stays
    x = RNG.standard_normal(graph.types["x"].shape).astype("f4")
    want = run_graph(graph, {"x": x})
    got = compile_graph(graph, progress=False).run({"x": x})
    for name in graph.outputs:
        # float32 sums in another order: errors scale with the output's magnitude (values up
        # to ~200 after five random layers; a 0.73 among them was 3e-4 off on an AVX2 host)
        scale = float(np.abs(want[name]).max())
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5 * scale)


def _dense_block(widths: list[int], growth: int, side: int = 9):
    """DenseNet at toy size: a stem, then layers BN-ReLU-conv1x1-conv3x3 each reading the
    Concat of every feature so far; a last BN, ReLU and average pool."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 3, side, side), "float32")
    features = [_conv(b, x, 3, widths[0], name="stem")]
    channels = widths[0]
    for i, width in enumerate(widths[1:]):
        (cat,) = b.add_node("Concat", features, {"axis": 1}, name=f"cat{i}")
        bn = b.add_node("Relu", [_batch_norm(b, cat, channels, f"bn{i}")], name=f"bn{i}_r")[0]
        a = _conv(b, bn, channels, width, k=1, name=f"a{i}", **NO_PADS)
        features.append(_conv(b, a, width, growth, name=f"c{i}"))
        channels += growth
    (cat,) = b.add_node("Concat", features, {"axis": 1}, name="cat_out")
    bn = _batch_norm(b, cat, channels, "bn_out")
    (pool,) = b.add_node("AveragePool", [bn], {"kernel_shape": [2, 2], "strides": [2, 2]},
                         name="pool")  # fmt: skip
    return b.build([pool])


def test_dense_block_concats_and_batch_norms_stay_blocked() -> None:
    """Every input a multiple of 32 channels: the Concats, lone batch norms and convs between
    them keep NCHW[32]c; one transform at the end."""
    graph = _dense_block([64, 32, 32], 32)
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    assert [n.op for n in after.nodes].count("LayoutTransform") == 1
    assert "BatchNormalization" not in [n.op for n in after.nodes]  # a Mul and an Add
    _check(graph, {"cat0": 5, "cat1": 5, "cat_out": 5, "bn0": 5, "bn_out": 5, "pool": 5})


@pytest.mark.parametrize(
    ("widths", "growth"), [([24, 16], 8), ([40, 24], 24)], ids=["even-8", "odd-blocks"]
)
def test_concat_of_inputs_with_other_blocks_takes_their_common_block(widths, growth) -> None:
    """24 + 8 channels (blocks of 8 and 8: 32 would be the Concat's own), 40 + 24 (8 each;
    64 alone would take 32): the inputs' producers take the common block, so nothing is
    transformed between them."""
    graph = _dense_block(widths, growth)
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    (cat,) = [n for n in after.nodes if n.name == "cat_out"]
    assert after.types[cat.outputs[0]].shape[-1] == 8
    assert [n.op for n in after.nodes].count("LayoutTransform") == 1
    _check(graph, {"cat0": 5, "cat_out": 5, "stem": 5, "c0": 5})


def test_concat_with_an_input_without_whole_vector_blocks_keeps_nchw() -> None:
    """28 channels (a block of 4 lanes) in the Concat: it reads NCHW, the chains end there."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 3, 8, 8), "float32")
    s = _conv(b, x, 3, 32, name="stem")
    c1, c2 = _conv(b, s, 32, 32, name="c1"), _conv(b, s, 32, 28, name="c2")
    (cat,) = b.add_node("Concat", [c1, c2], {"axis": 1}, name="cat")
    _check(b.build([_conv(b, cat, 60, 32, name="after")]), {"c1": 5, "cat": 4})


def test_inception_branches_with_pools_meet_in_a_blocked_concat() -> None:
    """GoogLeNet's module: a 1x1 branch, 1x1-3x3 and 1x1-5x5 branches and a max pool-1x1 one,
    concatenated (16 + 32 + 8 + 8 channels)."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 3, 10, 10), "float32")
    s = _conv(b, x, 3, 16, name="stem")
    b1 = _conv(b, s, 16, 16, k=1, name="b1", **NO_PADS)
    b2 = _conv(b, _conv(b, s, 16, 8, k=1, name="b2a", **NO_PADS), 8, 32, name="b2")
    b3 = _conv(b, _conv(b, s, 16, 8, k=1, name="b3a", **NO_PADS), 8, 8, k=5, name="b3")
    pool_attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    (p,) = b.add_node("MaxPool", [s], pool_attrs, name="pool")
    b4 = _conv(b, p, 16, 8, k=1, name="b4", **NO_PADS)
    (cat,) = b.add_node("Concat", [b1, b2, b3, b4], {"axis": 1}, name="cat")
    _check(b.build([_conv(b, cat, 64, 32, name="next")]), {"cat": 5, "pool": 5, "b4": 5})


def _regnet_block(channels: int, group_width: int, stride: int = 2):
    """RegNetY's block at toy size: 1x1, grouped 3x3 (strided), squeeze-excitation, 1x1,
    and a strided 1x1 shortcut into the residual Add."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 3, 12, 12), "float32")
    s = _conv(b, x, 3, channels, name="stem")
    a = _conv(b, s, channels, channels, k=1, name="a", **NO_PADS)
    groups = channels // group_width
    g = _conv(b, a, channels, channels, name="grouped", group=groups, strides=[stride] * 2)
    (pooled,) = b.add_node("GlobalAveragePool", [g], name="se_pool")
    se = _conv(b, pooled, channels, 8, k=1, name="squeeze", **NO_PADS)
    w = RNG.standard_normal((channels, 8, 1, 1)).astype("f4")
    (gate,) = b.add_node("Conv", [se, b.add_constant("excite_w", w)], name="excite")
    (gate,) = b.add_node("Sigmoid", [gate], name="gate")
    (g,) = b.add_node("Mul", [g, gate], name="se_scale")
    c = b.add_node("Conv", [g, b.add_constant("c_w", _weight(channels, channels))], name="c")[0]
    short_w = b.add_constant("short_w", _weight(channels, channels))
    (short,) = b.add_node("Conv", [s, short_w], {"strides": [stride] * 2}, name="short")
    (y,) = b.add_node("Add", [c, short], name="residual")
    return b.build([b.add_node("Relu", [y], name="out")[0]])


def _weight(cout: int, cin: int) -> np.ndarray:
    return (RNG.standard_normal((cout, cin, 1, 1)) * 0.3).astype("f4")


@pytest.mark.parametrize(
    ("channels", "group_width"), [(96, 16), (64, 32), (64, 64)], ids=["g16-96", "g32", "g64"]
)
def test_grouped_convs_stay_in_the_chain(channels: int, group_width: int) -> None:
    """Group widths of 16, 32 and 64: the grouped conv keeps the blocked layout with blocks
    that divide its groups (96 channels take 16, not their own 32), and so do the values
    around it (the 1x1 conv before it, the squeeze-excitation's product, the residual)."""
    graph = _regnet_block(channels, group_width)
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    (grouped,) = [n for n in after.nodes if n.name == "grouped"]
    assert grouped.op == "ConvNCHWc"
    block = min(group_width, 32)
    assert after.types[grouped.inputs[0]].shape[-1] == block
    assert [n.op for n in after.nodes].count("LayoutTransform") == 1  # the output
    _check(graph, {"grouped": 5, "a": 5, "se_scale": 5, "residual": 5})


def test_groups_of_8_channels_keep_nchw() -> None:
    """RegNetY-400MF's group width: 8-lane blocks on the 1x1 convs around the grouped one
    would be slower than their NCHW GEMMs (`MIN_GROUP_BLOCK`)."""
    graph = _regnet_block(48, 8)
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    (grouped,) = [n for n in after.nodes if n.name == "grouped"]
    assert grouped.op == "Conv"
    _check(graph, {"grouped": 4})


def test_grouped_conv_reference_is_the_concat_of_its_groups() -> None:
    """ConvNCHWc's numpy reference with `group`: each group's blocks against a plain conv."""
    x = RNG.standard_normal((1, 32, 6, 6)).astype("f4")
    w = RNG.standard_normal((16, 8, 3, 3)).astype("f4")
    attrs = {"pads": [1, 1, 1, 1], "strides": [1, 1], "dilations": [1, 1], "group": 4,
             "auto_pad": "NOTSET"}  # fmt: skip
    got = conv_nchwc(attrs, to_blocked(x, 8), pack_weight(w, 8, 4))
    b = GraphBuilder()
    xin = b.add_input("x", x.shape, "float32")
    (y,) = b.add_node("Conv", [xin, b.add_constant("w", w)], {"pads": [1] * 4, "group": 4})
    want = run_graph(b.build([y]), {"x": x})[y]
    np.testing.assert_allclose(got, to_blocked(want, 4), rtol=1e-5, atol=1e-5)


def test_grouped_conv_with_a_mismatched_weight_is_a_clear_error() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (1, 4, 6, 6, 8), "float32")
    w = b.add_constant("w", np.zeros((2, 3, 3, 3, 8, 8), "f4"))  # 3 blocks a group, 4 / 2 = 2
    with pytest.raises(ValueError, match="ConvNCHWc with group 2 must read whole blocks"):
        b.add_node("ConvNCHWc", [x, w], {"group": 2}, name="bad")


def test_blocked_concat_kernel_copies_each_input_in_its_own_loop() -> None:
    """A blocked Concat with a batch norm after it: the row loop ends at the block axis, so
    each input gets its own loop (no choice among inputs per element) and the per-channel
    constants load as vectors (no modulo in their index)."""
    from tensorforge.compiler.graph.lower_te import lower_group
    from tensorforge.compiler.graph.passes import optimize
    from tensorforge.compiler.tir.lower import lower

    b = GraphBuilder()
    xs = [b.add_input(f"x{i}", (1, 2, 5, 5, 32), "float32") for i in range(3)]
    (cat,) = b.add_node("Concat", xs, {"axis": 1}, name="cat")
    scale = b.add_constant("scale", RNG.standard_normal((1, 6, 1, 1, 32)).astype("f4"))
    (y,) = b.add_node("Relu", [b.add_node("Mul", [cat, scale], name="mul")[0]], name="relu")
    graph = optimize(b.build([y]))
    (group,) = graph.groups
    kernel = lower_group(graph, group)
    text = str(lower(kernel.schedule, kernel.args, name="cat"))
    assert "if_then_else" not in text and "select" not in text and "%" not in text
    assert text.count("parallel") == 3
    inputs = {x: RNG.standard_normal((1, 2, 5, 5, 32)).astype("f4") for x in xs}
    want = np.maximum(np.concatenate(list(inputs.values()), axis=1) * graph.constants["scale"], 0)
    got = compile_graph(graph, progress=False).run(inputs)[y]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_channel_shuffle_ends_the_chain_and_matches() -> None:
    """ShuffleNet's shuffle (Reshape to groups, Transpose, Reshape back) of a blocked Concat:
    it reads NCHW (a transform before it), the next conv starts a chain again."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 3, 8, 8), "float32")
    s = _conv(b, x, 3, 32, name="stem")
    left, right = _conv(b, s, 32, 32, name="left"), _conv(b, s, 32, 32, name="right")
    (cat,) = b.add_node("Concat", [left, right], {"axis": 1}, name="cat")
    grouped = b.add_constant("grouped", np.array([1, 2, 32, 8, 8], np.int64))
    (r,) = b.add_node("Reshape", [cat, grouped], name="split_groups")
    (t,) = b.add_node("Transpose", [r], {"perm": [0, 2, 1, 3, 4]}, name="shuffle")
    flat = b.add_constant("flat", np.array([1, 64, 8, 8], np.int64))
    (y,) = b.add_node("Reshape", [t, flat], name="merge_groups")
    out = _conv(b, _conv(b, y, 64, 32, name="after"), 32, 32, name="last")
    _check(b.build([out]), {"cat": 5, "merge_groups": 4, "after": 5})

"""Layout alteration to NCHW[c]c: before/after structure and unchanged results."""

from __future__ import annotations

import numpy as np

from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.ops.layout import from_blocked, pack_weight, to_blocked
from tensorforge.compiler.graph.passes import alter_layout
from tensorforge.compiler.graph.verify import verify_graph

RNG = np.random.default_rng(0)


def _ops(graph) -> list[str]:
    return [n.op for n in graph.nodes]


def _weight(cout: int, cin: int, k: int = 3, groups: int = 1) -> np.ndarray:
    return (RNG.standard_normal((cout, cin // groups, k, k)) * 0.3).astype(np.float32)


def _check_same(before, after) -> None:
    verify_graph(after)
    x = RNG.standard_normal(before.types["x"].shape).astype(np.float32)
    want, got = run_graph(before, {"x": x}), run_graph(after, {"x": x})
    for name in before.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def test_conv_relu_conv_stays_blocked_between_the_convs() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (1, 16, 8, 8), "float32")
    bias = b.add_constant("bias", RNG.standard_normal(16).astype(np.float32))
    (c,) = b.add_node(
        "Conv", [x, b.add_constant("w1", _weight(16, 16)), bias], {"pads": [1, 1, 1, 1]}, name="c1"
    )
    (r,) = b.add_node("Relu", [c], name="relu")
    shift = b.add_constant("shift", RNG.standard_normal((16, 1, 1)).astype(np.float32))
    (a,) = b.add_node("Add", [r, shift], name="shift")
    (d,) = b.add_node(
        "Conv", [a, b.add_constant("w2", _weight(8, 16))], {"strides": [2, 2]}, name="c2"
    )
    (s,) = b.add_node("Add", [d, b.add_constant("one", np.float32(1))], name="plus1")
    before = b.build([s])
    after = alter_layout(before, block=8)
    assert _ops(before) == ["Conv", "Relu", "Add", "Conv", "Add"]
    assert _ops(after) == [
        "LayoutTransform",
        "ConvNCHWc",
        "Relu",
        "Add",
        "ConvNCHWc",
        "Add",
        "LayoutTransform",
    ]
    assert after.types[after.nodes[1].outputs[0]].shape == (1, 2, 8, 8, 8)
    assert after.types[after.nodes[4].outputs[0]].shape == (1, 1, 3, 3, 8)
    assert "w1" not in after.constants  # replaced by its packed form
    _check_same(before, after)


def test_ops_that_need_nchw_get_a_transform_back() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (1, 8, 6, 6), "float32")
    (c,) = b.add_node(
        "Conv", [x, b.add_constant("w", _weight(8, 8))], {"pads": [1, 1, 1, 1]}, name="conv"
    )
    (p,) = b.add_node("MaxPool", [c], {"kernel_shape": [2, 2]}, name="pool")
    (s,) = b.add_node("Add", [c, x], name="residual")
    before = b.build([p, s])
    after = alter_layout(before, block=4)
    assert _ops(after) == [
        "LayoutTransform",
        "ConvNCHWc",
        "MaxPool",  # pools the blocked layout: a 3-D window (2, 2, 1) over (H, W, c)
        "Add",  # reads x's blocked copy, made for the conv
        "LayoutTransform",
        "LayoutTransform",
    ]
    assert after.nodes[2].attr("kernel_shape") == (2, 2, 1)
    _check_same(before, after)


def test_grouped_convolution_and_odd_channels() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (1, 6, 5, 5), "float32")
    (g,) = b.add_node(
        "Conv",
        [x, b.add_constant("gw", _weight(6, 6, groups=2))],
        {"group": 2, "pads": [1, 1, 1, 1]},
        name="grouped",
    )
    (c,) = b.add_node(
        "Conv",
        [g, b.add_constant("dw", _weight(6, 6, groups=6))],
        {"group": 6, "pads": [1, 1, 1, 1]},
        name="depthwise",
    )
    (d,) = b.add_node("Conv", [c, b.add_constant("w", _weight(9, 6, k=1))], name="pointwise")
    before = b.build([d])
    after = alter_layout(before, block=4)
    # the grouped conv keeps NCHW, the depthwise one moves with its channels' block;
    # 6 and 9 channels use blocks 3 and 3 (largest divisors <= 4)
    assert _ops(after) == ["Conv", "LayoutTransform", "ConvNCHWc", "ConvNCHWc", "LayoutTransform"]
    assert after.nodes[1].attr("block") == 3
    assert after.nodes[2].attr("group") == 6
    assert after.types[after.nodes[2].inputs[1]].shape == (2, 1, 3, 3, 1, 3)
    _check_same(before, after)


def test_block_prefers_whole_vectors() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (1, 24, 4, 4), "float32")
    (c,) = b.add_node("Conv", [x, b.add_constant("w", _weight(144, 24, k=1))], name="expand")
    (d,) = b.add_node("Conv", [c, b.add_constant("w2", _weight(40, 144, k=1))], name="project")
    after = alter_layout(b.build([d]), block=32)
    # powers of two of 8 and more where they divide the channels (24: 8, 144: 16, 40: 8)
    assert [t.attr("block") for t in after.nodes if t.op == "LayoutTransform"] == [8, 8]
    assert after.types[after.nodes[1].outputs[0]].shape == (1, 9, 4, 4, 16)


def test_layout_helpers_round_trip() -> None:
    x = RNG.standard_normal((2, 12, 3, 4))
    assert np.array_equal(from_blocked(to_blocked(x, 4)), x)
    assert to_blocked(x, 4)[1, 2, 0, 3, 1] == x[1, 9, 0, 3]
    w = RNG.standard_normal((8, 6, 3, 3))
    assert pack_weight(w, 3, 4)[1, 1, 2, 0, 2, 3] == w[7, 5, 2, 0]

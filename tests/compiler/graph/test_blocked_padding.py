"""Channel padding in the CPU compile's blocked chains (`alter_layout.PAD_BLOCK`): channel
counts without a whole-vector block (728, 58, 116, 1000, ...) are padded with zero channels,
sliced off where a value leaves the blocked layout; compiled results against the reference
executor of the graph as imported."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.graph import GraphBuilder, run_graph
from tensorforge.compiler.graph.compile import compile_graph
from tensorforge.compiler.graph.passes import alter_layout
from tensorforge.compiler.graph.passes.alter_layout import CPU_BLOCK
from tensorforge.compiler.graph.verify import verify_graph

RNG = np.random.default_rng(5)


def _conv(b: GraphBuilder, x: str, cin: int, cout: int, k: int = 3, name: str = "", **attrs):
    w = RNG.standard_normal((cout, cin // attrs.get("group", 1), k, k)) / np.sqrt(cin * k * k)
    bias = RNG.standard_normal(cout) * 0.1
    inputs = [x, b.add_constant(f"{name}_w", w.astype("f4")),
              b.add_constant(f"{name}_b", bias.astype("f4"))]  # fmt: skip
    (y,) = b.add_node("Conv", inputs, {"pads": [k // 2] * 4, **attrs}, name=name)
    return y


def _relu(b: GraphBuilder, x: str, name: str) -> str:
    return b.add_node("Relu", [x], name=name)[0]


def _separable(b: GraphBuilder, x: str, c: int, cout: int, name: str) -> str:
    """Xception's separable conv: depthwise 3x3, pointwise 1x1, then a lone batch norm."""
    d = _conv(b, x, c, c, name=f"{name}_dw", group=c)
    p = _conv(b, d, c, cout, k=1, name=f"{name}_pw", pads=[0, 0, 0, 0])
    params = [RNG.uniform(0.5, 1.5, cout), RNG.standard_normal(cout) * 0.1,
              RNG.standard_normal(cout) * 0.1, RNG.uniform(0.5, 1.5, cout)]  # fmt: skip
    names = [b.add_constant(f"{name}_bn{i}", p.astype("f4")) for i, p in enumerate(params)]
    return _relu(b, b.add_node("BatchNormalization", [p, *names], name=f"{name}_bn")[0], name)


def _compiled_matches_reference(graph, tol: float = 1e-4) -> None:
    verify_graph(graph)
    x = RNG.standard_normal(graph.types["x"].shape).astype("f4")
    want = run_graph(graph, {"x": x})
    got = compile_graph(graph, progress=False).run({"x": x})
    for name in graph.outputs:
        assert np.isfinite(got[name]).all()
        np.testing.assert_allclose(got[name], want[name], rtol=tol, atol=tol)


def _moved(graph) -> dict[str, tuple[int, ...]]:
    """The moved convs' blocked output shapes, by name."""
    return {n.name: graph.types[n.outputs[0]].shape for n in graph.nodes if n.op == "ConvNCHWc"}


def _transforms(graph) -> list[tuple[str, int, int]]:
    return [(n.attr("dst"), n.attr("block"), n.attr("channels"))
            for n in graph.nodes if n.op == "LayoutTransform"]  # fmt: skip


@pytest.mark.parametrize(
    ("channels", "padded", "block"),
    [
        (58, 64, 32),
        (100, 112, 16),
        (116, 128, 32),
        (200, 208, 16),
        (232, 240, 16),
        (728, 736, 32),
        (1000, 1008, 16),
        (20, 20, 0),
        (24, 24, 8),
        (40, 40, 8),
    ],  # fmt: skip
)
def test_awkward_channel_counts_are_padded_to_whole_vectors(channels, padded, block) -> None:
    """A 3x3 conv into two separable convs with a residual Add (Xception's middle flow at toy
    size): every conv moves, its values padded; the input is padded with zeros on its way in
    and the output sliced on its way out. Where padding would add more than an eighth (20, 24
    and 40 channels) the blocks are as before: 8 lanes, or NCHW (20: a block of 20)."""
    b = GraphBuilder()
    x = b.add_input("x", (1, channels, 5, 5), "float32")
    y = _relu(b, _conv(b, x, channels, channels, name="c3"), "c3_relu")
    s = _separable(b, _separable(b, y, channels, channels, "s1"), channels, channels, "s2")
    (out,) = b.add_node("Add", [s, y], name="residual")
    graph = b.build([out])
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    names = ("c3", "s1_dw", "s1_pw", "s2_dw", "s2_pw") if block else ()
    assert _moved(after) == {name: (1, padded // block, 5, 5, block) for name in names}
    if padded == channels:
        assert all(t[2] == 0 for t in _transforms(after))
        return
    assert _transforms(after) == [("NCHWc", block, padded), ("NCHW", block, channels)]
    (dw,) = [n for n in after.nodes if n.name == "s1_dw"]
    assert dw.attr("group") == padded  # the padded channels are groups of their own
    if channels in (200, 728):  # compiled for two (58: the tests below; compile time)
        _compiled_matches_reference(graph)


def _padded_chain(b: GraphBuilder, x: str, c: int, name: str) -> str:
    """A 3x3 conv and a separable conv of `c` channels: a chain that moves (padded)."""
    return _separable(b, _relu(b, _conv(b, x, c, c, name=f"{name}_c3"), f"{name}_r"), c, c, name)


def test_reductions_over_channels_read_the_padded_value_sliced() -> None:
    """ReduceSum and Softmax over channels, a ReduceMax over everything: their inputs leave
    the blocked layout through a transform that drops the padded channels (a reduction over
    them would count the bias-free zero channels, a softmax spread weight on them)."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 58, 6, 6), "float32")
    y = _padded_chain(b, x, 58, "a")
    axes = b.add_constant("axes", np.array([1], np.int64))
    (total,) = b.add_node("ReduceSum", [y, axes], {"keepdims": 1}, name="sum")
    (soft,) = b.add_node("Softmax", [y], {"axis": 1}, name="softmax")
    (peak,) = b.add_node("ReduceMax", [y], {"keepdims": 0}, name="max")
    graph = b.build([total, soft, peak])
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    assert _transforms(after) == [("NCHWc", 32, 64), ("NCHW", 32, 58)]
    _compiled_matches_reference(graph)


def test_concat_of_two_padded_values_then_a_padded_chain() -> None:
    """ShuffleNet's halves: two 58-channel chains meet in a Concat (in NCHW: each input sliced
    out of its 64 padded channels), whose 116 channels go on padded to 128."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 58, 6, 6), "float32")
    left = _padded_chain(b, x, 58, "l")
    right = _padded_chain(b, _relu(b, x, "x_relu"), 58, "r")
    (cat,) = b.add_node("Concat", [left, right], {"axis": 1}, name="cat")
    out = _padded_chain(b, cat, 116, "after")
    graph = b.build([out])
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    (concat,) = [n for n in after.nodes if n.op == "Concat"]
    assert after.types[concat.outputs[0]].shape == (1, 116, 6, 6)
    assert _moved(after)["after_dw"] == (1, 4, 6, 6, 32)  # the last 1x1, a GEMM, reads NCHW
    assert ("NCHW", 32, 58) in _transforms(after) and ("NCHWc", 32, 128) in _transforms(after)
    _compiled_matches_reference(graph)


def test_split_and_channel_shuffle_of_a_padded_value() -> None:
    """A 116-channel chain's output split in halves and shuffled (ShuffleNet's Reshape,
    Transpose, Reshape): both read the value sliced to its 116 channels."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 116, 6, 6), "float32")
    y = _padded_chain(b, x, 116, "a")
    split = b.add_constant("halves", np.array([58, 58], np.int64))
    left, right = b.add_node("Split", [y, split], {"axis": 1}, name="split", outputs=["l", "r"])
    grouped = b.add_constant("grouped", np.array([1, 2, 58, 6, 6], np.int64))
    (g,) = b.add_node("Reshape", [y, grouped], name="group")
    (t,) = b.add_node("Transpose", [g], {"perm": [0, 2, 1, 3, 4]}, name="swap")
    flat = b.add_constant("flat", np.array([1, 116, 6, 6], np.int64))
    (shuffled,) = b.add_node("Reshape", [t, flat], name="shuffle")
    out = _padded_chain(b, right, 58, "b")
    graph = b.build([left, out, shuffled])
    _compiled_matches_reference(graph)


def test_flatten_and_reshape_after_a_global_pool_of_a_padded_value() -> None:
    """Xception's head: the global pool of a chain stays blocked (over 736 padded channels),
    Flatten and Reshape read its 728 channels."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 728, 3, 3), "float32")
    y = _conv(b, _padded_chain(b, x, 728, "a"), 728, 728, name="last")  # a 3x3: not a GEMM
    (g,) = b.add_node("GlobalAveragePool", [y], name="gap")
    (flat,) = b.add_node("Flatten", [g], {"axis": 1}, name="flatten")
    shape = b.add_constant("shape", np.array([1, 8, 91], np.int64))
    (r,) = b.add_node("Reshape", [g, shape], name="reshape")
    graph = b.build([flat, r])
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    (pool,) = [n for n in after.nodes if n.name == "gap"]
    assert after.types[pool.outputs[0]].shape == (1, 23, 1, 1, 32)
    assert _transforms(after)[-1] == ("NCHW", 32, 728)
    _compiled_matches_reference(graph)


def test_squeeze_excitation_gate_and_per_channel_constants_on_padded_channels() -> None:
    """A 58-channel SE gate ([N, C, 1, 1], padded on its way in), a per-channel Div (its
    padded divisors are ones) and Sub stay blocked; a Log, which would turn the zero channels
    into -inf (and the next conv's zero weights into NaN), reads the value sliced."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 58, 7, 7), "float32")
    y = _padded_chain(b, x, 58, "a")
    (g,) = b.add_node("GlobalAveragePool", [y], name="pool")
    gate = _conv(b, _relu(b, _conv(b, g, 58, 8, k=1, name="sq", pads=[0] * 4), "sq_r"), 8, 58,
                 k=1, name="ex", pads=[0] * 4)  # fmt: skip
    (gate,) = b.add_node("Sigmoid", [gate], name="gate")
    (scaled,) = b.add_node("Mul", [gate, y], name="scale")
    scale = b.add_constant("per_channel", RNG.uniform(1, 2, (58, 1, 1)).astype("f4"))
    (divided,) = b.add_node("Div", [scaled, scale], name="div")
    (shifted,) = b.add_node("Sub", [divided, scale], name="sub")
    one = b.add_constant("one", np.float32(3))
    (lifted,) = b.add_node("Add", [_relu(b, shifted, "r2"), one], name="lift")
    (log,) = b.add_node("Log", [lifted], name="log")
    out = _padded_chain(b, log, 58, "b")
    graph = b.build([out])
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    blocked = {n.name for n in after.nodes if len(after.types[n.outputs[0]].shape) == 5}
    assert {"scale", "div", "sub", "lift"} <= blocked and "log" not in blocked
    _compiled_matches_reference(graph)


def test_without_padding_the_awkward_counts_keep_their_old_blocks(monkeypatch) -> None:
    """`PAD_BLOCK = 0`: 116 channels (blocks of 29) keep NCHW, 728 take 8-lane blocks."""
    import importlib

    module = importlib.import_module("tensorforge.compiler.graph.passes.alter_layout")
    monkeypatch.setattr(module, "PAD_BLOCK", 0)
    for channels, moved in ((116, {}), (728, {"a_c3": (1, 91, 3, 3, 8)})):
        b = GraphBuilder()
        x = b.add_input("x", (1, channels, 3, 3), "float32")
        graph = b.build([_padded_chain(b, x, channels, "a")])
        after = alter_layout(graph, CPU_BLOCK, chains_only=True)
        assert {k: v for k, v in _moved(after).items() if k == "a_c3"} == moved


def test_a_depthwise_conv_packs_its_padded_nchw_input_itself() -> None:
    """A chain that starts at a depthwise conv of 116 channels (after an NCHW op: here the
    input) reads the NCHW value as it lies and pads it to 128 block by block (no transform in:
    one into 32-lane blocks cost twice one into 8-lane blocks); the graph's own executor and
    the compiled kernel agree with the imported graph."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 116, 7, 6), "float32")
    d = _relu(b, _conv(b, x, 116, 116, name="dw", group=116, strides=[2, 1]), "dw_relu")
    out = _conv(b, d, 116, 116, name="c3")
    graph = b.build([out])
    after = alter_layout(graph, CPU_BLOCK, chains_only=True)
    (dw,) = [n for n in after.nodes if n.name == "dw"]
    assert dw.op == "ConvNCHWc" and dw.inputs[0] == "x" and dw.attr("group") == 128
    assert _transforms(after) == [("NCHW", 32, 116)]
    x_value = RNG.standard_normal((1, 116, 7, 6)).astype("f4")
    want = run_graph(graph, {"x": x_value})[out]
    np.testing.assert_allclose(run_graph(after, {"x": x_value})[out], want, rtol=1e-5, atol=1e-5)
    _compiled_matches_reference(graph)

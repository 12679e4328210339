"""Before/after tests of the rewriting passes: constant folding, batch-norm folding, dropping
convolution taps that read only padding, DCE."""

from __future__ import annotations

import numpy as np

from tensorforge.compiler.graph import GraphBuilder, ir, run_graph
from tensorforge.compiler.graph.passes import (
    drop_padding_taps,
    eliminate_dead_code,
    fold_batch_norm,
    fold_constants,
)
from tensorforge.compiler.graph.verify import verify_graph
from tensorforge.runtime import ndarray as nd

RNG = np.random.default_rng(0)


def _ops(graph) -> list[str]:
    return [n.op for n in graph.nodes]


def _same_results(before, after, x: np.ndarray, rtol: float = 1e-6) -> None:
    verify_graph(after)
    want, got = run_graph(before, {"x": x}), run_graph(after, {"x": x})
    for name in before.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=rtol)


def test_fold_constants_evaluates_constant_subgraphs() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (2, 4), "float32")
    w = b.add_constant("w", RNG.standard_normal((3, 4)).astype(np.float32))
    (wt,) = b.add_node("Transpose", [w], {"perm": [1, 0]}, name="wt")
    (shape,) = b.add_node("Shape", [x], name="shape")  # static, so foldable
    (y,) = b.add_node("MatMul", [x, wt], name="mm")
    (z,) = b.add_node("Reshape", [y, b.add_constant("s", np.array([-1], np.int64))], name="r")
    before = b.build([z, shape])
    after = fold_constants(before)
    assert _ops(before) == ["Transpose", "Shape", "MatMul", "Reshape"]
    assert _ops(after) == ["MatMul", "Reshape"]
    np.testing.assert_array_equal(after.constants["wt"], before.constants["w"].T)
    np.testing.assert_array_equal(after.constants["shape"], [2, 4])
    _same_results(before, after, RNG.standard_normal((2, 4)).astype(np.float32))
    assert fold_constants(after) is after  # nothing left to fold


def _conv_bn(b: GraphBuilder, x: str, bias: bool) -> str:
    w = b.add_constant("w", RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    inputs = [x, w] + (
        [b.add_constant("b", RNG.standard_normal(4).astype(np.float32))] if bias else []
    )
    (c,) = b.add_node("Conv", inputs, {"pads": [1, 1, 1, 1]}, name="conv")
    params = [
        RNG.uniform(0.5, 1.5, 4),
        RNG.standard_normal(4),
        RNG.standard_normal(4),
        RNG.uniform(0.5, 2, 4),
    ]
    names = [b.add_constant(f"p{i}", p.astype(np.float32)) for i, p in enumerate(params)]
    (y,) = b.add_node("BatchNormalization", [c, *names], {"epsilon": 1e-3}, name="bn")
    return y


def test_fold_batch_norm_into_conv() -> None:
    for bias in (False, True):
        b = GraphBuilder()
        x = b.add_input("x", (1, 3, 6, 6), "float32")
        (y,) = b.add_node("Relu", [_conv_bn(b, x, bias)], name="relu")
        before = b.build([y])
        after = fold_batch_norm(before)
        assert _ops(before) == ["Conv", "BatchNormalization", "Relu"]
        assert _ops(after) == ["Conv", "Relu"]
        conv = after.nodes[0]
        assert conv.name == "conv" and conv.outputs == ("bn",) and len(conv.inputs) == 3
        _same_results(before, after, RNG.standard_normal((1, 3, 6, 6)).astype(np.float32), 1e-5)


def test_fold_batch_norm_writes_each_weight_once(monkeypatch) -> None:  # noqa: ANN001
    """The folded weight is the one array the new graph keeps: aligned, read-only and never
    copied again (`Graph` copies a writable constant), and bit-identical to numpy's float64
    product rounded to float32 (the oracle)."""
    b = GraphBuilder()
    x = b.add_input("x", (1, 3, 6, 6), "float32")
    before = b.build([_conv_bn(b, x, True)])
    copied: list[tuple[int, ...]] = []
    real = ir._frozen_array
    monkeypatch.setattr(ir, "_frozen_array", lambda a: copied.append(a.shape) or real(a))
    after = fold_batch_norm(before)
    assert (4, 3, 3, 3) not in copied
    weight = after.constants[after.nodes[0].inputs[1]]
    assert not weight.flags.writeable and nd.aligned(weight) is weight
    c = {k: v.astype(np.float64) for k, v in before.constants.items()}
    factor = c["p0"] / np.sqrt(c["p3"] + before.nodes[1].attr("epsilon"))
    np.testing.assert_array_equal(weight, (c["w"] * factor[:, None, None, None]).astype(np.float32))


def test_fold_batch_norm_keeps_a_conv_output_that_is_also_used_elsewhere() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (1, 3, 6, 6), "float32")
    y = _conv_bn(b, x, False)
    before = b.build([y, "conv"])  # the raw conv output is a graph output too
    assert fold_batch_norm(before) is before


def test_eliminate_dead_code_drops_unused_nodes_and_constants() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (3,), "float32")
    c = b.add_constant("unused", np.ones(3, np.float32))
    (dead,) = b.add_node("Add", [x, c], name="dead")
    (dead2,) = b.add_node("Exp", [dead], name="dead2")
    (live,) = b.add_node("Relu", [x], name="live")
    before = b.build([live])
    after = eliminate_dead_code(before)
    assert _ops(after) == ["Relu"]
    assert dict(after.constants) == {}
    assert "dead" not in after.types and "dead2" not in after.types
    _same_results(before, after, np.array([-1, 0, 2], np.float32))
    assert eliminate_dead_code(after) is after


def test_passes_leave_their_input_unchanged() -> None:
    b = GraphBuilder()
    x = b.add_input("x", (1, 3, 6, 6), "float32")
    before = b.build([_conv_bn(b, x, True)])
    text = repr(before.nodes)
    eliminate_dead_code(fold_batch_norm(fold_constants(before)))
    assert repr(before.nodes) == text


def _dilated_conv(shape: tuple, kernel: tuple, attrs: dict) -> ir.Graph:
    b = GraphBuilder()
    x = b.add_input("x", shape, "float32")
    w = b.add_constant("w", RNG.standard_normal((4, shape[1], *kernel)).astype(np.float32))
    bias = b.add_constant("b", RNG.standard_normal(4).astype(np.float32))
    (y,) = b.add_node("Conv", [x, w, bias], attrs, name="conv")
    return b.build([y])


def test_drop_padding_taps_of_a_dilation_past_the_input() -> None:
    # DeepLabV3's ASPP branch on a 6x5 map: only the centre tap reaches the input
    before = _dilated_conv((1, 3, 6, 5), (3, 3), {"dilations": [36, 36], "pads": [36] * 4})
    after = drop_padding_taps(before)
    conv = after.nodes[0]
    assert conv.attr("kernel_shape") == (1, 1) and conv.attr("pads") == (0, 0, 0, 0)
    np.testing.assert_array_equal(
        after.constants[conv.inputs[1]], before.constants["w"][:, :, 1:2, 1:2]
    )
    _same_results(before, after, RNG.standard_normal((1, 3, 6, 5)).astype(np.float32), 1e-5)


def test_drop_padding_taps_keeps_the_taps_that_reach_the_input() -> None:
    # asymmetric pads, strides and a 3-D kernel: the trailing tap of the depth axis reads only
    # the end padding, every tap of the rows reaches the input, the columns keep the centre
    before = _dilated_conv(
        (1, 2, 4, 5, 3),
        (3, 3, 3),
        {"dilations": [3, 1, 4], "pads": [0, 1, 4, 6, 1, 4], "strides": [1, 2, 1]},
    )
    after = drop_padding_taps(before)
    conv = after.nodes[0]
    assert conv.attr("kernel_shape") == (2, 3, 1)
    assert conv.attr("pads") == (0, 1, 0, 3, 1, 0)
    assert after.types["conv"] == before.types["conv"]
    _same_results(before, after, RNG.standard_normal((1, 2, 4, 5, 3)).astype(np.float32), 1e-5)
    assert drop_padding_taps(after) is after  # every tap left reaches the input
    plain = _dilated_conv((1, 3, 6, 5), (3, 3), {"pads": [1, 1, 1, 1]})
    assert drop_padding_taps(plain) is plain


def test_drop_padding_taps_keeps_symmetric_pads_symmetric() -> None:
    # ResNet's 3x3 stride-2 conv from 2x2 to 1x1: only the top/left tap reads padding alone;
    # cutting it would leave pads (0, 0, 1, 1), which the accelerator's conv does not take
    strided = _dilated_conv((1, 3, 2, 2), (3, 3), {"pads": [1] * 4, "strides": [2, 2]})
    assert drop_padding_taps(strided) is strided
    # on a 1x1 map both outer taps read padding alone: one off each end, pads still symmetric
    before = _dilated_conv((1, 3, 1, 1), (3, 3), {"pads": [1] * 4})
    conv = drop_padding_taps(before).nodes[0]
    assert conv.attr("kernel_shape") == (1, 1) and conv.attr("pads") == (0, 0, 0, 0)

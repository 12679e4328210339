"""Channel Concats whose inputs are padded each (`alter_layout`, CPU compile): SelecSLS's
144 + 72 + 72 channels take 16-lane blocks (72 padded to 80) where the Concat's only readers
are Convs, which scatter their weights' input channels to where the Concat holds them; the
compiled model against onnxruntime on toy sizes of that block."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph.passes import alter_layout
from tensorforge.compiler.graph.passes.alter_layout import CPU_BLOCK

RNG = np.random.default_rng(11)


def _conv(nodes, inits, x: str, cin: int, cout: int, k: int, name: str, relu=True) -> str:
    w = (RNG.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype("f4")
    b = (RNG.standard_normal(cout) * 0.1).astype("f4")
    inits += [numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")]
    out = f"{name}_relu" if relu else name
    nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [name], name=name,
                                  pads=[k // 2] * 4))  # fmt: skip
    if relu:
        nodes.append(helper.make_node("Relu", [name], [out], name=out))
    return out


def _model(nodes, inits, name: str, channels: int):
    """The model of `nodes` from input x `[1, channels, 6, 6]` to output y, at opset 17."""
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _selecsls_block(mid: int, tail: str):
    """d1 = conv3x3(x); d2 = conv3x3(conv1x1(d1)) with mid/2 channels; d3 likewise; then
    `tail` reads Concat(d1, d2, d3): "conv" a 1x1 conv to 32 channels, "conv20" one to 20
    (a conv that stays NCHW: the Concat's channels gathered), "relu" a Relu (not a conv)."""
    nodes, inits = [], []
    d1 = _conv(nodes, inits, "x", 16, mid, 3, "c1")
    d2 = _conv(nodes, inits, _conv(nodes, inits, d1, mid, mid, 1, "c2"), mid, mid // 2, 3, "c3")
    d3 = _conv(nodes, inits, _conv(nodes, inits, d2, mid // 2, mid, 1, "c4"), mid, mid // 2, 3,
               "c5")  # fmt: skip
    nodes.append(helper.make_node("Concat", [d1, d2, d3], ["cat"], name="cat", axis=1))
    if tail == "relu":
        nodes.append(helper.make_node("Relu", ["cat"], ["y"], name="y"))
    else:
        out = _conv(nodes, inits, "cat", 2 * mid, 32 if tail == "conv" else 20, 1, "c6", False)
        nodes.append(helper.make_node("Identity", [out], ["y"], name="y"))
    return _model(nodes, inits, "selecsls", 16)


def _matches_onnxruntime(model, channels: int = 16) -> None:
    x = RNG.standard_normal((1, channels, 6, 6)).astype("f4")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = tensorforge.compile(model, progress=False).run({"x": x})["y"]
    np.testing.assert_allclose(got, want.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mid", [144, 176])
def test_concat_inputs_are_padded_each_where_convs_read_it(mid: int) -> None:
    """72 (88) channels pad to 80 (96): the Concat of 144 + 80 + 80 (176 + 96 + 96) takes
    16-lane blocks, not 8; its reader's weights hold zeros at the padded channels."""
    model = _selecsls_block(mid, "conv")
    after = alter_layout(from_onnx(model), CPU_BLOCK, chains_only=True)
    (cat,) = [n for n in after.nodes if n.op == "Concat"]
    half = -(-(mid // 2) // 16) * 16
    assert after.types[cat.outputs[0]].shape == (1, (mid + 2 * half) // 16, 6, 6, 16)
    (c6,) = [n for n in after.nodes if n.name == "c6"]
    packed = after.constants[c6.inputs[1]]  # (O/bo, C/bi, 1, 1, bi, bo)
    by_input = np.abs(packed).sum(axis=(0, 2, 3, 5)).reshape(-1)
    pads = [mid + mid // 2 + i for i in range(half - mid // 2)]
    pads += [mid + half + mid // 2 + i for i in range(half - mid // 2)]
    assert (by_input[pads] == 0).all() and (np.delete(by_input, pads) > 0).all()
    _matches_onnxruntime(model)


def test_a_padded_concat_read_by_an_nchw_conv_gathers_its_channels() -> None:
    """The 1x1 conv to 20 channels stays NCHW (20 take no whole-vector block): the padded
    Concat leaves the blocked layout through a Gather of its 288 channels out of 304."""
    model = _selecsls_block(144, "conv20")
    after = alter_layout(from_onnx(model), CPU_BLOCK, chains_only=True)
    (gather,) = [n for n in after.nodes if n.op == "Gather"]
    assert after.types[gather.outputs[0]].shape == (1, 288, 6, 6)
    _matches_onnxruntime(model)


def test_a_concat_with_other_readers_keeps_exact_channels() -> None:
    """A Relu reads the Concat: its inputs are not padded (8-lane blocks, as before)."""
    model = _selecsls_block(144, "relu")
    after = alter_layout(from_onnx(model), CPU_BLOCK, chains_only=True)
    (cat,) = [n for n in after.nodes if n.op == "Concat"]
    assert after.types[cat.outputs[0]].shape == (1, 36, 6, 6, 8)
    _matches_onnxruntime(model)


@settings(max_examples=12, deadline=None)
@given(
    widths=st.lists(st.sampled_from([32, 64, 72, 88, 120, 144, 152]), min_size=2, max_size=4),
    out=st.sampled_from([20, 32, 48]),
    stem_too=st.booleans(),
)
def test_padded_concats_of_any_widths_match_onnxruntime(widths, out, stem_too) -> None:
    """Branches of 3x3 convs of `widths` channels (and the 16-channel stem itself with
    `stem_too`) meet in a Concat read by a 1x1 conv to `out` channels (20: kept NCHW, the
    Concat gathered): the scattered weights put every channel where the Concat holds it."""
    nodes, inits = [], []
    stem = _conv(nodes, inits, "x", 16, 16, 3, "stem")
    branches = [_conv(nodes, inits, stem, 16, w, 3, f"b{i}") for i, w in enumerate(widths)]
    branches += [stem] if stem_too else []
    nodes.append(helper.make_node("Concat", branches, ["cat"], name="cat", axis=1))
    total = sum(widths) + 16 * stem_too
    y = _conv(nodes, inits, "cat", total, out, 1, "after", False)
    nodes.append(helper.make_node("Identity", [y], ["y"], name="y"))
    _matches_onnxruntime(_model(nodes, inits, "branches", 16))


def test_a_padded_concat_of_nchw_values_is_built_blocked() -> None:
    """No input of the Concat is blocked (the graph's input and a Sigmoid of it, 72 channels
    each): the Concat is still built in the padded blocked layout its reader's scattered
    weights expect (an NCHW Concat then padded at its end read channels 72-143 misplaced)."""
    nodes, inits = [helper.make_node("Sigmoid", ["x"], ["s"], name="s")], []
    nodes.append(helper.make_node("Concat", ["x", "s"], ["cat"], name="cat", axis=1))
    y = _conv(nodes, inits, _conv(nodes, inits, "cat", 144, 32, 3, "c1"), 32, 32, 3, "c2")
    nodes.append(helper.make_node("Identity", [y], ["y"], name="y"))
    model = _model(nodes, inits, "nchw", 72)
    after = alter_layout(from_onnx(model), CPU_BLOCK, chains_only=True)
    (cat,) = [n for n in after.nodes if n.op == "Concat"]
    assert after.types[cat.outputs[0]].shape == (1, 10, 6, 6, 16)
    _matches_onnxruntime(model, channels=72)


def test_a_ghost_module_concat_of_narrow_halves_stays_nchw() -> None:
    """GhostNet's Concat of two 36-channel halves (4-lane blocks: not a blocked Concat) whose
    72 channels go on padded to 80: the Concat stays NCHW, the chain after it is padded."""
    nodes, inits = [], []
    half = _conv(nodes, inits, "x", 16, 36, 1, "primary")
    w = (RNG.standard_normal((36, 1, 3, 3)) / 3).astype("f4")
    inits.append(numpy_helper.from_array(w, "cheap_w"))
    nodes.append(helper.make_node("Conv", [half, "cheap_w"], ["cheap"], name="cheap", group=36,
                                  pads=[1] * 4))  # fmt: skip
    nodes.append(helper.make_node("Concat", [half, "cheap"], ["cat"], name="cat", axis=1))
    nodes.append(helper.make_node("Relu", ["cat"], ["act"], name="act"))
    y = _conv(nodes, inits, _conv(nodes, inits, "act", 72, 72, 3, "c1"), 72, 32, 3, "c2")
    nodes.append(helper.make_node("Identity", [y], ["y"], name="y"))
    model = _model(nodes, inits, "ghost", 16)
    after = alter_layout(from_onnx(model), CPU_BLOCK, chains_only=True)
    (cat,) = [n for n in after.nodes if n.op == "Concat"]
    assert after.types[cat.outputs[0]].shape == (1, 72, 6, 6)
    _matches_onnxruntime(model)

"""LSTM, GRU and RNN (ops/rnn.py): unrolled by expand_composites and compiled to native code, and
the numpy reference, each against onnxruntime over directions, layouts, biases, initial states,
peepholes, clip and GRU's linear_before_reset; the refused variants named."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.graph.passes import optimize

SEQ, BATCH, INPUT, HIDDEN = 5, 2, 3, 4
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _model(kind: str, direction="forward", layout=0, bias=True, init=False, peep=False,
           clip=None, lbr=None, outputs=("Y", "Y_h", "Y_c"), seed=0):  # fmt: skip
    rng = np.random.default_rng(seed)
    dirs, g = (2 if direction == "bidirectional" else 1), GATES[kind]
    x_shape = (BATCH, SEQ, INPUT) if layout else (SEQ, BATCH, INPUT)
    state = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
    inits = {
        "W": rng.uniform(-0.6, 0.6, (dirs, g * HIDDEN, INPUT)),
        "R": rng.uniform(-0.6, 0.6, (dirs, g * HIDDEN, HIDDEN)),
    }
    names = ["X", "W", "R"]
    if bias or init or peep:
        names.append("B" if bias else "")
        if bias:
            inits["B"] = rng.uniform(-0.5, 0.5, (dirs, 2 * g * HIDDEN))
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    if init or peep:
        names += ["", "h0"] + (["c0"] if kind == "LSTM" else [])
        graph_inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, state))
        if kind == "LSTM":
            graph_inputs.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, state))
    if peep:
        names.append("P")
        inits["P"] = rng.uniform(-0.5, 0.5, (dirs, 3 * HIDDEN))
    attrs = {"hidden_size": HIDDEN, "direction": direction, "layout": layout}
    if clip is not None:
        attrs["clip"] = clip
    if lbr is not None:
        attrs["linear_before_reset"] = lbr
    outs = [o for o in outputs if kind == "LSTM" or o != "Y_c"]
    node = helper.make_node(kind, names, outs, **attrs)
    graph = helper.make_graph(
        [node], kind.lower(), graph_inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs if o],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _feeds(model, seed=1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
    }


def _check(model) -> None:
    feeds = _feeds(model)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    names = [o.name for o in model.graph.output]
    got = tensorforge.compile(model, progress=False).run(feeds)
    ref = run_graph(from_onnx(model), feeds)
    for name, w in zip(names, want, strict=True):
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(ref[name], w, rtol=1e-4, atol=1e-5, err_msg=f"ref {name}")


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions_match_onnxruntime(kind, direction) -> None:
    _check(_model(kind, direction, lbr=1 if kind == "GRU" else None))


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_batch_first_layout_with_initial_states_matches_onnxruntime(kind) -> None:
    """onnxruntime refuses layout=1, so the oracle is the same weights at layout 0 on the
    transposed inputs, its outputs transposed back."""
    batch_first = _model(kind, "bidirectional", layout=1, init=True)
    seq_first = _model(kind, "bidirectional", layout=0, init=True)
    feeds = _feeds(batch_first)
    swapped = {"X": feeds["X"].transpose(1, 0, 2)}
    swapped.update({k: v.transpose(1, 0, 2) for k, v in feeds.items() if k != "X"})
    want = ort.InferenceSession(seq_first.SerializeToString()).run(None, swapped)
    got = tensorforge.compile(batch_first, progress=False).run(feeds)
    ref = run_graph(from_onnx(batch_first), feeds)
    names = [o.name for o in batch_first.graph.output]
    for name, w in zip(names, want, strict=True):
        w = w.transpose(2, 0, 1, 3) if name == "Y" else w.transpose(1, 0, 2)
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(ref[name], w, rtol=1e-4, atol=1e-5, err_msg=f"ref {name}")


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_no_bias_and_clip_match_onnxruntime(kind) -> None:
    _check(_model(kind, bias=False, clip=0.7))


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset_matches_onnxruntime(lbr) -> None:
    _check(_model("GRU", "bidirectional", init=True, lbr=lbr))


def test_lstm_peepholes_and_a_subset_of_outputs_match_onnxruntime() -> None:
    _check(_model("LSTM", "bidirectional", peep=True, outputs=("", "Y_h", "Y_c")))


def test_an_lstm_leaves_only_matmuls_and_elementwise_ops() -> None:
    ops = {n.op for n in optimize(from_onnx(_model("LSTM"))).nodes}
    assert "LSTM" not in ops and "MatMul" in ops


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("runtime_lens", [False, True])
def test_variable_sequence_lengths_match_onnxruntime(kind, runtime_lens) -> None:
    model = _model(kind, "bidirectional", init=True)
    node = model.graph.node[0]
    node.input[4] = "lens"
    lens = np.array([SEQ - 2, SEQ], np.int32)
    if runtime_lens:
        model.graph.input.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [BATCH]))
    else:
        model.graph.initializer.append(numpy_helper.from_array(lens, "lens"))
    feeds = _feeds(model)
    if runtime_lens:
        feeds["lens"] = lens
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = tensorforge.compile(model, progress=False).run(feeds)
    ref = run_graph(from_onnx(model), feeds)
    for name, w in zip([o.name for o in model.graph.output], want, strict=True):
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(ref[name], w, rtol=1e-4, atol=1e-5, err_msg=f"ref {name}")


def test_other_activations_are_refused_by_name() -> None:
    model = _model("RNN")
    model.graph.node[0].attribute.append(helper.make_attribute("activations", ["Softsign"]))
    with pytest.raises(Exception, match="activations must be among"):
        tensorforge.compile(model, progress=False)

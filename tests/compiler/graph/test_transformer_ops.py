"""The standard domain's newer ops (ops/attention.py, transformer.py, stateful.py, scan_axis.py,
losses.py, bitcast.py) in forms the ONNX node suite does not reach: run-time lengths, write
offsets and position ids (the suite binds its int64 inputs as constants), and several attributes
at once. Each compiled to native code and through the numpy reference, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorforge
from tensorforge.compiler.frontend import OnnxImportError, from_onnx
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.graph.registry import UnsupportedOpError

RNG = np.random.default_rng(7)


def _normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _model(node, feed: dict, outputs: list[str], opset: int, out_type: int = TensorProto.FLOAT):  # noqa: ANN001, ANN202
    def info(name: str, value: np.ndarray):  # noqa: ANN202
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        return helper.make_tensor_value_info(name, elem, list(value.shape))

    graph = helper.make_graph(
        [node],
        "m",
        [info(n, v) for n, v in feed.items()],
        [helper.make_tensor_value_info(n, out_type, None) for n in outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _check(node, feed: dict, opset: int, rtol: float = 1e-5, atol: float = 1e-5, lowest=()) -> None:  # noqa: ANN001
    """Outputs in `lowest` hold -inf where onnxruntime writes the lowest finite float (the
    masked scores of Attention's qk_matmul_output; the spec and its reference say -inf)."""
    outputs = [o for o in node.output if o]
    model = _model(node, feed, outputs, opset)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    ref = run_graph(from_onnx(model), feed)
    got = tensorforge.compile(model, progress=False).run(feed)
    for name, expected in zip(outputs, want, strict=True):
        for what, value in (("compiled", got[name]), ("reference", ref[name])):
            if name in lowest:
                value = np.where(np.isneginf(value), np.finfo(value.dtype).min, value)
            assert value.dtype == expected.dtype, (what, name)
            np.testing.assert_allclose(
                value, expected, rtol=rtol, atol=atol, err_msg=f"{what} {name}"
            )


def test_attention_3d_grouped_with_cache_mask_causal_softcap_matches_onnxruntime() -> None:
    """Grouped heads (4 query, 2 kv), a key/value cache, a boolean mask, the causal frontier
    offset by the cache, a softcap and the biased scores out."""
    b, q_len, kv_len, past = 2, 3, 3, 2
    feed = {
        "q": _normal(b, q_len, 4 * 8),
        "k": _normal(b, kv_len, 2 * 8),
        "v": _normal(b, kv_len, 2 * 6),
        "mask": RNG.random((q_len, past + kv_len)) > 0.3,
        "pk": _normal(b, 2, past, 8),
        "pv": _normal(b, 2, past, 6),
    }
    node = helper.make_node(
        "Attention",
        ["q", "k", "v", "mask", "pk", "pv"],
        ["y", "present_k", "present_v", "qk"],
        q_num_heads=4,
        kv_num_heads=2,
        is_causal=1,
        softcap=2.0,
        qk_matmul_output_mode=2,
    )
    _check(node, feed, 23, lowest=("qk",))


def test_attention_short_mask_is_padded_as_the_onnx_reference_does() -> None:
    """A mask shorter than the keys (cache included) counts as -inf past its end; onnxruntime
    refuses it, so the oracle is onnx's reference implementation."""
    from onnx.reference import ReferenceEvaluator

    feed = {
        "q": _normal(1, 2, 3, 4),
        "k": _normal(1, 2, 3, 4),
        "v": _normal(1, 2, 3, 4),
        "mask": _normal(3, 4),
        "pk": _normal(1, 2, 2, 4),
        "pv": _normal(1, 2, 2, 4),
    }
    node = helper.make_node("Attention", ["q", "k", "v", "mask", "pk", "pv"], ["y"])
    model = _model(node, feed, ["y"], 23)
    (want,) = ReferenceEvaluator(model).run(None, feed)
    got = tensorforge.compile(model, progress=False).run(feed)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_attention_with_run_time_valid_lengths_and_window_matches_onnxruntime() -> None:
    """`nonpad_kv_seqlen` as a graph input (the suite binds it as a constant): the padding
    mask and the causal frontier computed from it at run time, with a sliding window."""
    feed = {
        "q": _normal(2, 2, 2, 4),
        "k": _normal(2, 2, 6, 4),
        "v": _normal(2, 2, 6, 4),
        "nonpad": np.array([4, 6], np.int64),
    }
    node = helper.make_node(
        "Attention",
        ["q", "k", "v", "", "", "", "nonpad"],
        ["y"],
        is_causal=1,
        left_window_size=2,
    )
    _check(node, feed, 25)


def test_rotary_embedding_3d_interleaved_with_run_time_positions_matches_onnxruntime() -> None:
    feed = {
        "x": _normal(2, 3, 2 * 8),
        "cos": _normal(10, 3),
        "sin": _normal(10, 3),
        "ids": np.array([[0, 4, 9], [2, 2, 7]], np.int64),
    }
    node = helper.make_node(
        "RotaryEmbedding",
        ["x", "cos", "sin", "ids"],
        ["y"],
        num_heads=2,
        interleaved=1,
        rotary_embedding_dim=6,
    )
    _check(node, feed, 23)


def test_tensor_scatter_circular_with_run_time_offsets_matches_onnxruntime() -> None:
    """Write offsets as an input; the second batch entry's update wraps past the end."""
    feed = {
        "cache": _normal(2, 3, 5, 4),
        "update": _normal(2, 3, 2, 4),
        "at": np.array([1, 4], np.int64),
    }
    node = helper.make_node("TensorScatter", ["cache", "update", "at"], ["y"], mode="circular")
    _check(node, feed, 24)


def test_reverse_sequence_batch_major_with_run_time_lengths_matches_onnxruntime() -> None:
    feed = {"x": _normal(3, 5, 2), "lens": np.array([5, 1, 3], np.int64)}
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=0, time_axis=1)
    _check(node, feed, 21)


def test_cumprod_reverse_exclusive_matches_onnxruntime() -> None:
    x = RNG.uniform(0.5, 1.5, (2, 5, 3)).astype(np.float32)
    feed = {"x": x, "axis": np.array(1, np.int64)}
    node = helper.make_node("CumProd", ["x", "axis"], ["y"], reverse=1, exclusive=1)
    model = _model(node, feed, ["y"], 26)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    graph = from_onnx(model, constant_inputs={"axis": feed["axis"]})
    got = tensorforge.compile(graph).run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_softmax_cross_entropy_with_weights_ignore_index_and_log_prob_matches_onnxruntime() -> None:
    labels = RNG.integers(0, 4, (2, 3)).astype(np.int64)
    labels[0, 1] = -1  # ignored
    feed = {"x": _normal(2, 4, 3), "t": labels, "w": RNG.uniform(0.5, 2, 4).astype(np.float32)}
    node = helper.make_node(
        "SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["loss", "log_prob"], ignore_index=-1
    )
    _check(node, feed, 13)


def test_linear_attention_gated_delta_grouped_with_state_matches_onnxruntime() -> None:
    """Per-key-feature decay, one beta for all heads, 4 query heads over 2 state heads."""
    b, t, dk, dv = 1, 3, 4, 2
    feed = {
        "q": _normal(b, t, 4 * dk),
        "k": _normal(b, t, 2 * dk) * 0.5,
        "v": _normal(b, t, 2 * dv),
        "s": _normal(b, 2, dk, dv),
        "g": -RNG.uniform(0, 1, (b, t, 2 * dk)).astype(np.float32),
        "beta": RNG.uniform(0, 1, (b, t, 1)).astype(np.float32),
    }
    node = helper.make_node(
        "LinearAttention",
        ["q", "k", "v", "s", "g", "beta"],
        ["y", "state"],
        q_num_heads=4,
        kv_num_heads=2,
    )
    _check(node, feed, 27, rtol=1e-4)


def test_causal_conv_with_state_silu_matches_onnxruntime() -> None:
    feed = {
        "x": _normal(2, 3, 4),
        "w": _normal(3, 1, 3),
        "bias": _normal(3),
        "past": _normal(2, 3, 2),
    }
    node = helper.make_node(
        "CausalConvWithState", ["x", "w", "bias", "past"], ["y", "state"], activation="silu"
    )
    _check(node, feed, 27)


def _import(node, feed: dict, opset: int, out_type: int = TensorProto.FLOAT):  # noqa: ANN001, ANN202
    return from_onnx(_model(node, feed, [o for o in node.output if o], opset, out_type))


def test_attention_mask_that_does_not_broadcast_names_the_node() -> None:
    feed = {"q": _normal(1, 2, 3, 4), "k": _normal(1, 2, 5, 4), "v": _normal(1, 2, 5, 4)}
    feed["mask"] = np.zeros((4, 5), np.float32)  # 4 rows for 3 queries
    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], name="attn")
    with pytest.raises(OnnxImportError, match=r"attn.*attn_mask shape \[4, 5\] must broadcast"):
        _import(node, feed, 23)


def test_rms_normalization_stash_type_is_refused_by_name() -> None:
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], stash_type=0, name="rms")
    feed = {"x": _normal(2, 4), "s": _normal(4)}
    with pytest.raises(OnnxImportError, match=r"rms.*stash_type must be 1"):
        _import(node, feed, 23)


def test_linear_attention_gated_rule_without_decay_is_refused_by_name() -> None:
    feed = {"q": _normal(1, 2, 4), "k": _normal(1, 2, 4), "v": _normal(1, 2, 4)}
    node = helper.make_node(
        "LinearAttention", ["q", "k", "v"], ["y"], q_num_heads=1, kv_num_heads=1, name="lin"
    )
    with pytest.raises(OnnxImportError, match=r"lin.*'gated_delta' takes a decay"):
        _import(node, feed, 27)


def test_linear_attention_over_too_many_steps_is_refused_by_name() -> None:
    """Its recurrence is unrolled: a long prefill would build thousands of nodes."""
    t = 257
    feed = {"q": _normal(1, t, 4), "k": _normal(1, t, 4), "v": _normal(1, t, 4)}
    node = helper.make_node(
        "LinearAttention", ["q", "k", "v"], ["y"], q_num_heads=1, kv_num_heads=1,
        update_rule="linear", name="lin",
    )  # fmt: skip
    with pytest.raises(UnsupportedOpError, match=r"LinearAttention over 257 steps.*'lin'"):
        _import(node, feed, 27)


def test_bitcast_to_bool_is_refused_by_name() -> None:
    node = helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.BOOL, name="bits")
    feed = {"x": np.array([0, 1, 2], np.uint8)}
    with pytest.raises(UnsupportedOpError, match=r"BitCast from uint8 to bool.*'bits'"):
        _import(node, feed, 26, TensorProto.BOOL)


def test_bitcast_of_float_bits_matches_onnxruntime() -> None:
    """-0.0, infinities, a NaN with a payload and a subnormal keep their bits."""
    x = np.array([0.0, -0.0, np.inf, -np.inf, 1.5, -3.25], np.float32)
    x = np.concatenate([x, np.array([0x7FC00123, 1], np.uint32).view(np.float32)])
    node = helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.INT32)
    model = _model(node, {"x": x}, ["y"], 26, TensorProto.INT32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = tensorforge.compile(model, progress=False).run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, x.view(np.int32))


def test_bitcast_between_integers_keeps_the_bits() -> None:
    x = np.array([-1, 0, 7, -128], np.int8)
    node = helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.UINT8)
    got = tensorforge.compile(_import(node, {"x": x}, 26, TensorProto.UINT8)).run({"x": x})["y"]
    np.testing.assert_array_equal(got, x.view(np.uint8))


def _flex_model(score_mod: onnx.GraphProto, feed: dict) -> onnx.ModelProto:
    node = helper.make_node(
        "FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", score_mod=score_mod
    )
    graph = helper.make_graph(
        [node],
        "m",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape))
            for n, v in feed.items()
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def test_flex_attention_grouped_with_a_masking_score_mod_matches_the_onnx_reference() -> None:
    """A score_mod that masks every key past the query (Trilu of -inf) inlined between the
    importer's nodes; onnxruntime has no FlexAttention, so onnx's reference is the oracle."""
    from onnx.reference import ReferenceEvaluator

    feed = {"q": _normal(1, 4, 3, 4), "k": _normal(1, 2, 3, 4), "v": _normal(1, 2, 3, 5)}
    upper = np.triu(np.full((3, 3), -np.inf, np.float32), 1)
    mod = helper.make_graph(
        [helper.make_node("Add", ["s", "upper"], ["out"])],
        "causal",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(upper, "upper")],
    )
    model = _flex_model(mod, feed)
    (want,) = ReferenceEvaluator(model).run(None, feed)
    got = tensorforge.compile(model, progress=False).run(feed)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_flex_attention_score_mod_with_an_unsupported_op_is_refused_by_name() -> None:
    feed = {"q": _normal(1, 1, 2, 4), "k": _normal(1, 1, 2, 4), "v": _normal(1, 1, 2, 4)}
    mod = helper.make_graph(
        [helper.make_node("NoSuchOp", ["s"], ["out"], name="odd")],
        "mod",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
    )
    with pytest.raises(UnsupportedOpError, match=r"NoSuchOp \(node 'odd'"):
        from_onnx(_flex_model(mod, feed))

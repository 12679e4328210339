"""onnxruntime's com.microsoft ops of decoder LLMs as onnxruntime's quantization tools and
onnxruntime-genai's model builder write them: MatMulNBits (blockwise 2/4/8-bit weights),
GroupQueryAttention (grouped heads, past/present key-value cache, rotary) and a decoder block
of them, built with onnx.helper (weights packed by onnxruntime's own quantizer) and checked
against onnxruntime's CPU kernels: compiled to native code and in the reference executor."""

from __future__ import annotations

import logging

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from onnxruntime.capi import _pybind_state as ort_c

import tensorforge
from tensorforge.compiler.frontend import UnsupportedOpError, from_onnx
from tensorforge.compiler.graph import run_graph

MS = "com.microsoft"
F, F16, I32, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64


def _model(nodes, inputs, outputs, weights=None, opset=17):  # noqa: ANN001, ANN202
    inits = [numpy_helper.from_array(v, k) for k, v in (weights or {}).items()]
    graph = oh.make_graph(nodes, "genai", inputs, outputs, inits)
    opsets = [oh.make_opsetid("", opset), oh.make_opsetid(MS, 1)]
    return oh.make_model(graph, opset_imports=opsets, ir_version=8 if opset < 21 else 10)


def _info(name: str, elem: int, shape) -> object:  # noqa: ANN001
    return oh.make_tensor_value_info(name, elem, list(shape) if shape is not None else None)


def _floats(rng, *shape: int, scale: float = 1.0, dtype=np.float32) -> np.ndarray:  # noqa: ANN001
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _run_all(model, feeds: dict[str, np.ndarray], **compile_kw):  # noqa: ANN001, ANN202
    """(onnxruntime's outputs, ours compiled, ours in the reference executor), in model order."""
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = list(tensorforge.compile(model, **compile_kw).run(feeds).values())
    graph = from_onnx(model, **compile_kw)
    ref = run_graph(graph, feeds)
    return want, got, [ref[o] for o in graph.model_outputs]


def _check(model, feeds, rtol: float = 1e-4, atol: float = 1e-5, **kw) -> None:  # noqa: ANN001
    want, got, ref = _run_all(model, feeds, **kw)
    for ours, base, theirs in zip(got, ref, want, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol)
        np.testing.assert_allclose(base, theirs, rtol=rtol, atol=atol)


# ---- MatMulNBits ------------------------------------------------------------------------------


def _pack(w: np.ndarray, bits: int, block: int, symmetric: bool) -> tuple:
    """onnxruntime's own blockwise packing (the C++ kernels its quantizer calls): (B, scales,
    packed zero points) of float weights [K, N]."""
    k, n = w.shape
    blocks = -(-k // block)
    packed = np.zeros((n, blocks, block * bits // 8), np.uint8)
    zero = np.zeros((n, -(-blocks * bits // 8)), np.uint8)
    scales = np.zeros((n, blocks), np.float32)
    quantize = getattr(ort_c, f"quantize_matmul_{bits}bits")
    padded = np.pad(w, ((0, blocks * block - k), (0, 0)))
    quantize(packed, padded, scales, zero, block, n, k, symmetric)
    return packed, scales, zero


def _nbits_model(k: int, n: int, bits: int, block: int, symmetric: bool, **kw):  # noqa: ANN202
    rng = np.random.default_rng(bits * 1000 + block + k)
    packed, scales, zero = _pack(_floats(rng, k, n), bits, block, symmetric)
    weights = {"B": packed, "scales": scales, "bias": _floats(rng, n)}
    if not symmetric:
        weights["zp"] = zero
    ins = ["a", "B", "scales", "" if symmetric else "zp", "", "bias"]
    attrs = {"K": k, "N": n, "bits": bits, "block_size": block, **kw}
    node = oh.make_node("MatMulNBits", ins, ["y"], "mm_q", domain=MS, **attrs)
    return _model([node], [_info("a", F, (2, 3, k))], [_info("y", F, None)], weights), rng


@pytest.mark.parametrize(
    ("bits", "block", "k", "symmetric"),
    [
        (4, 32, 64, False),
        (4, 32, 70, True),  # K not a multiple of the block: the last block padded
        (4, 64, 100, False),
        (4, 128, 96, True),  # one block longer than K
        (8, 16, 40, False),
        (2, 64, 100, False),
    ],
)
def test_matmul_nbits_matches_onnxruntime(bits: int, block: int, k: int, symmetric: bool) -> None:
    model, rng = _nbits_model(k, 24, bits, block, symmetric)
    _check(model, {"a": _floats(rng, 2, 3, k)}, rtol=1e-5, atol=1e-5)


def test_matmul_nbits_float_zero_points_match_onnxruntime() -> None:
    # HQQ's form: zero points of A's type, unpacked, one per block
    rng = np.random.default_rng(7)
    k, n, block = 64, 8, 32
    packed, scales, _ = _pack(_floats(rng, k, n), 4, block, False)
    zero = rng.uniform(6.0, 9.0, (n, 2)).astype(np.float32)
    node = oh.make_node("MatMulNBits", ["a", "B", "s", "z"], ["y"], domain=MS, K=k, N=n,
                        bits=4, block_size=block)  # fmt: skip
    weights = {"B": packed, "s": scales, "z": zero}
    model = _model([node], [_info("a", F, (3, k))], [_info("y", F, None)], weights)
    _check(model, {"a": _floats(rng, 3, k)}, rtol=1e-5, atol=1e-5)


def test_matmul_nbits_in_float16_matches_onnxruntime() -> None:
    rng = np.random.default_rng(16)
    k, n = 64, 16
    packed, scales, zero = _pack(_floats(rng, k, n), 4, 32, False)
    node = oh.make_node("MatMulNBits", ["a", "B", "s", "z"], ["y"], domain=MS, K=k, N=n,
                        bits=4, block_size=32)  # fmt: skip
    weights = {"B": packed, "s": scales.astype(np.float16), "z": zero}
    model = _model([node], [_info("a", F16, (3, k))], [_info("y", F16, None)], weights)
    _check(model, {"a": _floats(rng, 3, k, dtype=np.float16)}, rtol=2e-3, atol=2e-2)


def test_matmul_nbits_accuracy_level_4_computes_in_float() -> None:
    """onnxruntime's accuracy_level 4 lets its kernel quantize A to int8 per block; we compute
    in float (more accurate): exactly the float reference, within A's int8 rounding of
    onnxruntime."""
    model, rng = _nbits_model(64, 24, 4, 32, False, accuracy_level=4)
    a = _floats(rng, 2, 3, 64)
    want, got, ref = _run_all(model, {"a": a})
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[0], want[0], atol=2e-2 * np.abs(want[0]).max())


@pytest.mark.parametrize(
    ("block", "symmetric", "bits"), [(32, False, 4), (64, True, 4), (128, False, 4), (32, True, 8)]
)
def test_matmul_nbits_quantizer_output_matches_onnxruntime(
    block: int, symmetric: bool, bits: int
) -> None:
    """A float MatMul model quantized by onnxruntime's MatMulNBitsQuantizer (needs onnx_ir)."""
    pytest.importorskip("onnx_ir")
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    rng = np.random.default_rng(block)
    k, n = 200, 48  # K = 200: not a multiple of any block size
    nodes = [
        oh.make_node("MatMul", ["a", "w1"], ["h"], "mm1"),
        oh.make_node("Relu", ["h"], ["r"], "relu"),
        oh.make_node("MatMul", ["r", "w2"], ["y"], "mm2"),
    ]
    weights = {"w1": _floats(rng, k, n), "w2": _floats(rng, n, 16)}
    model = _model(nodes, [_info("a", F, (4, k))], [_info("y", F, None)], weights)
    logging.disable(logging.INFO)
    try:
        quantizer = MatMulNBitsQuantizer(model, bits=bits, block_size=block, is_symmetric=symmetric)
        quantizer.process()
    finally:
        logging.disable(logging.NOTSET)
    quantized = quantizer.model.model
    assert [node.op_type for node in quantized.graph.node] == ["MatMulNBits", "Relu", "MatMulNBits"]
    _check(quantized, {"a": _floats(rng, 4, k)}, rtol=1e-5, atol=1e-4)


def test_matmul_nbits_with_g_idx_is_refused_by_name() -> None:
    model, _ = _nbits_model(64, 8, 4, 32, False)
    node = model.graph.node[0]
    node.input[4] = "g_idx"
    model.graph.initializer.append(
        numpy_helper.from_array(np.arange(64, dtype=np.int32) // 32, "g_idx")
    )
    with pytest.raises(UnsupportedOpError, match=r"MatMulNBits with g_idx.*'mm_q'"):
        from_onnx(model)


@pytest.mark.parametrize(("bits", "block", "cols", "zero_points"),
                         [(4, 32, 64, True), (4, 16, 40, False), (8, 32, 64, True)])  # fmt: skip
def test_gather_block_quantized_uint8_tables_match_onnxruntime(
    bits: int, block: int, cols: int, zero_points: bool
) -> None:
    """A quantized embedding table as the model builder writes it: uint8 rows of packed
    codes (low bits first), per-block scales and packed zero points."""
    rng = np.random.default_rng(bits + block)
    rows, blocks = 12, -(-cols // block)
    data = rng.integers(0, 256, (rows, cols * bits // 8), dtype=np.uint8)
    weights = {"data": data, "scales": rng.uniform(0.01, 0.1, (rows, blocks)).astype(np.float32)}
    if zero_points:
        weights["zp"] = rng.integers(0, 256, (rows, -(-blocks * bits // 8)), dtype=np.uint8)
    ins = ["data", "ids", "scales", *(["zp"] if zero_points else [])]
    node = oh.make_node("GatherBlockQuantized", ins, ["y"], "embed", domain=MS, bits=bits,
                        block_size=block, gather_axis=0, quantize_axis=1)  # fmt: skip
    model = _model([node], [_info("ids", I64, (2, 3))], [_info("y", F, None)], weights, opset=21)
    _check(model, {"ids": np.array([[0, 11, 5], [5, 2, 7]], np.int64)}, rtol=1e-6, atol=1e-6)


def test_gather_block_quantized_4_bit_tables_of_the_quantizer_are_refused_by_name() -> None:
    """MatMulNBitsQuantizer quantizes a Gather's table to uint4 (one value an element, not the
    model builder's packed uint8): imported as a uint4 tensor, refused by the op, by name."""
    pytest.importorskip("onnx_ir")
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    rng = np.random.default_rng(3)
    node = oh.make_node("Gather", ["table", "ids"], ["y"], "embed")
    weights = {"table": _floats(rng, 20, 64)}
    model = _model([node], [_info("ids", I64, (2, 3))], [_info("y", F, None)], weights, opset=21)
    logging.disable(logging.INFO)
    try:
        quantizer = MatMulNBitsQuantizer(model, block_size=32, op_types_to_quantize=("Gather",))
        quantizer.process()
    finally:
        logging.disable(logging.NOTSET)
    assert quantizer.model.model.graph.node[0].op_type == "GatherBlockQuantized"
    with pytest.raises(
        UnsupportedOpError, match=r"GatherBlockQuantized with uint4 data \(built: packed uint8\)"
    ):
        from_onnx(quantizer.model.model)


# ---- GroupQueryAttention ----------------------------------------------------------------------


def _rope_caches(head: int, rows: int = 64, dtype=np.float32) -> dict[str, np.ndarray]:  # noqa: ANN001
    angles = np.arange(rows)[:, None] * (10000.0 ** (-np.arange(head // 2) / (head // 2)))[None]
    return {"cos": np.cos(angles).astype(dtype), "sin": np.sin(angles).astype(dtype)}


def _gqa_model(
    batch: int,
    seq: int,
    past: int | None,
    lens: list[int],
    heads: tuple[int, int] = (4, 2),
    head: int = 16,
    packed: bool = False,
    rotary: bool = False,
    total: int | None = None,
    extras: tuple[str, ...] = (),
    dtype=np.float32,  # noqa: ANN001
    **attrs: object,
):  # noqa: ANN202
    """A GroupQueryAttention node and feeds: (model, feeds); `past` None: no past inputs;
    `total` given: total_sequence_length a constant of that value, else past + seq fed."""
    rng = np.random.default_rng(batch * 100 + seq * 10 + (past or 0))
    n, kv = heads
    elem = F if dtype == np.float32 else F16
    feeds: dict[str, np.ndarray] = {}
    if packed:
        feeds["qkv"] = _floats(rng, batch, seq, (n + 2 * kv) * head, dtype=dtype)
        ins = ["qkv", "", ""]
    else:
        feeds["q"] = _floats(rng, batch, seq, n * head, dtype=dtype)
        feeds["k"] = _floats(rng, batch, seq, kv * head, dtype=dtype)
        feeds["v"] = _floats(rng, batch, seq, kv * head, dtype=dtype)
        ins = ["q", "k", "v"]
    if past is None:
        ins += ["", ""]
    else:
        feeds["past_k"] = _floats(rng, batch, kv, past, head, dtype=dtype)
        feeds["past_v"] = _floats(rng, batch, kv, past, head, dtype=dtype)
        ins += ["past_k", "past_v"]
    feeds["lens"] = np.array(lens, np.int32)
    weights = {}
    if total is None:
        feeds["total"] = np.array((past or 0) + seq, np.int32)
    else:
        weights["total"] = np.array(total, np.int32)
    ins += ["lens", "total"]
    if rotary or extras:
        weights |= _rope_caches(head, dtype=dtype) if rotary else {}
        ins += ["cos", "sin"] if rotary else ["", ""]
    if extras:
        width = total if total is not None else (past or 0) + seq
        feeds["bias"] = _floats(rng, batch, 1, seq, width, dtype=dtype)
        weights["sink"] = _floats(rng, n, dtype=dtype)
        ins += ["", "bias" if "bias" in extras else "", "sink" if "sink" in extras else ""]
    attrs = {"num_heads": n, "kv_num_heads": kv, "do_rotary": int(rotary), **attrs}
    node = oh.make_node("GroupQueryAttention", ins, ["y", "present_k", "present_v"], "gqa",
                        domain=MS, **attrs)  # fmt: skip
    inputs = [_info(k, I32 if a.dtype == np.int32 else elem, a.shape) for k, a in feeds.items()]
    outputs = [_info(o, elem, None) for o in ("y", "present_k", "present_v")]
    feeds = {k: a for k, a in feeds.items() if k in ins}
    return _model([node], [i for i in inputs if i.name in feeds], outputs, weights), feeds


@pytest.mark.parametrize(
    ("case", "kw"),
    [
        ("prompt, empty past", {"batch": 1, "seq": 5, "past": 0, "lens": [4]}),
        ("prompt, no past inputs", {"batch": 2, "seq": 3, "past": None, "lens": [2, 2]}),
        ("step, lengths per batch", {"batch": 2, "seq": 1, "past": 6, "lens": [6, 3]}),
        ("step, packed qkv, rotary", {"batch": 2, "seq": 1, "past": 6, "lens": [6, 4],
                                      "heads": (4, 1), "packed": True, "rotary": True}),
        ("prompt, rotary interleaved, window, softcap",
         {"batch": 1, "seq": 6, "past": 0, "lens": [5], "rotary": True, "rotary_interleaved": 1,
          "local_window_size": 2, "softcap": 5.0}),
        ("step, window", {"batch": 2, "seq": 1, "past": 7, "lens": [7, 3], "local_window_size": 3}),
        ("step, shared-buffer length", {"batch": 2, "seq": 1, "past": 9, "lens": [5, 3],
                                        "rotary": True, "total": 9}),
        ("prompt into a fixed buffer", {"batch": 1, "seq": 4, "past": 8, "lens": [3], "total": 8}),
        ("step, scale, smooth softmax", {"batch": 1, "seq": 1, "past": 4, "lens": [4],
                                         "scale": 0.1, "smooth_softmax": 1}),
        ("prompt, bidirectional (causal=0)", {"batch": 1, "seq": 4, "past": 0, "lens": [3],
                                              "causal": 0}),
        ("step, bidirectional, lengths per batch", {"batch": 2, "seq": 1, "past": 5,
                                                    "lens": [5, 2], "causal": 0}),
        ("step, attention bias, head sink", {"batch": 2, "seq": 1, "past": 5, "lens": [5, 2],
                                             "extras": ("bias", "sink")}),
    ],
)  # fmt: skip
def test_group_query_attention_matches_onnxruntime(case: str, kw: dict) -> None:
    model, feeds = _gqa_model(**kw)
    _check(model, feeds, rtol=1e-4, atol=1e-5)


def test_group_query_attention_right_padded_prompt_matches_onnxruntime_on_real_tokens() -> None:
    """A batch of prompts of 4 and 2 tokens right-padded to 4: the caches match whole; the
    outputs at the padding rows are unspecified (onnxruntime reads keys past the sequence)."""
    model, feeds = _gqa_model(2, 4, 0, [3, 1], rotary=True)
    want, got, ref = _run_all(model, feeds)
    for ours in (got, ref):
        np.testing.assert_allclose(ours[0][0], want[0][0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(ours[0][1, :2], want[0][1, :2], rtol=1e-4, atol=1e-5)
        for cache, theirs in zip(ours[1:], want[1:], strict=True):
            np.testing.assert_allclose(cache, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # ~60 s: float16 kernels
def test_group_query_attention_in_float16() -> None:
    model, feeds = _gqa_model(2, 1, 6, [6, 4], rotary=True, dtype=np.float16)
    _check(model, feeds, rtol=1e-2, atol=2e-3)


def test_group_query_attention_present_length_follows_a_constant_total() -> None:
    # onnxruntime's present length is max(total_sequence_length, past length): a growing
    # cache without a constant total, the shared buffer's length with one
    grow, _ = _gqa_model(1, 1, 6, [6])
    fixed, _ = _gqa_model(1, 1, 6, [3], total=6)
    assert from_onnx(grow).types["present_k"].shape == (1, 2, 7, 16)
    assert from_onnx(fixed).types["present_k"].shape == (1, 2, 6, 16)


@pytest.mark.parametrize(
    ("attrs", "extra", "what"),
    [
        ({"k_quant_type": "PER_TENSOR"}, None, "with k_quant_type='PER_TENSOR'"),
        ({}, "position_ids", "with position_ids"),
    ],
)
def test_group_query_attention_unbuilt_forms_are_refused_by_name(
    attrs: dict, extra: str | None, what: str
) -> None:
    model, _ = _gqa_model(1, 1, 4, [4], **attrs)
    if extra:
        node = model.graph.node[0]
        node.input.extend(["", "", extra])
        model.graph.input.append(_info(extra, I64, (1, 1)))
    with pytest.raises(UnsupportedOpError, match=rf"GroupQueryAttention {what}.*'gqa'"):
        from_onnx(model)


# ---- a decoder block as onnxruntime-genai's model builder writes it ---------------------------

_D, _HEADS, _KV, _HEAD, _FF, _VOCAB = 64, 4, 2, 16, 96, 40


def _decoder_block():  # noqa: ANN202
    """Embedding, SimplifiedLayerNormalization, MatMulNBits q/k/v projections,
    GroupQueryAttention with rotary and a past/present cache (seqlens_k and
    total_sequence_length from the attention mask, as the model builder computes them),
    MatMulNBits output projection, SkipSimplifiedLayerNormalization, a SiLU-gated MLP of
    MatMulNBits, a last norm and a MatMulNBits lm head. Inputs and outputs have symbolic dims."""
    rng = np.random.default_rng(42)
    weights: dict[str, np.ndarray] = {"embed": _floats(rng, _VOCAB, _D)}
    nodes = [oh.make_node("Gather", ["embed", "input_ids"], ["x"], "embed_tokens")]

    def norm(name: str) -> str:
        weights[name] = (1.0 + 0.1 * rng.standard_normal(_D)).astype(np.float32)
        return name

    def proj(name: str, x: str, k: int, n: int, bits: int = 4, block: int = 32) -> str:
        packed, scales, zero = _pack(_floats(rng, k, n, scale=0.2), bits, block, False)
        weights.update({f"{name}.B": packed, f"{name}.scales": scales, f"{name}.zp": zero})
        ins = [x, f"{name}.B", f"{name}.scales", f"{name}.zp"]
        nodes.append(oh.make_node("MatMulNBits", ins, [name], name, domain=MS, K=k, N=n,
                                  bits=bits, block_size=block, accuracy_level=0))  # fmt: skip
        return name

    nodes.append(oh.make_node("SimplifiedLayerNormalization", ["x", norm("ln1")], ["h"], "ln1",
                              epsilon=1e-5))  # fmt: skip
    q, k, v = (proj(p, "h", _D, n) for p, n in (("q", _D), ("k", _KV * _HEAD), ("v", _KV * _HEAD)))
    weights["one"] = np.array(1, np.int64)
    weights["axis1"] = np.array([1], np.int64)
    nodes += [
        oh.make_node("ReduceSum", ["attention_mask", "axis1"], ["mask_sum"], "seqlens_sum",
                     keepdims=0),
        oh.make_node("Sub", ["mask_sum", "one"], ["lens64"], "seqlens_sub"),
        oh.make_node("Cast", ["lens64"], ["seqlens_k"], "seqlens_cast", to=I32),
        oh.make_node("Shape", ["attention_mask"], ["mask_shape"], "total_shape"),
        oh.make_node("Gather", ["mask_shape", "one"], ["total64"], "total_gather", axis=0),
        oh.make_node("Cast", ["total64"], ["total_seq"], "total_cast", to=I32),
    ]  # fmt: skip
    weights |= _rope_caches(_HEAD, rows=32)
    gqa_ins = [q, k, v, "past_key_values.0.key", "past_key_values.0.value", "seqlens_k",
               "total_seq", "cos", "sin"]  # fmt: skip
    nodes.append(oh.make_node("GroupQueryAttention", gqa_ins,
                              ["attn", "present.0.key", "present.0.value"], "attn", domain=MS,
                              num_heads=_HEADS, kv_num_heads=_KV, do_rotary=1))  # fmt: skip
    o = proj("o", "attn", _D, _D)
    nodes.append(oh.make_node("SkipSimplifiedLayerNormalization", [o, "x", norm("ln2")],
                              ["h2", "", "", "resid"], "ln2", domain=MS, epsilon=1e-5))  # fmt: skip
    gate, up = proj("gate", "h2", _D, _FF), proj("up", "h2", _D, _FF)
    nodes += [
        oh.make_node("Sigmoid", [gate], ["gate_sig"], "silu_sigmoid"),
        oh.make_node("Mul", [gate, "gate_sig"], ["silu"], "silu_mul"),
        oh.make_node("Mul", ["silu", up], ["act"], "mlp_mul"),
    ]
    down = proj("down", "act", _FF, _D, bits=8, block=32)
    nodes.append(oh.make_node("SkipSimplifiedLayerNormalization", [down, "resid", norm("ln3")],
                              ["h3"], "final_norm", domain=MS, epsilon=1e-5))  # fmt: skip
    proj("logits", "h3", _D, _VOCAB, block=64)
    cache = ["batch", _KV, "past", _HEAD]
    inputs = [
        _info("input_ids", I64, ["batch", "seq"]),
        _info("attention_mask", I64, ["batch", "total"]),
        _info("past_key_values.0.key", F, cache),
        _info("past_key_values.0.value", F, cache),
    ]
    present = ["batch", _KV, "total", _HEAD]
    outputs = [
        _info("logits", F, ["batch", "seq", _VOCAB]),
        _info("present.0.key", F, present),
        _info("present.0.value", F, present),
    ]
    return _model(nodes, inputs, outputs, weights, opset=21)


def _feeds(ids: list[int], mask: np.ndarray, past_k: np.ndarray, past_v: np.ndarray) -> dict:
    return {
        "input_ids": np.array([ids], np.int64),
        "attention_mask": mask,
        "past_key_values.0.key": past_k,
        "past_key_values.0.value": past_v,
    }


def _step(model, session, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:  # noqa: ANN001
    """One step, compiled for these feeds' shapes (an input shape changed: a new compile), and
    checked against onnxruntime's session; returns our outputs."""
    shapes = {name: array.shape for name, array in feeds.items()}
    got = list(tensorforge.compile(model, input_shapes=shapes).run(feeds).values())
    want = session.run(None, feeds)
    for ours, theirs in zip(got, want, strict=True):
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    return got


@pytest.mark.slow  # four compiles of a decoder block: ~40 s
def test_decoder_block_prompt_then_growing_cache_steps_match_onnxruntime() -> None:
    """A growing cache: present is past + new long, so every step has new shapes and is
    compiled anew (the prompt, then two generation steps feeding present back as past)."""
    model = _decoder_block()
    session = ort.InferenceSession(model.SerializeToString())
    empty = np.zeros((1, _KV, 0, _HEAD), np.float32)
    prompt = [3, 17, 5, 29, 11]
    _, past_k, past_v = _step(
        model, session, _feeds(prompt, np.ones((1, 5), np.int64), empty, empty)
    )
    for length, token in ((6, 7), (7, 23)):
        mask = np.ones((1, length), np.int64)
        _, past_k, past_v = _step(model, session, _feeds([token], mask, past_k, past_v))
    assert past_k.shape == (1, _KV, 7, _HEAD)


@pytest.mark.slow  # two compiles of a decoder block: ~30 s
def test_decoder_block_in_a_fixed_shared_buffer_compiles_once_per_phase() -> None:
    """A fixed buffer of 8 positions (past, present and attention mask all 8 long, the mask's
    ones counting the tokens): the prompt compiles once and one compiled step serves every
    generation step, seqlens_k placing each token at run time."""
    model = _decoder_block()
    session = ort.InferenceSession(model.SerializeToString())
    size = 8
    mask = np.zeros((1, size), np.int64)
    mask[0, :4] = 1
    zeros = np.zeros((1, _KV, size, _HEAD), np.float32)
    _, past_k, past_v = _step(model, session, _feeds([3, 17, 5, 29], mask, zeros, zeros))
    step = _feeds([0], mask, zeros, zeros)
    compiled = tensorforge.compile(model, input_shapes={k: a.shape for k, a in step.items()})
    for position, token in ((4, 7), (5, 23), (6, 2)):
        mask = mask.copy()
        mask[0, position] = 1
        feeds = _feeds([token], mask, past_k, past_v)
        got = list(compiled.run(feeds).values())
        want = session.run(None, feeds)
        for ours, theirs in zip(got, want, strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
        _, past_k, past_v = got
    assert past_k.shape == (1, _KV, size, _HEAD)

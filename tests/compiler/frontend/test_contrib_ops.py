"""onnxruntime's contrib ops (com.microsoft domain), as its transformer optimizer writes them into
BERT/GPT/LLaMA-style models, built with onnx.helper and checked against onnxruntime's own CPU
kernels: compiled to native code and in the reference executor (their numpy kernels)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tensorforge
from tensorforge.compiler.frontend import UnsupportedOpError, from_onnx
from tensorforge.compiler.graph import run_graph

MS = "com.microsoft"
RNG = np.random.default_rng(0)
F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64


def _model(nodes, inputs, outputs, weights=None):  # noqa: ANN001, ANN202
    inits = [numpy_helper.from_array(v, k) for k, v in (weights or {}).items()]
    graph = oh.make_graph(nodes, "contrib", inputs, outputs, inits)
    opsets = [oh.make_opsetid("", 17), oh.make_opsetid(MS, 1)]
    return oh.make_model(graph, opset_imports=opsets, ir_version=8)


def _info(name: str, elem: int, shape) -> object:  # noqa: ANN001
    return oh.make_tensor_value_info(name, elem, list(shape) if shape is not None else None)


def _floats(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _check(model, feeds: dict[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-5) -> None:  # noqa: ANN001
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = list(tensorforge.compile(model).run(feeds).values())
    graph = from_onnx(model)
    ref = run_graph(graph, feeds)
    for ours, base, theirs in zip(got, [ref[o] for o in graph.model_outputs], want, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol)
        np.testing.assert_allclose(base, theirs, rtol=rtol, atol=atol)


# ---- activations, BiasAdd, FusedMatMul --------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "bias", "attrs"),
    [
        ("Gelu", False, {}),
        ("BiasGelu", True, {}),
        ("FastGelu", False, {}),
        ("FastGelu", True, {}),
        ("QuickGelu", False, {}),
        ("QuickGelu", False, {"alpha": 1.0}),
    ],
)
def test_fused_activations_match_onnxruntime(op: str, bias: bool, attrs: dict) -> None:
    weights = {"b": _floats(16)} if bias else {}
    node = oh.make_node(op, ["x", *weights], ["y"], domain=MS, **attrs)
    model = _model([node], [_info("x", F, (2, 3, 16))], [_info("y", F, None)], weights)
    _check(model, {"x": _floats(2, 3, 16, scale=3.0)})


def test_bias_add_is_input_plus_bias_plus_skip() -> None:
    # onnxruntime has BiasAdd on CUDA only (diffusion UNets optimized for GPUs): numpy's sum
    bias = _floats(8)
    node = oh.make_node("BiasAdd", ["x", "b", "s"], ["y"], domain=MS)
    model = _model(
        [node],
        [_info("x", F, (2, 4, 8)), _info("s", F, (2, 4, 8))],
        [_info("y", F, None)],
        {"b": bias},
    )
    x, skip = _floats(2, 4, 8), _floats(2, 4, 8)
    (got,) = tensorforge.compile(model).run({"x": x, "s": skip}).values()
    np.testing.assert_allclose(got, x + bias + skip, rtol=1e-6)


@pytest.mark.parametrize(
    ("a", "b", "attrs"),
    [
        ((2, 3, 4), (4, 5), {}),
        ((2, 4, 3), (4, 5), {"transA": 1, "alpha": 0.5}),
        ((2, 3, 4), (2, 5, 4), {"transB": 1}),
        ((3, 4), (5, 4), {"transB": 1, "alpha": 2.0}),
    ],
)
def test_fused_matmul_matches_onnxruntime(a: tuple, b: tuple, attrs: dict) -> None:
    node = oh.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, **attrs)
    model = _model([node], [_info("a", F, a), _info("b", F, b)], [_info("y", F, None)])
    _check(model, {"a": _floats(*a), "b": _floats(*b)})


@pytest.mark.parametrize(
    ("a", "b", "attrs"),
    [
        ((4, 2, 3, 5), (2, 3, 5, 6), {"transBatchA": 1}),
        ((5, 2, 3, 4), (2, 3, 5, 6), {"transBatchA": 1, "transA": 1}),
        ((2, 3, 4, 5), (6, 2, 3, 5), {"transBatchB": 1, "transB": 1, "alpha": 0.25}),
        ((2, 3, 4, 5), (5, 2, 3, 6), {"transBatchB": 1}),
    ],
)
def test_fused_matmul_batch_transposes_match_onnxruntime(a: tuple, b: tuple, attrs: dict) -> None:
    # onnxruntime's MatmulTransposeFusion folds a Transpose [1, 2, 0, 3] (or [1, 2, 3, 0])
    # of a MatMul operand into transBatchA/B (a Whisper encoder saved after its optimizations)
    node = oh.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, **attrs)
    model = _model([node], [_info("a", F, a), _info("b", F, b)], [_info("y", F, None)])
    _check(model, {"a": _floats(*a), "b": _floats(*b)})


@pytest.mark.parametrize(
    "activation",
    [
        {"activation": "Tanh"},
        {"activation": "Relu"},
        {"activation": "LeakyRelu", "activation_alpha": 0.2},
        {"activation": "HardSigmoid", "activation_alpha": 0.3, "activation_beta": 0.4},
    ],
)
def test_fused_gemm_matches_onnxruntime(activation: dict) -> None:
    # a Gemm and its activation fused by onnxruntime's graph optimizations (BERT's pooler)
    node = oh.make_node(
        "FusedGemm", ["x", "w", "c"], ["y"], domain=MS, transB=1, alpha=0.7, **activation
    )
    weights = {"w": _floats(5, 8), "c": _floats(5)}
    model = _model([node], [_info("x", F, (3, 8))], [_info("y", F, None)], weights)
    _check(model, {"x": _floats(3, 8, scale=2.0)})


@pytest.mark.parametrize(
    ("activation", "params", "z"),
    [
        ("Relu", None, False),
        ("Clip", [0.0, 6.0], True),
        ("LeakyRelu", [0.1], False),
        ("Sigmoid", None, True),
        ("", None, True),
    ],
)
def test_fused_conv_matches_onnxruntime(activation: str, params: list | None, z: bool) -> None:
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "activation": activation}
    if params is not None:
        attrs["activation_params"] = params
    if not activation:
        del attrs["activation"]
    node = oh.make_node(
        "FusedConv", ["x", "w", "b", *(["z"] if z else [])], ["y"], domain=MS, **attrs
    )
    ins = [_info("x", F, (1, 4, 6, 6))] + ([_info("z", F, (1, 8, 6, 6))] if z else [])
    model = _model([node], ins, [_info("y", F, None)], {"w": _floats(8, 4, 3, 3), "b": _floats(8)})
    feeds = {"x": _floats(1, 4, 6, 6, scale=2.0)}
    if z:
        feeds["z"] = _floats(1, 8, 6, 6)
    _check(model, feeds)


def test_fused_gemm_with_an_unbuilt_activation_is_refused_by_name() -> None:
    node = oh.make_node("FusedGemm", ["x", "x"], ["y"], "gemm", domain=MS, activation="Mish")
    model = _model([node], [_info("x", F, (3, 3))], [_info("y", F, None)])
    with pytest.raises(UnsupportedOpError, match=r"FusedGemm with activation 'Mish'.*node 'gemm'"):
        from_onnx(model)


# ---- normalizations ---------------------------------------------------------------------------


@pytest.mark.parametrize("simplified", [False, True])
@pytest.mark.parametrize(("bias", "shape"), [(False, (2, 5)), (True, (2, 5)), (True, (7,))])
def test_skip_layer_norms_and_their_sum_output(simplified: bool, bias: bool, shape: tuple) -> None:
    hidden = 32
    weights = {"gamma": _floats(hidden) + 1.0}
    if not simplified:
        weights["beta"] = _floats(hidden)
    if bias:
        weights["bias"] = _floats(hidden)
    op = "SkipSimplifiedLayerNormalization" if simplified else "SkipLayerNormalization"
    node = oh.make_node(op, ["x", "skip", *weights], ["y", "", "", "sum"], domain=MS, epsilon=1e-5)
    ins = [_info("x", F, (*shape, hidden)), _info("skip", F, (*shape, hidden))]
    model = _model([node], ins, [_info("y", F, None), _info("sum", F, None)], weights)
    _check(model, {"x": _floats(*shape, hidden, scale=2.0), "skip": _floats(*shape, hidden)})


def test_simplified_layer_norm_of_the_default_domain_is_rms_norm() -> None:
    # onnxruntime's own default-domain op, which its optimizer writes for LLaMA's RMSNorm
    node = oh.make_node("SimplifiedLayerNormalization", ["x", "w"], ["y"], axis=-1, epsilon=1e-6)
    model = _model(
        [node], [_info("x", F, (2, 3, 16))], [_info("y", F, None)], {"w": _floats(16) + 1.0}
    )
    _check(model, {"x": _floats(2, 3, 16, scale=3.0)})


@pytest.mark.parametrize(
    ("segments", "mask", "positions"),
    [(True, True, False), (True, True, True), (False, False, False)],
)
def test_embed_layer_norm_and_its_mask_index(segments: bool, mask: bool, positions: bool) -> None:
    batch, seq, hidden, vocab = 2, 6, 16, 30
    weights = {"word": _floats(vocab, hidden), "pos": _floats(seq + 2, hidden)}
    if segments:
        weights["seg"] = _floats(2, hidden)
    weights |= {"gamma": _floats(hidden) + 1.0, "beta": _floats(hidden)}
    inputs = [
        "ids",
        "segs" if segments else "",
        "word",
        "pos",
        "seg" if segments else "",
        "gamma",
        "beta",
        "mask" if mask else "",
        "positions" if positions else "",
    ]
    node = oh.make_node(
        "EmbedLayerNormalization", inputs, ["y", "mask_index"], domain=MS, epsilon=1e-5
    )
    feeds = {"ids": RNG.integers(0, vocab, (batch, seq)).astype(np.int32)}
    if segments:
        feeds["segs"] = RNG.integers(0, 2, (batch, seq)).astype(np.int32)
    if mask:
        feeds["mask"] = np.array([[1] * seq, [1] * 4 + [0] * (seq - 4)], np.int32)
    if positions:
        feeds["positions"] = RNG.integers(0, seq + 2, (batch, seq)).astype(np.int32)
    ins = [_info(k, I32, v.shape) for k, v in feeds.items()]
    model = _model([node], ins, [_info("y", F, None), _info("mask_index", I32, None)], weights)
    _check(model, feeds)


# ---- Attention, MultiHeadAttention --------------------------------------------------------------

_B, _S, _H, _N = 2, 6, 16, 4


def _attention_model(mask_shape=None, bias_shape=None, sizes=None, **attrs):  # noqa: ANN001, ANN003, ANN202
    q, k, v = sizes or (_H, _H, _H)
    weights = {"w": _floats(_H, q + k + v, scale=0.5), "b": _floats(q + k + v, scale=0.1)}
    inputs = ["x", "w", "b", "mask" if mask_shape else "", "", "bias" if bias_shape else ""]
    while not inputs[-1]:
        inputs.pop()
    if sizes:
        attrs["qkv_hidden_sizes"] = list(sizes)
    node = oh.make_node("Attention", inputs, ["y"], "att", domain=MS, num_heads=_N, **attrs)
    ins = [_info("x", F, (_B, _S, _H))]
    if mask_shape:
        ins.append(_info("mask", I32, mask_shape))
    if bias_shape:
        ins.append(_info("bias", F, bias_shape))
    return _model([node], ins, [_info("y", F, None)], weights)


_MASKS = {
    (_B,): np.array([_S, 3], np.int32),  # end positions
    (2 * _B,): np.array([_S, 4, 0, 1], np.int32),  # end, then start positions
    (_B, _S): np.array([[1] * _S, [1, 1, 1, 0, 1, 0]], np.int32),  # 0/1 per key
    (_B, _S, _S): (RNG.random((_B, _S, _S)) > 0.3).astype(np.int32),
}


@pytest.mark.parametrize("mask_shape", [None, *_MASKS])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_masks_match_onnxruntime(mask_shape: tuple | None, unidirectional: int) -> None:
    model = _attention_model(mask_shape, unidirectional=unidirectional)
    feeds = {"x": _floats(_B, _S, _H)}
    if mask_shape:
        feeds["mask"] = _MASKS[mask_shape]
    _check(model, feeds)


@pytest.mark.parametrize("unidirectional", [0, 1])
def test_float16_attention_masks_in_float16(unidirectional: int) -> None:
    # onnxruntime's optimizer converts its output to float16 (`convert_float_to_float16`): the
    # mask is built in the scores' type, float16's lowest value above the diagonal
    model = _attention_model((_B, _S), unidirectional=unidirectional)
    for init in model.graph.initializer:
        init.CopyFrom(
            numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name)
        )
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    feeds = {"x": _floats(_B, _S, _H).astype(np.float16), "mask": _MASKS[(_B, _S)]}
    _check(model, feeds, rtol=1e-2, atol=1e-2)  # a few float16 ulps of values near 3


def test_attention_with_bias_scale_and_its_own_value_size() -> None:
    model = _attention_model(
        bias_shape=(1, _N, _S, _S), sizes=(_H, _H, 8), scale=0.3, mask_filter_value=-1000.0
    )
    _check(model, {"x": _floats(_B, _S, _H), "bias": _floats(1, _N, _S, _S)})


@pytest.mark.parametrize(
    ("length", "mask", "unidirectional"),
    [(_S, None, 0), (9, "2d", 0), (9, "ends", 0), (9, "3d", 0), (_S, None, 1)],
)
def test_multi_head_attention_matches_onnxruntime(
    length: int, mask: str | None, unidirectional: int
) -> None:
    inputs = ["q", "k", "v", "bias", "mask" if mask else ""]
    node = oh.make_node(
        "MultiHeadAttention",
        inputs if mask else inputs[:4],
        ["y"],
        domain=MS,
        num_heads=_N,
        unidirectional=unidirectional,
    )
    feeds = {"q": _floats(_B, _S, _H), "k": _floats(_B, length, _H), "v": _floats(_B, length, _H)}
    if mask == "ends":
        feeds["mask"] = np.array([length, 5], np.int32)
    elif mask:
        shape = (_B, length) if mask == "2d" else (_B, _S, length)
        feeds["mask"] = (RNG.random(shape) > 0.3).astype(np.int32)
        feeds["mask"][..., 0] = 1
    ins = [_info(k, I32 if k == "mask" else F, v.shape) for k, v in feeds.items()]
    model = _model([node], ins, [_info("y", F, None)], {"bias": _floats(3 * _H, scale=0.1)})
    _check(model, feeds)


# ---- RotaryEmbedding ---------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["bsd", "bnsh"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize(("offset", "rotary"), [(False, 0), (True, 4)])
def test_rotary_embedding_matches_onnxruntime(
    layout: str, interleaved: int, offset: bool, rotary: int
) -> None:
    head, positions = 8, 20
    rot = rotary or head
    angles = np.arange(positions)[:, None] / 10000 ** (np.arange(rot // 2) / (rot // 2))
    weights = {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
    shape = (_B, _S, _N * head) if layout == "bsd" else (_B, _N, _S, head)
    pos = np.array([3], np.int64) if offset else RNG.integers(0, positions, (_B, _S))
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rotary, "num_heads": _N}
    node = oh.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, **attrs)
    ins = [_info("x", F, shape), _info("pos", I64, pos.shape)]
    model = _model([node], ins, [_info("y", F, None)], weights)
    _check(model, {"x": _floats(*shape), "pos": pos.astype(np.int64)})


# ---- refused forms ----------------------------------------------------------------------------


def test_attention_with_past_state_is_refused_by_name() -> None:
    model = _attention_model()
    node = model.graph.node[0]
    node.input.extend(["", "past"])
    del node.input[4:]
    node.input.extend(["past"])
    model.graph.input.append(_info("past", F, (2, _B, _N, 3, _H // _N)))
    with pytest.raises(UnsupportedOpError, match=r"Attention with past .*node 'att'"):
        from_onnx(model)


@pytest.mark.parametrize(
    ("op", "outputs", "what"),
    [
        ("Attention", ["y", "present"], "present output"),
        ("MultiHeadAttention", ["y", "", "", "qk"], "qk output"),
        ("SkipSimplifiedLayerNormalization", ["y", "mean"], "mean output"),
    ],
)
def test_unbuilt_outputs_of_contrib_ops_are_refused_at_import(
    op: str, outputs: list, what: str
) -> None:
    node = oh.make_node(op, ["x", "x", "x"], outputs, "fused", domain=MS, num_heads=_N)
    if op == "SkipSimplifiedLayerNormalization":
        node = oh.make_node(op, ["x", "x", "g"], outputs, "fused", domain=MS)
    model = _model(
        [node],
        [_info("x", F, (_B, _S, _H)), _info("g", F, (_H,))],
        [_info(o, F, None) for o in outputs if o],
    )
    with pytest.raises(UnsupportedOpError, match=rf"{op} with its {what}.*node 'fused'"):
        from_onnx(model)


def test_multi_head_attention_with_packed_qkv_is_refused_by_name() -> None:
    node = oh.make_node("MultiHeadAttention", ["qkv"], ["y"], "mha", domain=MS, num_heads=_N)
    model = _model([node], [_info("qkv", F, (_B, _S, _N, 3, _H // _N))], [_info("y", F, None)])
    with pytest.raises(UnsupportedOpError, match=r"MultiHeadAttention with packed .*node 'mha'"):
        from_onnx(model)


def test_multi_head_attention_refuses_start_positions_as_onnxruntime_does() -> None:
    # onnxruntime's Attention reads a [2 * batch] mask as end and start positions; its
    # MultiHeadAttention refuses that shape ("key_padding_mask shape is not expected")
    node = oh.make_node(
        "MultiHeadAttention", ["q", "q", "q", "", "m"], ["y"], "mha", domain=MS, num_heads=_N
    )
    ins = [_info("q", F, (_B, _S, _H)), _info("m", I32, (2 * _B,))]
    with pytest.raises(ValueError, match=r"node 'mha'.*mask must have a shape among"):
        from_onnx(_model([node], ins, [_info("y", F, None)]))


def test_unbuilt_contrib_ops_are_listed_at_once() -> None:
    nodes = [
        oh.make_node("PackedAttention", ["x"], ["y"], "packed", domain=MS),
        oh.make_node("Gelu", ["y"], ["z"], "gelu", domain=MS),
        oh.make_node("SparseAttention", ["z"], ["w"], "sparse", domain=MS),
    ]
    model = _model(nodes, [_info("x", F, (2, 3))], [_info("w", F, None)])
    with pytest.raises(UnsupportedOpError) as info:
        from_onnx(model)
    assert [name for _, name, _ in info.value.items] == ["packed", "sparse"]
    assert "com.microsoft.PackedAttention" in str(info.value)


# ---- a torch BERT through onnxruntime's optimizer (skipped without torch) -----------------------


def test_torch_bert_optimized_by_onnxruntime_matches(tmp_path) -> None:  # noqa: ANN001
    """A BERT layer (embeddings, attention mask, tanh GELU) exported by torch's TorchScript
    exporter and rewritten by onnxruntime's transformer optimizer into EmbedLayerNormalization,
    Attention, SkipLayerNormalization and FastGelu."""
    torch = pytest.importorskip("torch")
    import onnx
    from onnxruntime.transformers.optimizer import optimize_model

    hidden, heads, vocab, seq = 32, 4, 50, 8
    nn = torch.nn
    torch.manual_seed(0)

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
            self.seg, self.ln = nn.Embedding(2, hidden), nn.LayerNorm(hidden)
            self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.up, self.down = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, ids, mask, seg):  # noqa: ANN001, ANN202
            b, n = ids.shape
            x = self.ln(self.tok(ids) + self.pos(torch.arange(n)[None]) + self.seg(seg))
            add = (1.0 - mask[:, None, None, :].float()) * -10000.0

            def split(t):  # noqa: ANN001, ANN202
                return t.view(b, n, heads, hidden // heads).transpose(1, 2)

            q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
            a = torch.softmax(q @ k.transpose(-1, -2) / (hidden // heads) ** 0.5 + add, -1)
            x = self.ln1(x + self.o((a @ v).transpose(1, 2).reshape(b, n, hidden)))
            h = nn.functional.gelu(self.up(x), approximate="tanh")
            return self.ln2(x + self.down(h))

    ids = torch.randint(0, vocab, (2, seq))
    mask = torch.ones(2, seq, dtype=torch.long)
    mask[1, 5:] = 0
    seg = (torch.arange(seq) >= 4).long().expand(2, seq).contiguous()
    path, optimized = tmp_path / "bert.onnx", tmp_path / "bert_opt.onnx"
    torch.onnx.export(
        Bert().eval(),
        (ids, mask, seg),
        path,
        dynamo=False,
        opset_version=17,
        input_names=["ids", "mask", "seg"],
    )
    optimize_model(
        str(path), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0
    ).save_model_to_file(str(optimized))
    fused = {n.op_type for n in onnx.load(str(optimized)).graph.node if n.domain == MS}
    assert {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization"} <= fused
    feeds = {"ids": ids.numpy(), "mask": mask.numpy(), "seg": seg.numpy()}
    want = ort.InferenceSession(str(optimized)).run(None, feeds)
    got = list(tensorforge.compile(str(optimized)).run(feeds).values())
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)

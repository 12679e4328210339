"""onnxruntime's contrib ops (the `com.microsoft` domain) that its transformer optimizer
(`onnxruntime.transformers.optimizer`) writes into BERT/GPT/LLaMA-style models: the fused
activations (Gelu, BiasGelu, FastGelu, QuickGelu), BiasAdd, FusedMatMul and the fused
normalizations (SkipLayerNormalization, SkipSimplifiedLayerNormalization,
EmbedLayerNormalization, and onnxruntime's default-domain SimplifiedLayerNormalization).

Every one is a composite (`expand`, run by `passes.expand_composites`) of ops the back-ends
already compile: Gelu, LayerNormalization, MatMul, Gather, reductions and element-wise ops.
Each also has its own numpy kernel, written from onnxruntime's operator documentation
(docs/ContribOperators.md) and checked against onnxruntime's CPU kernels in the tests. A
com.microsoft op is registered under its qualified name (`com.microsoft.Gelu`), which the
importer maps the node's domain and type to. Attention, MultiHeadAttention and RotaryEmbedding
are in `contrib_attention`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ....runtime.dtypes import is_floating
from ..ir import GraphBuilder, Node, TensorType, broadcast_shapes
from ..registry import Pattern, UnsupportedOpError, get_op, register
from .elemwise import erf
from .emit import Emitter

MS = "com.microsoft."  # the registry prefix of onnxruntime's contrib domain


def _floating(op: str, ty: TensorType, what: str = "input") -> None:
    if not is_floating(ty.dtype):
        raise ValueError(f"{op} {what} must be a floating-point tensor, not {ty.dtype}")


def refuse(op: str, what: str) -> UnsupportedOpError:
    """The error for a form of a contrib op that is not built (the registry adds the node)."""
    return UnsupportedOpError([(f"{MS}{op} {what}", "?", None)])


# ---- activations ------------------------------------------------------------------------------


def _gelu_np(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _fast_gelu_np(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _biased_type(op: str) -> Any:
    def infer(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
        x = types[0]
        _floating(op, x)
        if len(types) > 1 and types[1] is not None:
            bias = types[1].shape
            if len(bias) != 1 or not x.shape or bias[0] != x.shape[-1]:
                raise ValueError(
                    f"{op} bias must have shape ({x.shape[-1] if x.shape else '?'},) (the "
                    f"input's last dim), not {bias}"
                )
        return [x]

    return infer


def _activation(fn: Any) -> Any:
    def compute(attrs: dict[str, Any], x: np.ndarray, bias: Any = None) -> np.ndarray:
        z = x.astype(np.float64) + (0.0 if bias is None else bias.astype(np.float64))
        with np.errstate(all="ignore"):
            return fn(attrs, z).astype(x.dtype)

    return compute


def _expand_activation(op: str, approximate: str | None) -> Any:
    """`[bias add,] Gelu[approximate]` (or QuickGelu's `x * Sigmoid(alpha * x)`)."""

    def expand(b: GraphBuilder, node: Node) -> None:
        e = Emitter(b, node)
        x = node.inputs[0]
        if len(node.inputs) > 1 and node.inputs[1]:
            x = e.add("Add", [x, node.inputs[1]])
        out = [node.outputs[0]]
        if approximate is not None:
            e.add("Gelu", [x], {"approximate": approximate}, outputs=out)
            return
        alpha = e.const(node.attr_dict["alpha"], "alpha", e.dtype(x))
        e.add("Mul", [x, e.add("Sigmoid", [e.add("Mul", [x, alpha])])], outputs=out)

    return expand


_ACTIVATIONS = {
    # name: (inputs, attrs, numpy kernel, Gelu's approximation or None for QuickGelu)
    "Gelu": ((1, 1), {}, lambda a, z: _gelu_np(z), "none"),
    "BiasGelu": ((2, 2), {}, lambda a, z: _gelu_np(z), "none"),
    "FastGelu": ((1, 2), {}, lambda a, z: _fast_gelu_np(z), "tanh"),
    "QuickGelu": ((1, 1), {"alpha": 1.702}, lambda a, z: z / (1.0 + np.exp(-a["alpha"] * z)), None),
}
for _name, (_inputs, _attrs, _fn, _approx) in _ACTIVATIONS.items():
    register(
        MS + _name,
        Pattern.ELEMWISE,
        _biased_type(MS + _name),
        _activation(_fn),
        inputs=_inputs,
        attrs=_attrs,
        expand=_expand_activation(_name, _approx),
    )


# ---- BiasAdd, FusedMatMul ----------------------------------------------------------------------


def _bias_add_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x, bias, skip = types
    _biased_type(MS + "BiasAdd")(attrs, [x, bias], [])
    if skip.shape != x.shape:
        raise ValueError(
            f"{MS}BiasAdd skip must have the input's shape {x.shape}, not {skip.shape}"
        )
    return [x]


def _expand_bias_add(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, bias, skip = node.inputs
    e.add("Add", [e.add("Add", [x, bias]), skip], outputs=[node.outputs[0]])


register(
    MS + "BiasAdd",
    Pattern.BROADCAST,
    _bias_add_type,
    lambda attrs, x, bias, skip: (x + bias + skip).astype(x.dtype),
    inputs=(3, 3),
    expand=_expand_bias_add,
)

_FUSED_MATMUL_ATTRS = {"alpha": 1.0, "transA": 0, "transB": 0, "transBatchA": 0, "transBatchB": 0}


def _operand_perm(rank: int, trans: int, trans_batch: int, what: str) -> list[int]:
    """The Transpose that onnxruntime folded into a FusedMatMul operand: `trans` swaps the
    last two axes; `trans_batch` moves the first axis behind the other batch axes (rank 4:
    [1, 2, 0, 3], with `trans` too [1, 2, 3, 0])."""
    if (trans or trans_batch) and rank < 2 + bool(trans_batch):
        raise ValueError(f"{MS}FusedMatMul {what} needs a higher rank than {rank}")
    if trans_batch:
        return [*range(1, rank - 1), *((rank - 1, 0) if trans else (0, rank - 1))]
    if trans:
        return [*range(rank - 2), rank - 1, rank - 2]
    return list(range(rank))


def _fused_perms(attrs: dict[str, Any], ranks: tuple[int, int]) -> list[list[int]]:
    return [
        _operand_perm(rank, attrs[f"trans{side}"], attrs[f"transBatch{side}"], f"trans{side}")
        for rank, side in zip(ranks, "AB", strict=True)
    ]


def _fused_matmul(attrs: dict[str, Any], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    pa, pb = _fused_perms(attrs, (a.ndim, b.ndim))
    y = np.matmul(a.transpose(pa), b.transpose(pb))
    return (y * attrs["alpha"]).astype(a.dtype)


def _fused_matmul_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    a, b = types
    _floating(MS + "FusedMatMul", a)
    perms = _fused_perms(attrs, (len(a.shape), len(b.shape)))
    moved = [
        TensorType(tuple(t.shape[i] for i in p), t.dtype) for t, p in zip(types, perms, strict=True)
    ]
    return get_op("MatMul").infer({}, moved, [None, None])


def _expand_fused_matmul(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    attrs = node.attr_dict
    perms = _fused_perms(attrs, tuple(len(e.shape(v)) for v in node.inputs))
    ins = [e.transpose(v, p) for v, p in zip(node.inputs, perms, strict=True)]
    if attrs["alpha"] == 1.0:
        e.add("MatMul", ins, outputs=[node.outputs[0]])
        return
    alpha = e.const(attrs["alpha"], "alpha", e.dtype(ins[0]))
    e.add("Mul", [e.add("MatMul", ins), alpha], outputs=[node.outputs[0]])


register(
    MS + "FusedMatMul",
    Pattern.OUT_ELEMWISE_FUSABLE,
    _fused_matmul_type,
    _fused_matmul,
    inputs=(2, 2),
    attrs=_FUSED_MATMUL_ATTRS,
    expand=_expand_fused_matmul,
)


# ---- normalizations ---------------------------------------------------------------------------


def _norm_np(x: np.ndarray, eps: float, simplified: bool, axis: int = -1) -> tuple:
    """(normalized, mean, inverse standard deviation) over the axes from `axis`, in float64;
    `simplified` is RMS normalization (no mean subtracted)."""
    axes = tuple(range(axis % x.ndim, x.ndim))
    z = x.astype(np.float64)
    mean = (
        np.zeros_like(z.sum(axis=axes, keepdims=True))
        if simplified
        else z.mean(axes, keepdims=True)
    )
    inv = 1.0 / np.sqrt(((z - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    return (z - mean) * inv, mean, inv


def _check_vector(op: str, ty: TensorType | None, size: int, what: str) -> None:
    if ty is not None and ty.shape != (size,):
        raise ValueError(f"{op} {what} must have shape ({size},), not {ty.shape}")


def _skip_type(simplified: bool) -> Any:
    op = MS + ("SkipSimplifiedLayerNormalization" if simplified else "SkipLayerNormalization")
    params = ("gamma", "bias") if simplified else ("gamma", "beta", "bias")

    def infer(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
        x, skip = types[:2]
        _floating(op, x)
        if len(x.shape) not in (2, 3):
            raise ValueError(
                f"{op} input must be [batch, sequence, hidden] or [tokens, hidden], not {x.shape}"
            )
        if broadcast_shapes(x.shape, skip.shape) != x.shape:
            raise ValueError(f"{op} skip must broadcast to the input's {x.shape}, not {skip.shape}")
        for ty, what in zip(types[2:], params, strict=False):
            _check_vector(op, ty, x.shape[-1], what)
        stat = TensorType((*x.shape[:-1], 1), "float32")
        return [x, stat, stat, x]

    return infer


def _skip_norm(simplified: bool) -> Any:
    def compute(attrs: dict[str, Any], x: np.ndarray, skip: np.ndarray, *params: Any) -> tuple:
        if simplified:
            (gamma, bias), beta = (*params, None)[:2], None
        else:
            gamma, beta, bias = (*params, None, None)[:3]
        total = x.astype(np.float64) + skip + (0.0 if bias is None else bias)
        y, mean, inv = _norm_np(total, attrs["epsilon"], simplified)
        y = y * gamma + (0.0 if beta is None else beta)
        f32 = np.float32
        return y.astype(x.dtype), mean.astype(f32), inv.astype(f32), total.astype(x.dtype)

    return compute


def _expand_skip_norm(simplified: bool) -> Any:
    """input + skip (+ bias), then LayerNormalization (or the RMS normalization of
    `_rms_norm`) over the hidden axis; the sum is the fourth output."""

    def expand(b: GraphBuilder, node: Node) -> None:
        e = Emitter(b, node)
        ins = (*node.inputs, "", "")
        if simplified:
            (x, skip, gamma, bias), beta = ins[:4], ""
        else:
            x, skip, gamma, beta, bias = ins[:5]
        outs = (*node.outputs, "", "", "")[:4]
        if simplified and outs[1]:
            op = "SkipSimplifiedLayerNormalization"
            raise UnsupportedOpError([(f"{MS}{op} with its mean output", node.name, None)])
        total = e.add("Add", [x, skip])
        if bias:
            total = e.add("Add", [total, bias], outputs=[outs[3]] if outs[3] else None)
        elif outs[3]:
            e.rename(total, outs[3])
        eps = node.attr_dict["epsilon"]
        if simplified:
            _rms_norm(e, total, gamma, eps, -1, outs[0], outs[2])
            return
        inputs = [total, gamma] + ([beta] if beta else [])
        outputs = [outs[0], outs[1] or "", outs[2] or ""]
        while outputs and not outputs[-1]:
            outputs.pop()
        b.add_node(
            "LayerNormalization",
            inputs,
            {"axis": -1, "epsilon": eps},
            name=f"{node.name}_layernormalization",
            outputs=[o or b.fresh(f"{node.name}_stat") for o in outputs],
        )

    return expand


def _rms_norm(
    e: Emitter, x: str, scale: str, eps: float, axis: int, out: str, inv_out: str
) -> None:
    """`out = x / sqrt(mean(x * x over the axes from axis) + eps) * scale`; `inv_out` (when
    named) the reciprocal root, in float32."""
    rank = len(e.shape(x))
    axes = e.ints(list(range(axis % rank, rank)), "axes")
    dtype = e.dtype(x)
    mean = e.add("ReduceMean", [e.add("Mul", [x, x]), axes], {"keepdims": 1})
    root = e.add("Sqrt", [e.add("Add", [mean, e.const(eps, "eps", dtype)])])
    e.add("Mul", [e.add("Div", [x, root]), scale], outputs=[out])
    if inv_out:
        inv = e.add("Reciprocal", [root])
        e.add("Cast", [inv], {"to": "float32"}, outputs=[inv_out])


_SKIP_ATTRS = {"epsilon": 1e-12}
register(
    MS + "SkipLayerNormalization",
    Pattern.OPAQUE,
    _skip_type(False),
    _skip_norm(False),
    inputs=(3, 5),
    outputs=(1, 4),
    attrs=_SKIP_ATTRS,
    expand=_expand_skip_norm(False),
)
register(
    MS + "SkipSimplifiedLayerNormalization",
    Pattern.OPAQUE,
    _skip_type(True),
    _skip_norm(True),
    inputs=(3, 4),
    outputs=(1, 4),
    attrs=_SKIP_ATTRS,
    expand=_expand_skip_norm(True),
)


def _simplified_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x, scale = types
    op = "SimplifiedLayerNormalization"
    _floating(op, x)
    rank = len(x.shape)
    if not -rank <= attrs["axis"] < rank:
        raise ValueError(f"{op} axis must be in [{-rank}, {rank - 1}], not {attrs['axis']}")
    if attrs["stash_type"] != 1:
        raise ValueError(
            f"{op} stash_type must be 1 (float32 statistics), not {attrs['stash_type']}"
        )
    axis = attrs["axis"] % rank
    if broadcast_shapes(scale.shape, x.shape[axis:]) != x.shape[axis:]:
        raise ValueError(f"{op} scale must broadcast to {x.shape[axis:]}, not {scale.shape}")
    return [x, TensorType((*x.shape[:axis], *(1,) * (rank - axis)), "float32")]


def _simplified(attrs: dict[str, Any], x: np.ndarray, scale: np.ndarray) -> tuple:
    y, _, inv = _norm_np(x, attrs["epsilon"], True, attrs["axis"])
    return (y * scale).astype(x.dtype), inv.astype(np.float32)


def _expand_simplified(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    attrs = node.attr_dict
    outs = (*node.outputs, "")[:2]
    _rms_norm(e, node.inputs[0], node.inputs[1], attrs["epsilon"], attrs["axis"], *outs)


# onnxruntime's own op in the default domain (RMSNorm; ONNX's opset 23 RMSNormalization later)
register(
    "SimplifiedLayerNormalization",
    Pattern.OPAQUE,
    _simplified_type,
    _simplified,
    inputs=(2, 2),
    outputs=(1, 2),
    attrs={"axis": -1, "epsilon": 1e-5, "stash_type": 1},
    expand=_expand_simplified,
)


# ---- EmbedLayerNormalization -----------------------------------------------------------------

_EMBED_INPUTS = (
    "input_ids",
    "segment_ids",
    "word_embedding",
    "position_embedding",
    "segment_embedding",
    "gamma",
    "beta",
    "mask",
    "position_ids",
)


def _embed_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    op = MS + "EmbedLayerNormalization"
    typed = dict(zip(_EMBED_INPUTS, types, strict=False))
    ids = typed["input_ids"]
    if len(ids.shape) != 2:
        raise ValueError(f"{op} input_ids must be [batch, sequence], not {ids.shape}")
    for what in ("input_ids", "segment_ids", "mask", "position_ids"):
        ty = typed.get(what)
        if ty is not None and ty.dtype != "int32":
            raise ValueError(f"{op} {what} must be int32, not {ty.dtype}")
    word = typed["word_embedding"]
    hidden = word.shape[-1]
    if (typed.get("segment_ids") is None) != (typed.get("segment_embedding") is None):
        raise ValueError(f"{op} segment_ids and segment_embedding must be given together")
    for what in ("word_embedding", "position_embedding", "segment_embedding"):
        ty = typed.get(what)
        if ty is not None and (len(ty.shape) != 2 or ty.shape[1] != hidden):
            raise ValueError(f"{op} {what} must be [rows, {hidden}], not {ty.shape}")
    for what in ("gamma", "beta"):
        _check_vector(op, typed.get(what), hidden, what)
    batch, seq = ids.shape
    for what, allowed in (
        ("segment_ids", [ids.shape]),
        ("mask", [ids.shape]),
        ("position_ids", [ids.shape, (1, seq)]),
    ):
        ty = typed.get(what)
        if ty is not None and ty.shape not in allowed:
            raise ValueError(f"{op} {what} must have shape {allowed[0]}, not {ty.shape}")
    if attrs["mask_index_type"] not in (0, 1):
        raise refuse("EmbedLayerNormalization", f"with mask_index_type={attrs['mask_index_type']}")
    out = TensorType((batch, seq, hidden), word.dtype)
    return [out, TensorType((batch,), "int32"), out]


def _embed(
    attrs: dict[str, Any],
    ids: np.ndarray,
    seg: Any,
    word: np.ndarray,
    pos: np.ndarray,
    seg_emb: Any,
    gamma: np.ndarray,
    beta: Any = None,
    mask: Any = None,
    pos_ids: Any = None,
) -> tuple:
    seq = ids.shape[1]
    positions = np.broadcast_to(np.arange(seq) if pos_ids is None else pos_ids, ids.shape)
    total = word[ids].astype(np.float64) + pos[positions]
    if seg is not None:
        total = total + seg_emb[seg]
    y, _, _ = _norm_np(total, attrs["epsilon"], False)
    y = y * gamma + (0.0 if beta is None else beta)
    count = np.zeros(ids.shape[0], np.int32) if mask is None else (mask == 1).sum(1)
    return y.astype(word.dtype), count.astype(np.int32), total.astype(word.dtype)


def _expand_embed(b: GraphBuilder, node: Node) -> None:
    """The three Gathers summed, LayerNormalization; the mask index is the count of ones of
    each mask row (zeros without a mask), as onnxruntime's CPU kernel computes it."""
    e = Emitter(b, node)
    named = dict(zip(_EMBED_INPUTS, (*node.inputs, *[""] * 9), strict=False))
    ids = named["input_ids"]
    batch, seq = e.shape(ids)
    positions = named["position_ids"] or e.const(np.arange(seq, dtype=np.int32)[None], "positions")
    total = e.add(
        "Add",
        [
            e.add("Gather", [named["word_embedding"], ids]),
            e.add("Gather", [named["position_embedding"], positions]),
        ],
    )
    if named["segment_ids"]:
        segment = e.add("Gather", [named["segment_embedding"], named["segment_ids"]])
        total = e.add("Add", [total, segment])
    outs = (*node.outputs, "", "")[:3]
    if outs[2]:
        e.rename(total, outs[2])
    params = [named["gamma"]] + ([named["beta"]] if named["beta"] else [])
    eps = node.attr_dict["epsilon"]
    e.add("LayerNormalization", [total, *params], {"axis": -1, "epsilon": eps}, outputs=[outs[0]])
    if not outs[1]:
        return
    if not named["mask"]:
        e.add("Identity", [e.const(np.zeros(batch, np.int32), "mask_index")], outputs=[outs[1]])
        return
    ones = e.add("Equal", [named["mask"], e.const(1, "one", "int32")])
    count = e.add("Cast", [ones], {"to": "int32"})
    e.add("ReduceSum", [count, e.ints([1], "axes")], {"keepdims": 0}, outputs=[outs[1]])


register(
    MS + "EmbedLayerNormalization",
    Pattern.OPAQUE,
    _embed_type,
    _embed,
    inputs=(6, 9),
    optional_inputs=(1, 4),  # segment_ids and segment_embedding (a model without segments)
    outputs=(1, 3),
    attrs={"epsilon": 1e-12, "mask_index_type": 1},
    expand=_expand_embed,
)


__all__ = ["MS", "refuse"]

"""onnxruntime's contrib attention ops (`com.microsoft` domain): Attention (the fused QKV
projection and multi-head attention of BERT/GPT-2 optimized files), MultiHeadAttention (query,
key and value given apart) and RotaryEmbedding (LLaMA's rotary position embedding).

Composites (`expand`) of MatMul, Softmax, Gather and element-wise ops, the same kernels an
exported attention written out in ops compiles to. The mask forms are onnxruntime's CPU
kernel's (`PrepareMask`): a 2-D `[batch, total]` or 3-D `[batch, sequence, total]` 0/1 mask
adds `mask_filter_value` where it is 0; a 1-D `[batch]` mask holds each row's end position
(and a `[2 * batch]` one the start positions after them); `unidirectional` sets the scores
above the diagonal to the type's lowest value (to `mask_filter_value` with a 3-D mask).
Forms not built (past/present key-value state, packed QKV, Attention's `do_rotary`, a 4-D
mask) are refused by name: `UnsupportedOpError` lists the node and the input or attribute.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import REQUIRED, Pattern, register
from .contrib import MS, refuse
from .emit import Emitter
from .nn import softmax

# ---- masks -----------------------------------------------------------------------------------


def _check_mask(
    op: str, ty: TensorType | None, dims: tuple[int, int, int], starts: bool = True
) -> None:
    """A mask of a shape `_mask` builds; `starts`: `[2 * batch]` (ends, then starts) too,
    which onnxruntime's Attention takes and its MultiHeadAttention refuses."""
    if ty is None:
        return
    batch, seq, total = dims
    if ty.dtype != "int32":
        raise ValueError(f"{op} mask_index must be int32, not {ty.dtype}")
    allowed = [(batch,), *([(2 * batch,)] if starts else []), (batch, total), (batch, seq, total)]
    if len(ty.shape) == 4:
        raise refuse(op.removeprefix(MS), f"with a 4-D mask {ty.shape} (Megatron's)")
    if ty.shape not in allowed:
        raise ValueError(f"{op} mask must have a shape among {allowed}, not {ty.shape}")


def _mask_np(mask: Any, dims: tuple[int, int, int], filt: float, causal: bool, dtype: Any) -> Any:
    """The additive mask `[batch, 1, seq, total]` (float64) onnxruntime's CPU kernel builds for
    scores of `dtype` (the causal mask is its lowest value)."""
    batch, seq, total = dims
    add = np.zeros((batch, 1, seq, total))
    if mask is not None and mask.ndim >= 2:
        shape = (batch, 1, 1 if mask.ndim == 2 else seq, total)
        add = add + np.where(mask > 0, 0.0, filt).reshape(shape)
    elif mask is not None:
        pos = np.arange(total)[None]
        keep = pos < mask[:batch, None]
        if mask.shape[0] == 2 * batch:
            keep &= pos >= mask[batch:, None]
        add = add + np.where(keep, 0.0, filt)[:, None, None, :]
    if causal:
        lowest = filt if mask is not None and mask.ndim == 3 else np.finfo(dtype).min
        above = np.arange(total)[None, :] > np.arange(seq)[:, None]
        add = np.where(above, lowest, add)
    return add


def _mask(
    e: Emitter, mask: str, dims: tuple[int, int, int], filt: float, causal: bool, dtype: str
) -> Any:
    """`_mask_np` as graph ops: a value broadcasting to `[batch, heads, seq, total]`, or None."""
    batch, seq, total = dims
    add = None
    rank = len(e.shape(mask)) if mask else 0
    zero, masked = e.const(0.0, "zero", dtype), e.const(filt, "filter", dtype)
    if rank >= 2:
        keep = e.add("Greater", [mask, e.const(0, "zero_i", "int32")])
        add = e.add("Where", [keep, zero, masked])
        add = e.reshape(add, (batch, 1, 1 if rank == 2 else seq, total))
    elif rank == 1:
        pos = e.const(np.arange(total, dtype=np.int32)[None], "positions")
        keep = e.add("Less", [pos, e.reshape(e.slice(mask, 0, 0, batch), (batch, 1))])
        if e.shape(mask)[0] == 2 * batch:
            start = e.reshape(e.slice(mask, 0, batch, 2 * batch), (batch, 1))
            keep = e.add("And", [keep, e.add("GreaterOrEqual", [pos, start])])
        add = e.reshape(e.add("Where", [keep, zero, masked]), (batch, 1, 1, total))
    if not causal:
        return add
    above = np.arange(total)[None, :] > np.arange(seq)[:, None]
    lowest = filt if rank == 3 else float(np.finfo(dtype).min)
    if add is None:
        return e.const(np.where(above, lowest, 0.0), "causal", dtype)
    return e.add("Where", [e.const(above, "above"), e.const(lowest, "lowest", dtype), add])


# ---- the attention core ----------------------------------------------------------------------


def _attend_np(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, scale: float, add: Any
) -> np.ndarray:
    """softmax(q k^T * scale + add) v per head; q `[B, S, N*h]`, k `[B, T, N*h]`, v `[B, T,
    N*hv]`; the result `[B, S, N*hv]`."""
    b, s, _ = q.shape
    t = k.shape[1]
    qh = q.reshape(b, s, heads, -1).transpose(0, 2, 1, 3)
    kh = k.reshape(b, t, heads, -1).transpose(0, 2, 3, 1)
    vh = v.reshape(b, t, heads, -1).transpose(0, 2, 1, 3)
    scores = qh @ kh * scale + add
    probs = softmax({"axis": -1}, scores)
    return (probs @ vh).transpose(0, 2, 1, 3).reshape(b, s, -1)


def _attend(
    e: Emitter, q: str, k: str, v: str, heads: int, scale: float, add: Any, out: str
) -> None:
    """`_attend_np` as graph ops, `out` named."""
    b, s, _ = e.shape(q)
    t = e.shape(k)[1]

    def split(value: str, length: int, perm: list[int]) -> str:
        width = e.shape(value)[2] // heads
        return e.transpose(e.reshape(value, (b, length, heads, width)), perm)

    qh, kh, vh = split(q, s, [0, 2, 1, 3]), split(k, t, [0, 2, 3, 1]), split(v, t, [0, 2, 1, 3])
    scores = e.add("MatMul", [qh, kh])
    scores = e.add("Mul", [scores, e.const(scale, "scale", e.dtype(q))])
    if add is not None:
        scores = e.add("Add", [scores, add])
    probs = e.add("Softmax", [scores], {"axis": -1})
    ctx = e.transpose(e.add("MatMul", [probs, vh]), [0, 2, 1, 3])
    e.add("Reshape", [ctx, e.ints([b, s, e.shape(v)[2]], "shape")], outputs=[out])


def _scale(attrs: dict[str, Any], head: int) -> float:
    return attrs["scale"] if attrs["scale"] else 1.0 / math.sqrt(head)


def _check_bias(op: str, ty: TensorType | None, shape: tuple) -> None:
    """attention_bias must be `[batch or 1, heads or 1, sequence, total]`."""
    if ty is None:
        return
    ok = len(ty.shape) == 4 and ty.shape[2:] == shape[2:]
    if not ok or any(d not in (1, want) for d, want in zip(ty.shape[:2], shape[:2], strict=True)):
        raise ValueError(f"{op} attention_bias must broadcast to {shape}, not {ty.shape}")


# ---- Attention -------------------------------------------------------------------------------

_ATTENTION = MS + "Attention"
_ATTENTION_ATTRS = {
    "num_heads": REQUIRED,
    "qkv_hidden_sizes": None,
    "unidirectional": 0,
    "mask_filter_value": -10000.0,
    "scale": 0.0,
    "do_rotary": 0,
    "past_present_share_buffer": 0,
    "rotary_embedding_dim": 0,
}


def _qkv_sizes(attrs: dict[str, Any], total: int) -> tuple[int, int, int]:
    sizes = attrs.get("qkv_hidden_sizes")
    if sizes is None:
        if total % 3:
            raise ValueError(f"{_ATTENTION} weights' columns must be 3 * hidden, not {total}")
        return (total // 3,) * 3
    if len(sizes) != 3 or sum(sizes) != total or sizes[0] != sizes[1]:
        raise ValueError(
            f"{_ATTENTION} qkv_hidden_sizes must be three sizes (q and k equal) summing to the "
            f"weights' {total} columns, not {list(sizes)}"
        )
    return tuple(sizes)


def _attention_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x, w, bias = types[:3]
    named = dict(
        zip(
            ("mask_index", "past", "attention_bias", "past_sequence_length"),
            types[3:],
            strict=False,
        )
    )
    for what in ("past", "past_sequence_length"):
        if named.get(what) is not None:
            raise refuse("Attention", f"with {what} (key/value cache state)")
    for key in ("do_rotary", "past_present_share_buffer"):
        if attrs[key]:
            raise refuse("Attention", f"with {key}={attrs[key]}")
    if len(x.shape) != 3 or len(w.shape) != 2 or w.shape[0] != x.shape[2]:
        raise ValueError(
            f"{_ATTENTION} input [batch, sequence, hidden] and weights [hidden, 3 * hidden] must "
            f"agree, not {x.shape} and {w.shape}"
        )
    sizes = _qkv_sizes(attrs, w.shape[1])
    heads = attrs["num_heads"]
    if heads <= 0 or any(size % heads for size in sizes):
        raise ValueError(f"{_ATTENTION} num_heads must divide the sizes {sizes}, not {heads}")
    if bias is None or bias.shape != (w.shape[1],):
        raise ValueError(f"{_ATTENTION} bias must have shape ({w.shape[1]},)")
    batch, seq, _ = x.shape
    _check_mask(_ATTENTION, named.get("mask_index"), (batch, seq, seq))
    _check_bias(_ATTENTION, named.get("attention_bias"), (batch, heads, seq, seq))
    return [TensorType((batch, seq, sizes[2]), x.dtype)]


def _attention(
    attrs: dict[str, Any],
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray,
    mask: Any = None,
    past: Any = None,
    attn_bias: Any = None,
    *rest: Any,
) -> np.ndarray:
    qs, ks, _ = _qkv_sizes(attrs, w.shape[1])
    qkv = x.astype(np.float64) @ w + bias
    q, k, v = qkv[..., :qs], qkv[..., qs : qs + ks], qkv[..., qs + ks :]
    batch, seq, _ = x.shape
    filt, causal = attrs["mask_filter_value"], attrs["unidirectional"]
    add = _mask_np(mask, (batch, seq, seq), filt, causal, x.dtype)
    if attn_bias is not None:
        add = add + attn_bias
    heads = attrs["num_heads"]
    return _attend_np(q, k, v, heads, _scale(attrs, qs // heads), add).astype(x.dtype)


def _expand_attention(b: GraphBuilder, node: Node) -> None:
    """Three MatMuls by column slices of the weights (folded when the weights are constants)
    plus their biases, then the attention core."""
    e = Emitter(b, node)
    x, w, bias, mask, _, attn_bias = (*node.inputs, "", "", "")[:6]
    attrs = node.attr_dict
    sizes = _qkv_sizes(attrs, e.shape(w)[1])
    starts = (0, sizes[0], sizes[0] + sizes[1], sum(sizes))
    q, k, v = (
        e.add("Add", [e.add("MatMul", [x, e.slice(w, 1, lo, hi)]), e.slice(bias, 0, lo, hi)])
        for lo, hi in zip(starts, starts[1:], strict=False)
    )
    batch, seq, _ = e.shape(x)
    filt, causal = attrs["mask_filter_value"], attrs["unidirectional"]
    add = _mask(e, mask, (batch, seq, seq), filt, causal, e.dtype(x))
    if attn_bias:
        add = attn_bias if add is None else e.add("Add", [add, attn_bias])
    heads = attrs["num_heads"]
    _attend(e, q, k, v, heads, _scale(attrs, sizes[0] // heads), add, node.outputs[0])


register(
    _ATTENTION,
    Pattern.OPAQUE,
    _attention_type,
    _attention,
    inputs=(3, 7),
    outputs=(1, 1),
    attrs=_ATTENTION_ATTRS,
    expand=_expand_attention,
)


# ---- MultiHeadAttention ----------------------------------------------------------------------

_MHA = MS + "MultiHeadAttention"
_MHA_INPUTS = (
    "query",
    "key",
    "value",
    "bias",
    "key_padding_mask",
    "attention_bias",
    "past_key",
    "past_value",
    "past_sequence_length",
    "cache_indirection",
)


def _mha_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    named = dict(zip(_MHA_INPUTS, types, strict=False))
    for what in _MHA_INPUTS[6:]:
        if named.get(what) is not None:
            raise refuse("MultiHeadAttention", f"with {what} (key/value cache state)")
    q, k, v = named["query"], named.get("key"), named.get("value")
    if len(q.shape) != 3 or k is None or v is None:
        raise refuse(
            "MultiHeadAttention",
            "with packed query/key/value (only 3-D query, key and value given apart are built)",
        )
    if len(k.shape) != 3 or len(v.shape) != 3:
        raise refuse(
            "MultiHeadAttention",
            f"with {len(k.shape)}-D key (only [batch, length, hidden] key and value are built)",
        )
    batch, seq, hidden = q.shape
    heads = attrs["num_heads"]
    if k.shape[0] != batch or k.shape[2] != hidden or v.shape[:2] != k.shape[:2]:
        raise ValueError(f"{_MHA} query {q.shape}, key {k.shape}, value {v.shape} must agree")
    if heads <= 0 or hidden % heads or v.shape[2] % heads:
        raise ValueError(f"{_MHA} num_heads must divide {hidden} and {v.shape[2]}, not {heads}")
    bias = named.get("bias")
    if bias is not None and bias.shape != (2 * hidden + v.shape[2],):
        raise ValueError(f"{_MHA} bias must have shape ({2 * hidden + v.shape[2]},)")
    total = k.shape[1]
    _check_mask(_MHA, named.get("key_padding_mask"), (batch, seq, total), starts=False)
    _check_bias(_MHA, named.get("attention_bias"), (batch, heads, seq, total))
    return [TensorType((batch, seq, v.shape[2]), q.dtype)]


def _mha(
    attrs: dict[str, Any],
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    bias: Any = None,
    mask: Any = None,
    attn_bias: Any = None,
    *rest: Any,
) -> np.ndarray:
    hidden = q.shape[2]
    qf, kf, vf = (t.astype(np.float64) for t in (q, k, v))
    if bias is not None:
        qf, kf, vf = qf + bias[:hidden], kf + bias[hidden : 2 * hidden], vf + bias[2 * hidden :]
    batch, seq, _ = q.shape
    filt, causal = attrs["mask_filter_value"], attrs["unidirectional"]
    add = _mask_np(mask, (batch, seq, k.shape[1]), filt, causal, q.dtype)
    if attn_bias is not None:
        add = add + attn_bias
    heads = attrs["num_heads"]
    return _attend_np(qf, kf, vf, heads, _scale(attrs, hidden // heads), add).astype(q.dtype)


def _expand_mha(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    q, k, v, bias, mask, attn_bias = (*node.inputs, "", "", "")[:6]
    hidden = e.shape(q)[2]
    if bias:
        cuts = (0, hidden, 2 * hidden, e.shape(bias)[0])
        q, k, v = (
            e.add("Add", [t, e.slice(bias, 0, lo, hi)])
            for t, lo, hi in zip((q, k, v), cuts, cuts[1:], strict=False)
        )
    attrs = node.attr_dict
    dims = (e.shape(q)[0], e.shape(q)[1], e.shape(k)[1])
    add = _mask(e, mask, dims, attrs["mask_filter_value"], attrs["unidirectional"], e.dtype(q))
    if attn_bias:
        add = attn_bias if add is None else e.add("Add", [add, attn_bias])
    heads = attrs["num_heads"]
    _attend(e, q, k, v, heads, _scale(attrs, hidden // heads), add, node.outputs[0])


register(
    _MHA,
    Pattern.OPAQUE,
    _mha_type,
    _mha,
    inputs=(1, 10),
    outputs=(1, 1),
    attrs={"num_heads": REQUIRED, "mask_filter_value": -10000.0, "scale": 0.0, "unidirectional": 0},
    expand=_expand_mha,
)


# ---- RotaryEmbedding -------------------------------------------------------------------------

_ROTARY = MS + "RotaryEmbedding"
_ROTARY_ATTRS = {
    "interleaved": 0,
    "num_heads": 0,
    "rotary_embedding_dim": 0,
    "scale": 1.0,
    "is_packed_batching": 0,
}


def _rotary_layout(attrs: dict[str, Any], x: tuple, cache: tuple) -> tuple[int, int, int, int]:
    """(heads, head size, rotary dims, sequence axis) of the input `x`: `[batch, heads,
    sequence, head]` or `[batch, sequence, heads * head]`."""
    rot = attrs["rotary_embedding_dim"] or 2 * cache[1]
    if len(x) == 4:
        heads, head = x[1], x[3]
        seq_axis = 2
    elif len(x) == 3:
        heads = attrs["num_heads"] or x[2] // (2 * cache[1])
        if heads <= 0 or x[2] % heads:
            raise ValueError(f"{_ROTARY} num_heads must divide the hidden size {x[2]}")
        head, seq_axis = x[2] // heads, 1
    else:
        raise ValueError(f"{_ROTARY} input must be 3-D or 4-D, not {x}")
    if rot > head or rot % 2 or cache[1] != rot // 2:
        raise ValueError(
            f"{_ROTARY} cos/sin caches [positions, {cache[1]}] must hold half the rotary dims "
            f"{rot} (at most the head size {head})"
        )
    return heads, head, rot, seq_axis


def _rotary_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x, pos, cos, sin = types
    for key in ("is_packed_batching",):
        if attrs[key]:
            raise refuse("RotaryEmbedding", f"with {key}={attrs[key]}")
    if attrs["scale"] != 1.0:
        raise refuse(
            "RotaryEmbedding",
            f"with scale={attrs['scale']} (onnxruntime's CPU kernel ignores it; only 1.0 is built)",
        )
    if len(cos.shape) != 2 or sin.shape != cos.shape:
        raise ValueError(f"{_ROTARY} cos_cache and sin_cache must be one 2-D shape")
    _, _, _, seq_axis = _rotary_layout(attrs, x.shape, cos.shape)
    batch, seq = x.shape[0], x.shape[seq_axis]
    if pos.dtype != "int64" or pos.shape not in ((1,), (batch, seq)):
        raise ValueError(
            f"{_ROTARY} position_ids must be int64 of shape (1,) or ({batch}, {seq}), not "
            f"{pos.dtype} {pos.shape}"
        )
    return [x]


def _rotate_np(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: int) -> np.ndarray:
    """The rotary dims of `x` (last axis) rotated by per-pair angles with `cos`/`sin`."""
    if interleaved:
        even, odd = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = even * cos - odd * sin, odd * cos + even * sin
        return out
    half = x.shape[-1] // 2
    lo, hi = x[..., :half], x[..., half:]
    return np.concatenate([lo * cos - hi * sin, hi * cos + lo * sin], axis=-1)


def _rotary(
    attrs: dict[str, Any], x: np.ndarray, pos: np.ndarray, cos: np.ndarray, sin: np.ndarray
) -> np.ndarray:
    heads, head, rot, seq_axis = _rotary_layout(attrs, x.shape, cos.shape)
    batch, seq = x.shape[0], x.shape[seq_axis]
    view = x.reshape(batch, seq, heads, head) if x.ndim == 3 else x.transpose(0, 2, 1, 3)
    where = pos[0] + np.arange(seq)[None] if pos.shape == (1,) else pos
    c, s = cos[where][:, :, None, :], sin[where][:, :, None, :]  # [batch, seq, 1, rot / 2]
    z = view.astype(np.float64)
    out = z.copy()
    out[..., :rot] = _rotate_np(z[..., :rot], c, s, attrs["interleaved"])
    out = out.reshape(x.shape) if x.ndim == 3 else out.transpose(0, 2, 1, 3)
    return out.astype(x.dtype)


def _expand_rotary(b: GraphBuilder, node: Node) -> None:
    """Gathered cos/sin rows times the rotary dims and their partners (the halves' swap, or
    each pair's for `interleaved`), the rest of each head passed through."""
    e = Emitter(b, node)
    x, pos, cos, sin = node.inputs
    attrs = node.attr_dict
    shape = e.shape(x)
    heads, head, rot, seq_axis = _rotary_layout(attrs, shape, e.shape(cos))
    batch, seq = shape[0], shape[seq_axis]
    if e.shape(pos) == (1,):
        pos = e.add("Add", [e.const(np.arange(seq)[None], "positions", "int64"), pos])
    # the cos/sin rows [batch, seq, rot / 2] placed to broadcast over the heads
    rows = e.shape(pos)[0]  # 1 for an offset: broadcast over the batch
    at = (rows, seq, 1, rot // 2) if len(shape) == 3 else (rows, 1, seq, rot // 2)
    c, s = (e.reshape(e.add("Gather", [t, pos]), at) for t in (cos, sin))
    view = e.reshape(x, (batch, seq, heads, head)) if len(shape) == 3 else x
    part = e.slice(view, 3, 0, rot)
    if attrs["interleaved"]:
        pairs = e.reshape(part, (*e.shape(part)[:3], rot // 2, 2))
        even, odd = e.take(pairs, 4, 0), e.take(pairs, 4, 1)
    else:
        even, odd = e.slice(part, 3, 0, rot // 2), e.slice(part, 3, rot // 2, rot)
    first = e.add("Sub", [e.add("Mul", [even, c]), e.add("Mul", [odd, s])])
    second = e.add("Add", [e.add("Mul", [odd, c]), e.add("Mul", [even, s])])
    if attrs["interleaved"]:
        turned = e.reshape(e.stack([first, second], 4), e.shape(part))
    else:
        turned = e.add("Concat", [first, second], {"axis": 3})
    if rot < head:
        turned = e.add("Concat", [turned, e.slice(view, 3, rot, head)], {"axis": 3})
    e.add("Reshape", [turned, e.ints(shape, "shape")], outputs=[node.outputs[0]])


register(
    _ROTARY,
    Pattern.OPAQUE,
    _rotary_type,
    _rotary,
    inputs=(4, 4),
    attrs=_ROTARY_ATTRS,
    expand=_expand_rotary,
)

"""onnxruntime's GroupQueryAttention (`com.microsoft` domain), the attention of decoder LLMs as
onnxruntime-genai's model builder writes them: grouped heads (`num_heads` a multiple of
`kv_num_heads`), query/key/value given apart or packed in one QKV tensor, a key/value cache
(past_key/past_value in, present_key/present_value out, [batch, kv_heads, length, head]),
rotary embedding inside the op (`do_rotary` with cos_cache/sin_cache), `scale`, `softcap`,
`local_window_size`, `smooth_softmax` and `head_sink`.

A composite, as onnxruntime's CPU kernel computes it: batch entry b holds `seqlens_k[b] + 1`
tokens after the step, so its new tokens start at `offset = max(0, seqlens_k[b] + 1 - S)` (0:
the prompt, right-padded when shorter than S). The present cache keeps the past's first
`offset` rows, holds the new keys/values at rows [offset, offset + S) and zeros after; query s
(position `offset + s`, which also picks its rotary angles) attends to the keys at positions
`offset + s - local_window_size + 1` .. `offset + s` (onnxruntime 1.32's window: the query's
own key and the `local_window_size - 1` before it); with `causal=0`, to every key up to
position `offset + S - 1`. Those positions are values computed at run
time from seqlens_k: masks and gathers, never shapes. The present length is static: onnxruntime
makes it `max(total_sequence_length, past length)`, which is used when total_sequence_length is
a constant (bound with `constant_inputs`, or computed from a static attention mask's shape as
the model builder's graphs do); otherwise the cache grows, past length + S. A fixed
shared-buffer length (past length = present length = max length) therefore needs
total_sequence_length known at compile time.

Refused by name: the quantized cache (`k_quant_type`/`v_quant_type`, int8/uint8 caches),
`sliding_window_cache`, `qk_output`, position_ids, q/k norm weights and
query_seqlens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import REQUIRED, Pattern, register
from .attention import _heads_first, _repeat_heads, _softmax
from .contrib import MS, refuse
from .contrib_attention import _rotary
from .emit import Emitter

_GQA = MS + "GroupQueryAttention"
_INPUTS = (
    "query",
    "key",
    "value",
    "past_key",
    "past_value",
    "seqlens_k",
    "total_sequence_length",
    "cos_cache",
    "sin_cache",
    "position_ids",
    "attention_bias",
    "head_sink",
    "k_scale",
    "v_scale",
    "q_norm_weight",
    "k_norm_weight",
    "query_seqlens",
)
_REFUSED_INPUTS = ("position_ids", "k_scale", "v_scale", "q_norm_weight", "k_norm_weight",
                   "query_seqlens")  # fmt: skip
_ATTRS = {
    "num_heads": REQUIRED,
    "kv_num_heads": REQUIRED,
    "scale": 0.0,
    "softcap": 0.0,
    "local_window_size": -1,
    "do_rotary": 0,
    "rotary_interleaved": 0,
    "smooth_softmax": 0,
    "qk_output": 0,
    "causal": 1,
    "sliding_window_cache": 0,
    "k_quant_type": "NONE",
    "v_quant_type": "NONE",
    "kv_cache_bit_width": 0,
    "qk_norm_epsilon": 1e-6,
    "q_norm_epsilon": None,
    "k_norm_epsilon": None,
}


@dataclass(frozen=True)
class _Geometry:
    batch: int
    seq: int  # S: new tokens
    heads: int
    kv_heads: int
    head: int
    past: int  # rows of past_key (0 without)
    present: int  # rows of present_key
    packed: bool
    rotary: int  # rotated dims of each head (0: no rotary)


def _geometry(attrs: dict[str, Any], types: list, consts: list) -> _Geometry:
    named = dict(zip(_INPUTS, types, strict=False))
    for what in _REFUSED_INPUTS:
        if named.get(what) is not None:
            raise refuse("GroupQueryAttention", f"with {what}")
    for key, plain in (("k_quant_type", "NONE"), ("v_quant_type", "NONE"),
                       ("sliding_window_cache", 0), ("qk_output", 0)):  # fmt: skip
        if attrs[key] != plain:
            raise refuse("GroupQueryAttention", f"with {key}={attrs[key]!r}")
    if attrs["causal"] not in (0, 1):
        raise ValueError(f"{_GQA} causal must be 0 or 1, not {attrs['causal']!r}")
    if not attrs["causal"] and attrs["local_window_size"] > 0:
        raise ValueError(f"{_GQA} local_window_size must be -1 when causal is 0")
    q = named["query"]
    if len(q.shape) != 3 or not np.issubdtype(np.dtype(q.dtype), np.floating):
        raise ValueError(f"{_GQA} query must be a 3-D float tensor, not {q.dtype} {q.shape}")
    heads, kv_heads = attrs["num_heads"], attrs["kv_num_heads"]
    if heads < 1 or kv_heads < 1 or heads % kv_heads:
        raise ValueError(
            f"{_GQA} num_heads must be a positive multiple of kv_num_heads, not {heads} and "
            f"{kv_heads}"
        )
    batch, seq, width = q.shape
    k, v = named.get("key"), named.get("value")
    packed = k is None
    if packed != (v is None):
        raise ValueError(f"{_GQA} key and value must be given together (or packed in query)")
    parts = heads + 2 * kv_heads if packed else heads
    if width % parts:
        raise ValueError(f"{_GQA} query's last dim {width} must split into {parts} heads")
    head = width // parts
    for ty, what in ((k, "key"), (v, "value")):
        if ty is not None and ty.shape != (batch, seq, kv_heads * head):
            raise ValueError(
                f"{_GQA} {what} must have shape {(batch, seq, kv_heads * head)}, not {ty.shape}"
            )
    past_k, past_v = named.get("past_key"), named.get("past_value")
    if (past_k is None) != (past_v is None):
        raise ValueError(f"{_GQA} past_key and past_value must be given together")
    past = 0
    if past_k is not None:
        past = past_k.shape[2] if len(past_k.shape) == 4 else -1
        for ty, what in ((past_k, "past_key"), (past_v, "past_value")):
            if ty.shape != (batch, kv_heads, past, head) or ty.dtype != q.dtype:
                raise ValueError(
                    f"{_GQA} {what} must be {q.dtype} of shape {[batch, kv_heads, past, head]} "
                    f"(past length), not {ty.dtype} {list(ty.shape)}"
                )
    lens, total = named["seqlens_k"], named["total_sequence_length"]
    if lens.dtype != "int32" or lens.shape != (batch,):
        raise ValueError(f"{_GQA} seqlens_k must be int32 of shape ({batch},), not {lens}")
    if total.dtype != "int32" or total.shape not in ((), (1,)):
        raise ValueError(f"{_GQA} total_sequence_length must be one int32, not {total}")
    fixed = consts[6] if len(consts) > 6 else None
    present = max(int(np.asarray(fixed).reshape(-1)[0]), past) if fixed is not None else past + seq
    if present < seq:
        raise ValueError(
            f"{_GQA} total_sequence_length {present} must be at least the sequence length {seq}"
        )
    return _Geometry(batch, seq, heads, kv_heads, head, past, present, packed,
                     _rotary_dims(attrs, named, head))  # fmt: skip


def _rotary_dims(attrs: dict[str, Any], named: dict, head: int) -> int:
    if not attrs["do_rotary"]:
        return 0
    cos, sin = named.get("cos_cache"), named.get("sin_cache")
    if cos is None or sin is None or len(cos.shape) != 2 or sin.shape != cos.shape:
        raise ValueError(f"{_GQA} do_rotary needs cos_cache and sin_cache of one 2-D shape")
    if 2 * cos.shape[1] > head:
        raise ValueError(f"{_GQA} cos_cache's {cos.shape[1]} columns must be at most head / 2")
    return 2 * cos.shape[1]


def _check_extras(g: _Geometry, named: dict) -> None:
    bias, sink = named.get("attention_bias"), named.get("head_sink")
    full = (g.batch, g.heads, g.seq, g.present)
    if bias is not None and (
        len(bias.shape) != 4
        or bias.shape[2:] != full[2:]
        or any(d not in (1, f) for d, f in zip(bias.shape[:2], full[:2], strict=True))
    ):
        raise ValueError(f"{_GQA} attention_bias must broadcast to {list(full)}, not {bias.shape}")
    if sink is not None and sink.shape != (g.heads,):
        raise ValueError(f"{_GQA} head_sink must have shape ({g.heads},), not {sink.shape}")


def _gqa_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    g = _geometry(attrs, types, consts)
    _check_extras(g, dict(zip(_INPUTS, types, strict=False)))
    dtype = types[0].dtype
    cache = TensorType((g.batch, g.kv_heads, g.present, g.head), dtype)
    return [TensorType((g.batch, g.seq, g.heads * g.head), dtype), cache, cache]


# ---- numpy ------------------------------------------------------------------------------------


def _offsets(lens: np.ndarray, seq: int) -> np.ndarray:
    """Where each batch entry's new tokens start: `max(0, seqlens_k + 1 - S)`."""
    return np.maximum(lens.astype(np.int64) + 1 - seq, 0)


def _allowed_np(attrs: dict[str, Any], g: _Geometry, offsets: np.ndarray) -> np.ndarray:
    """[B, 1, S, present]: key j is visible to query s."""
    if not attrs["causal"]:  # every key up to the last new one
        last = (offsets + g.seq)[:, None, None, None]
        return np.broadcast_to(np.arange(g.present) < last, (g.batch, 1, g.seq, g.present))
    distance = offsets[:, None, None, None] + np.arange(g.seq)[:, None] - np.arange(g.present)
    allowed = distance >= 0
    if attrs["local_window_size"] > 0:
        allowed &= distance < attrs["local_window_size"]
    return allowed


def _gqa(attrs: dict[str, Any], *arrays: Any) -> tuple[np.ndarray, ...]:
    named = dict(zip(_INPUTS, arrays, strict=False))
    types = [None if a is None else TensorType(a.shape, str(a.dtype)) for a in arrays]
    consts = [None] * 6 + [named["total_sequence_length"]]
    g = _geometry(attrs, types, consts)
    q = named["query"]
    b, s, hd = g.batch, g.seq, g.head
    if g.packed:
        cuts = np.cumsum([g.heads * hd, g.kv_heads * hd])
        q, k, v = np.split(q, cuts, axis=2)
    else:
        k, v = named["key"], named["value"]
    offsets = _offsets(named["seqlens_k"], s)
    if g.rotary:
        pos = offsets[:, None] + np.arange(s)
        rot = {"interleaved": attrs["rotary_interleaved"], "rotary_embedding_dim": g.rotary,
               "scale": 1.0, "is_packed_batching": 0}  # fmt: skip
        cos, sin = named["cos_cache"], named["sin_cache"]
        q = _rotary({**rot, "num_heads": g.heads}, q, pos, cos, sin)
        k = _rotary({**rot, "num_heads": g.kv_heads}, k, pos, cos, sin)
    q, k, v = (x.reshape(b, s, -1, hd).transpose(0, 2, 1, 3) for x in (q, k, v))
    present_k = np.zeros((b, g.kv_heads, g.present, hd), q.dtype)
    present_v = np.zeros_like(present_k)
    pairs = ((present_k, named["past_key"], k), (present_v, named["past_value"], v))
    for i, off in enumerate(offsets):
        keep = min(off, g.past)
        for present, past, new in pairs:
            if keep:
                present[i, :, :keep] = past[i, :, :keep]
            stop = min(off + s, g.present)
            present[i, :, off:stop] = new[i, :, : stop - off]
    reps = g.heads // g.kv_heads
    keys, values = (np.repeat(x, reps, axis=1).astype(np.float64) for x in (present_k, present_v))
    scores = q.astype(np.float64) @ keys.transpose(0, 1, 3, 2) * _scale(attrs, hd)
    if attrs["softcap"] > 0:
        scores = attrs["softcap"] * np.tanh(scores / attrs["softcap"])
    if named.get("attention_bias") is not None:
        scores = scores + named["attention_bias"]
    scores = np.where(_allowed_np(attrs, g, offsets), scores, -np.inf)
    sink = _sink_np(attrs, named.get("head_sink"), g)
    if sink is not None:
        scores = np.concatenate([scores, np.broadcast_to(sink, (*scores.shape[:3], 1))], axis=3)
    top = scores.max(axis=3, keepdims=True)
    exp = np.exp(scores - top)
    probs = (exp / exp.sum(axis=3, keepdims=True))[..., : g.present]
    out = (probs @ values).transpose(0, 2, 1, 3).reshape(b, s, -1).astype(q.dtype)
    return out, present_k, present_v


def _scale(attrs: dict[str, Any], head: int) -> float:
    return attrs["scale"] or 1.0 / math.sqrt(head)


def _sink_np(attrs: dict[str, Any], sink: Any, g: _Geometry) -> Any:
    """The extra logit of each head's softmax ([1, N, 1, 1]): head_sink, or 0 for
    smooth_softmax; None for a plain softmax."""
    if sink is not None:
        return sink.astype(np.float64).reshape(1, g.heads, 1, 1)
    return np.zeros((1, 1, 1, 1)) if attrs["smooth_softmax"] else None


# ---- expansion --------------------------------------------------------------------------------


def _expand_gqa(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    named = dict(zip(_INPUTS, (*node.inputs, *[""] * len(_INPUTS)), strict=False))
    types = [b.types[i] if i else None for i in node.inputs]
    consts = [b.constants.get(i) if i else None for i in node.inputs]
    attrs = node.attr_dict
    g = _geometry(attrs, types, consts)
    dtype = e.dtype(named["query"])
    q, k, v = _split_qkv(e, named, g)
    # where each batch entry's new tokens start, [B, 1]
    lens = e.add("Cast", [named["seqlens_k"]], {"to": "int64"})
    start = e.add("Add", [lens, e.const(1 - g.seq, "one_less_s", "int64")])
    start = e.reshape(e.add("Max", [start, e.const(0, "zero", "int64")]), (g.batch, 1))
    if g.rotary:
        pos = e.add("Add", [start, e.const(np.arange(g.seq)[None], "steps", "int64")])
        q, k = (_rotate(e, attrs, x, pos, named, n) for x, n in ((q, g.heads), (k, g.kv_heads)))
    q, k, v = (_heads_first(e, x, n) for x, n in ((q, g.heads), (k, g.kv_heads), (v, g.kv_heads)))
    # row j of the cache - start: the new token it holds (when in [0, S))
    rows = e.const(np.arange(g.present).reshape(1, -1), "rows", "int64")
    back = e.add("Sub", [rows, start])  # [B, present]
    outs = (*node.outputs, "", "")[1:3]
    present = [
        _present(e, g, new, named[past], (rows, back, start), out)
        for new, past, out in ((k, "past_key", outs[0]), (v, "past_value", outs[1]))
    ]
    reps = g.heads // g.kv_heads
    keys, values = (_repeat_heads(e, x, reps) for x in present)
    scale = e.const(_scale(attrs, g.head), "scale", dtype)
    scores = e.add("Mul", [e.add("MatMul", [q, e.transpose(keys, (0, 1, 3, 2))]), scale])
    if attrs["softcap"] > 0:
        c = e.const(attrs["softcap"], "softcap", dtype)
        scores = e.add("Mul", [e.add("Tanh", [e.add("Div", [scores, c])]), c])
    if named["attention_bias"]:
        scores = e.add("Add", [scores, named["attention_bias"]])
    allowed = _allowed(e, attrs, g, start, back)
    scores = e.add("Where", [allowed, scores, e.const(-np.inf, "ninf", dtype)])
    probs = _probs(e, attrs, scores, named["head_sink"], g)
    y = e.transpose(e.add("MatMul", [probs, values]), (0, 2, 1, 3))
    e.add("Reshape", [y, e.ints([g.batch, g.seq, g.heads * g.head], "shape")],
          outputs=[node.outputs[0]])  # fmt: skip


def _allowed(e: Emitter, attrs: dict, g: _Geometry, start: str, back: str) -> str:
    """`_allowed_np` as graph ops: the distance from query s (position start + s) back to key
    j in [0, window); without `causal`, keys before start + S (`back` < S)."""
    if not attrs["causal"]:
        last = e.add("Less", [back, e.const(g.seq, "s", "int64")])
        return e.reshape(last, (g.batch, 1, 1, g.present))
    steps = e.const(np.arange(g.seq).reshape(-1, 1) - np.arange(g.present), "distance", "int64")
    distance = e.add("Add", [e.reshape(start, (g.batch, 1, 1, 1)), steps])
    allowed = e.add("GreaterOrEqual", [distance, e.const(0, "zero", "int64")])
    if attrs["local_window_size"] > 0:
        window = e.const(attrs["local_window_size"], "window", "int64")
        allowed = e.add("And", [allowed, e.add("Less", [distance, window])])
    return allowed


def _split_qkv(e: Emitter, named: dict, g: _Geometry) -> tuple[str, str, str]:
    q = named["query"]
    if not g.packed:
        return q, named["key"], named["value"]
    cuts = (0, g.heads * g.head, (g.heads + g.kv_heads) * g.head, e.shape(q)[2])
    return tuple(e.slice(q, 2, lo, hi) for lo, hi in zip(cuts, cuts[1:], strict=False))


def _rotate(e: Emitter, attrs: dict, x: str, pos: str, named: dict, heads: int) -> str:
    """onnxruntime's RotaryEmbedding of the [B, S, heads * head] `x` at positions `pos`."""
    rot = {"interleaved": attrs["rotary_interleaved"], "num_heads": heads}
    return e.add(MS + "RotaryEmbedding", [x, pos, named["cos_cache"], named["sin_cache"]], rot)


def _present(e: Emitter, g: _Geometry, new: str, past: str, where: tuple, out: str) -> str:
    """The present cache [B, kv, present, head]: the past's rows before `start`, the new rows
    from `start`, zeros after; `where` holds the row numbers [1, present], each row's index
    back from `start` [B, present] and `start` [B, 1]."""
    rows, back, start = where
    shape = (g.batch, g.kv_heads, g.present, g.head)
    index = e.add("Clip", [back, e.const(0, "lo", "int64"), e.const(g.seq - 1, "hi", "int64")])
    index = e.add("Expand", [e.reshape(index, (g.batch, 1, g.present, 1)), e.ints(shape, "shape")])
    placed = e.add("GatherElements", [new, index], {"axis": 2})
    is_new = e.add("And", [e.add("GreaterOrEqual", [back, e.const(0, "zero", "int64")]),
                           e.add("Less", [back, e.const(g.seq, "s", "int64")])])  # fmt: skip
    zero = e.const(0, "zero", e.dtype(new))
    old = zero
    if past and g.past:
        kept = e.add("Less", [rows, start])
        padded = past
        if g.present > g.past:
            pads = e.ints([0, 0, 0, 0, 0, 0, g.present - g.past, 0], "pads")
            padded = e.add("Pad", [past, pads])
        old = e.add("Where", [e.reshape(kept, (g.batch, 1, g.present, 1)), padded, zero])
    mask = e.reshape(is_new, (g.batch, 1, g.present, 1))
    return e.add("Where", [mask, placed, old], outputs=[out] if out else None)


def _probs(e: Emitter, attrs: dict, scores: str, sink: str, g: _Geometry) -> str:
    """Softmax over the keys; with smooth_softmax or head_sink one more logit (0, or the
    head's sink) joins the sum and is dropped after."""
    if not sink and not attrs["smooth_softmax"]:
        return _softmax(e, scores)
    dtype = e.dtype(scores)
    extra = (
        e.reshape(sink, (1, g.heads, 1, 1))
        if sink
        else e.const(np.zeros((1, 1, 1, 1)), "sink", dtype)
    )
    extra = e.add("Expand", [extra, e.ints([g.batch, g.heads, g.seq, 1], "shape")])
    probs = _softmax(e, e.add("Concat", [scores, extra], {"axis": 3}))
    return e.slice(probs, 3, 0, g.present)


register(
    _GQA,
    Pattern.OPAQUE,
    _gqa_type,
    _gqa,
    inputs=(7, len(_INPUTS)),
    optional_inputs=(1, 2, 3, 4),
    outputs=(1, 3),
    attrs=_ATTRS,
    expand=_expand_gqa,
)

__all__: list[str] = []

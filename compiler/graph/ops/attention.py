"""Attention (ONNX opsets 23 to 25): scaled dot-product attention over 4-D [B, H, S, D] or 3-D
[B, S, H * D] inputs, with a key/value cache (past_key, past_value -> present_key,
present_value), grouped-query heads, a softcap, an attention mask, causal and sliding-window
masks and per-batch valid lengths (`nonpad_kv_seqlen`). A composite of MatMul, Softmax and
elementwise ops; its numpy kernel is written from the ONNX spec, which the onnx reference
implements as:

    scores = (Q * sqrt(scale)) @ (K * sqrt(scale))^T;  scores = c * tanh(scores / c)  (softcap c)
    probs = softmax(scores + bias), zero on rows whose bias is all -inf;  Y = probs @ V

where the bias sums the attention mask (a boolean one as 0 / -inf, one shorter than the keys
padded with -inf) and -inf wherever the causal mask (key j <= query i + offset), the window
(offset + i - left <= j <= offset + i + right) or the padding mask (j < nonpad_kv_seqlen[b])
forbids a key. The offset is the past length, or per batch `nonpad_kv_seqlen[b] - q_len`.
`qk_matmul_output` is the (softcapped) scores for modes 0 and 1, the biased scores for mode 2
and the probabilities for mode 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ....runtime.dtypes import is_floating
from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter

# ONNX TensorProto data types that softmax_precision may name (bfloat16 is not built)
_PRECISION = {1: "float32", 10: "float16", 11: "float64"}
_MODES = (0, 1, 2, 3)


@dataclass(frozen=True)
class _Geometry:
    rank: int  # of Q, K and V: 3 or 4
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    past: int  # cached keys before K's
    total: int  # keys attended: past + K's
    head: int  # Q's and K's head size
    v_head: int


def _split_heads(shape: tuple[int, ...], heads: Any, what: str) -> tuple[int, int]:
    if not isinstance(heads, int) or heads < 1 or shape[2] % heads:
        raise ValueError(
            f"Attention {what} must be a positive divisor of the 3-D input's hidden size "
            f"{shape[2]}, not {heads!r}"
        )
    return heads, shape[2] // heads


def _geometry(attrs: dict[str, Any], types: list) -> _Geometry:
    q, k, v = (t.shape for t in types[:3])
    past_k, past_v = (types[i] if len(types) > i else None for i in (4, 5))
    if not len(q) == len(k) == len(v) or len(q) not in (3, 4):
        raise ValueError(
            f"Attention Q, K and V must all be 3-D or all 4-D, not {list(q)}, {list(k)}, {list(v)}"
        )
    if len(q) == 3:
        q_heads, head = _split_heads(q, attrs.get("q_num_heads"), "q_num_heads")
        kv_heads, k_head = _split_heads(k, attrs.get("kv_num_heads"), "kv_num_heads")
        v_head = v[2] // kv_heads
        if v[2] % kv_heads:
            raise ValueError(f"Attention kv_num_heads {kv_heads} must divide V's size {v[2]}")
        q_len, kv_len = q[1], k[1]
    else:
        q_heads, head, kv_heads, k_head, v_head = q[1], q[3], k[1], k[3], v[3]
        for key, n in (("q_num_heads", q_heads), ("kv_num_heads", kv_heads)):
            if attrs.get(key) not in (None, n):
                raise ValueError(f"Attention {key} must be the 4-D input's {n}, not {attrs[key]}")
        if v[1] != kv_heads:
            raise ValueError(f"Attention V must have K's {kv_heads} heads, not {v[1]}")
        q_len, kv_len = q[2], k[2]
    if k[0] != q[0] or v[0] != q[0] or v[len(v) - 2] != k[len(k) - 2]:
        raise ValueError(
            f"Attention K and V must match Q's batch and each other's length: {k}, {v}"
        )
    if k_head != head:
        raise ValueError(f"Attention K's head size must be Q's {head}, not {k_head}")
    if q_heads % kv_heads:
        raise ValueError(f"Attention kv heads {kv_heads} must divide the q heads {q_heads}")
    past = 0
    if (past_k is None) != (past_v is None):
        raise ValueError("Attention past_key and past_value must be given together")
    if past_k is not None:
        past = past_k.shape[2] if len(past_k.shape) == 4 else -1
        for ty, size, what in ((past_k, head, "past_key"), (past_v, v_head, "past_value")):
            if ty.shape != (q[0], kv_heads, past, size):
                raise ValueError(
                    f"Attention {what} must have shape {[q[0], kv_heads, past, size]}, "
                    f"not {list(ty.shape)}"
                )
    return _Geometry(len(q), q[0], q_heads, kv_heads, q_len, past, past + kv_len, head, v_head)


def _attention_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    q = types[0]
    if not is_floating(q.dtype):
        raise ValueError(f"Attention Q must be a floating-point tensor, not {q.dtype}")
    g = _geometry(attrs, types)
    mask = types[3] if len(types) > 3 else None
    nonpad = types[6] if len(types) > 6 else None
    if nonpad is not None:
        if g.past or (len(types) > 4 and types[4] is not None):
            raise ValueError("Attention nonpad_kv_seqlen cannot be combined with past_key")
        if nonpad.shape != (g.batch,):
            raise ValueError(
                f"Attention nonpad_kv_seqlen must have shape [{g.batch}], not {list(nonpad.shape)}"
            )
    if mask is not None:
        _check_mask(mask.shape, g)
    if attrs["qk_matmul_output_mode"] not in _MODES:
        raise ValueError(
            f"Attention qk_matmul_output_mode must be one of {_MODES}, not "
            f"{attrs['qk_matmul_output_mode']!r}"
        )
    precision = attrs.get("softmax_precision")
    if precision is not None and precision not in _PRECISION:
        raise ValueError(
            f"Attention softmax_precision must be one of {sorted(_PRECISION)} (float, float16, "
            f"double), not {precision!r}"
        )
    for key in ("left_window_size", "right_window_size"):
        if attrs[key] < -1:
            raise ValueError(f"Attention {key} must be -1 or non-negative, not {attrs[key]}")
    if attrs["is_causal"] not in (0, 1):
        raise ValueError(f"Attention is_causal must be 0 or 1, not {attrs['is_causal']!r}")
    if g.rank == 4:
        y = (g.batch, g.q_heads, g.q_len, g.v_head)
    else:
        y = (g.batch, g.q_len, g.q_heads * g.v_head)
    dv = types[2].dtype
    return [
        TensorType(y, q.dtype),
        TensorType((g.batch, g.kv_heads, g.total, g.head), q.dtype),
        TensorType((g.batch, g.kv_heads, g.total, g.v_head), dv),
        TensorType((g.batch, g.q_heads, g.q_len, g.total), q.dtype),
    ]


def _check_mask(shape: tuple[int, ...], g: _Geometry) -> None:
    """A mask broadcasts to [B, Hq, q_len, total] once its last axis is padded to `total`."""
    full = (g.batch, g.q_heads, g.q_len, g.total)
    padded = (*shape[:-1], g.total) if shape else shape
    if (
        not shape
        or len(shape) > 4
        or shape[-1] > g.total
        or any(s not in (1, f) for s, f in zip(padded[::-1], full[::-1], strict=False))
    ):
        raise ValueError(
            f"Attention attn_mask shape {list(shape)} must broadcast to {list(full)} (its last "
            f"axis at most {g.total})"
        )


def _scale(attrs: dict[str, Any], head: int, dtype: str) -> Any:
    scale = attrs.get("scale")
    scale = 1.0 / math.sqrt(head) if scale is None else scale
    return np.dtype(dtype).type(math.sqrt(scale))


def _distance(g: _Geometry, offset: np.ndarray) -> np.ndarray:
    """`offset + i - j` for query i and key j: [q, total], or [B, 1, q, total] for per-batch
    offsets (shape [B, 1, 1, 1])."""
    i = np.arange(g.q_len).reshape(-1, 1)
    j = np.arange(g.total).reshape(1, -1)
    return offset + (i - j)


def _allowed(attrs: dict[str, Any], distance: np.ndarray) -> np.ndarray | None:
    """Where the causal and window masks allow a key (numpy, on `_distance`'s values)."""
    parts = []
    if attrs["is_causal"]:
        parts.append(distance >= 0)
    if attrs["left_window_size"] >= 0:
        parts.append(distance <= attrs["left_window_size"])
    if attrs["right_window_size"] >= 0:
        parts.append(distance >= -attrs["right_window_size"])
    if not parts:
        return None
    return np.logical_and.reduce(parts)


def _uses_frontier(attrs: dict[str, Any]) -> bool:
    return (
        bool(attrs["is_causal"]) or max(attrs["left_window_size"], attrs["right_window_size"]) >= 0
    )


def attention(
    attrs: dict[str, Any],
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: Any = None,
    past_k: Any = None,
    past_v: Any = None,
    nonpad: Any = None,
) -> tuple[np.ndarray, ...]:
    """numpy: (Y, present_key, present_value, qk_matmul_output)."""
    types = [TensorType(a.shape, str(a.dtype)) if a is not None else None
             for a in (q, k, v, mask, past_k, past_v)]  # fmt: skip
    g = _geometry(attrs, types)
    if g.rank == 3:
        q, k, v = (
            a.reshape(g.batch, a.shape[1], n, -1).transpose(0, 2, 1, 3)
            for a, n in ((q, g.q_heads), (k, g.kv_heads), (v, g.kv_heads))
        )
    if past_k is not None:
        k, v = np.concatenate([past_k, k], axis=2), np.concatenate([past_v, v], axis=2)
    present_k, present_v = k, v
    reps = g.q_heads // g.kv_heads
    k, v = np.repeat(k, reps, axis=1), np.repeat(v, reps, axis=1)
    s = _scale(attrs, g.head, q.dtype)
    scores = np.matmul(q * s, (k * s).transpose(0, 1, 3, 2))
    if attrs["softcap"] > 0:
        c = attrs["softcap"]
        scores = (c * np.tanh(scores / c)).astype(q.dtype)
    bias = np.zeros((g.q_len, g.total), q.dtype)
    if mask is not None:
        if mask.dtype == np.bool_:
            mask = np.where(mask, 0, -np.inf).astype(q.dtype)
        pad = [(0, 0)] * (mask.ndim - 1) + [(0, g.total - mask.shape[-1])]
        bias = bias + np.pad(mask.astype(q.dtype), pad, constant_values=-np.inf)
    if nonpad is not None:
        offset = (nonpad.astype(np.int64) - g.q_len).reshape(-1, 1, 1, 1)
    else:
        offset = np.int64(g.past)
    allowed = _allowed(attrs, _distance(g, offset))
    if nonpad is not None:
        valid = np.arange(g.total) < nonpad.reshape(-1, 1, 1, 1)
        allowed = valid if allowed is None else allowed & valid
    if allowed is not None:
        bias = bias + np.where(allowed, 0, -np.inf).astype(q.dtype)
    biased = scores + bias
    dtype = _PRECISION.get(attrs.get("softmax_precision"), q.dtype)
    z = biased.astype(dtype)
    top = z.max(axis=-1, keepdims=True)
    ez = np.exp(z - np.where(np.isneginf(top), 0, top))
    total = ez.sum(axis=-1, keepdims=True)
    probs = ez / np.where(total == 0, 1, total)
    probs = np.where(np.isneginf(bias.max(axis=-1, keepdims=True)), 0, probs).astype(q.dtype)
    mode = attrs["qk_matmul_output_mode"]
    qk = {2: biased, 3: probs}.get(mode, scores).astype(q.dtype)
    y = np.matmul(probs, v).astype(q.dtype)
    if g.rank == 3:
        y = y.transpose(0, 2, 1, 3).reshape(g.batch, g.q_len, -1)
    return y, present_k, present_v, qk


def _heads_first(e: Emitter, value: str, heads: int) -> str:
    """[B, S, H * D] -> [B, H, S, D]."""
    b, s, hidden = e.shape(value)
    return e.transpose(e.reshape(value, [b, s, heads, hidden // heads]), (0, 2, 1, 3))


def _repeat_heads(e: Emitter, value: str, reps: int) -> str:
    """Each of the [B, H, S, D] heads `reps` times in a row (np.repeat along axis 1)."""
    if reps == 1:
        return value
    b, h, s, d = e.shape(value)
    grid = e.add("Unsqueeze", [value, e.ints([2], "axes")])
    grid = e.add("Expand", [grid, e.ints([b, h, reps, s, d], "repeat")])
    return e.reshape(grid, [b, h * reps, s, d])


def _frontier_bias(
    e: Emitter, attrs: dict[str, Any], g: _Geometry, nonpad: str | None
) -> str | None:
    """0 / -inf where the causal, window and padding masks allow / forbid a key: a constant
    [q, total] without `nonpad_kv_seqlen`, else computed from it, [B, 1, q, total]."""
    dtype = e.dtype(e.node.inputs[0])
    if nonpad is None:
        allowed = _allowed(attrs, _distance(g, np.int64(g.past)))
        if allowed is None:
            return None
        return e.const(np.where(allowed, 0, -np.inf), "frontier", dtype)
    per_batch = e.reshape(nonpad, [g.batch, 1, 1, 1])
    parts = [e.add("Less", [e.const(np.arange(g.total, dtype=np.int64), "keys"), per_batch])]
    if _uses_frontier(attrs):
        offset = e.add("Sub", [per_batch, e.const(g.q_len, "q_len", "int64")])
        distance = e.add("Add", [offset, e.const(_distance(g, np.int64(0)), "distance", "int64")])
        zero = e.const(0, "zero", "int64")
        if attrs["is_causal"]:
            parts.append(e.add("GreaterOrEqual", [distance, zero]))
        if attrs["left_window_size"] >= 0:
            left = e.const(attrs["left_window_size"], "left", "int64")
            parts.append(e.add("LessOrEqual", [distance, left]))
        if attrs["right_window_size"] >= 0:
            right = e.const(-attrs["right_window_size"], "right", "int64")
            parts.append(e.add("GreaterOrEqual", [distance, right]))
    allowed = parts[0]
    for part in parts[1:]:
        allowed = e.add("And", [allowed, part])
    zero, ninf = e.const(0, "zero", dtype), e.const(-np.inf, "ninf", dtype)
    return e.add("Where", [allowed, zero, ninf])


def _mask_bias(e: Emitter, mask: str, g: _Geometry) -> str:
    dtype = e.dtype(e.node.inputs[0])
    ninf = e.const(-np.inf, "ninf", dtype)
    if e.dtype(mask) == "bool":
        mask = e.add("Where", [mask, e.const(0, "zero", dtype), ninf])
    elif e.dtype(mask) != dtype:
        mask = e.add("Cast", [mask], {"to": dtype})
    short = g.total - e.shape(mask)[-1]
    if short:
        rank = len(e.shape(mask))
        pads = e.ints([0] * (2 * rank - 1) + [short], "pads")
        mask = e.add("Pad", [mask, pads, ninf])
    return mask


def _softmax(e: Emitter, z: str) -> str:
    """Softmax over the last axis; float16 in float16 steps (`widen_half` would compute the
    Softmax op in float32, which differs from the spec's float16 softmax by an ulp), except
    for the sum, which accumulates in float32 as onnxruntime's does."""
    if e.dtype(z) != "float16":
        return e.add("Softmax", [z], {"axis": -1})
    last = e.ints([-1], "last")
    top = e.add("ReduceMax", [z, last], {"keepdims": 1})
    exp = e.add("Exp", [e.add("Sub", [z, top])])
    return e.add("Div", [exp, e.add("ReduceSum", [exp, last], {"keepdims": 1})])


def _expand_attention(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    attrs = node.attr_dict
    ins = [*node.inputs, *[""] * (7 - len(node.inputs))]
    q, k, v, mask, past_k, past_v, nonpad = (i or None for i in ins)
    g = _geometry(attrs, [b.types[i] if i else None for i in ins])
    dtype = e.dtype(q)
    if g.rank == 3:
        q, k, v = (
            _heads_first(e, x, n) for x, n in ((q, g.q_heads), (k, g.kv_heads), (v, g.kv_heads))
        )
    if past_k is not None:
        k = e.add("Concat", [past_k, k], {"axis": 2})
        v = e.add("Concat", [past_v, v], {"axis": 2})
    outs = [*node.outputs, *[""] * (4 - len(node.outputs))]
    for value, name in ((k, outs[1]), (v, outs[2])):
        if name:
            e.rename(value, name)
    reps = g.q_heads // g.kv_heads
    k, v = _repeat_heads(e, k, reps), _repeat_heads(e, v, reps)
    s = e.const(_scale(attrs, g.head, dtype), "scale", dtype)
    k_t = e.transpose(e.add("Mul", [k, s]), (0, 1, 3, 2))
    scores = e.add("MatMul", [e.add("Mul", [q, s]), k_t])
    if attrs["softcap"] > 0:
        c = e.const(attrs["softcap"], "softcap", dtype)
        scores = e.add("Mul", [e.add("Tanh", [e.add("Div", [scores, c])]), c])
    pieces = [_mask_bias(e, mask, g)] if mask is not None else []
    if (frontier := _frontier_bias(e, attrs, g, nonpad)) is not None:
        pieces.append(frontier)
    bias = pieces[0] if pieces else None
    if len(pieces) == 2:
        bias = e.add("Add", pieces)
    biased = scores if bias is None else e.add("Add", [scores, bias])
    precision = _PRECISION.get(attrs.get("softmax_precision"), dtype)
    z = biased if precision == dtype else e.add("Cast", [biased], {"to": precision})
    probs = _softmax(e, z)
    if bias is not None:  # rows with no key allowed: zeros, not softmax's NaN
        top = e.add("ReduceMax", [bias, e.ints([-1], "last")], {"keepdims": 1})
        none = e.add("Equal", [top, e.const(-np.inf, "ninf", dtype)])
        probs = e.add("Where", [none, e.const(0, "zero", precision), probs])
    if precision != dtype:
        probs = e.add("Cast", [probs], {"to": dtype})
    if outs[3]:
        e.rename({2: biased, 3: probs}.get(attrs["qk_matmul_output_mode"], scores), outs[3])
    y = e.add("MatMul", [probs, v])
    if g.rank == 3:
        y = e.transpose(y, (0, 2, 1, 3))
        y = e.add("Reshape", [y, e.ints([g.batch, g.q_len, g.q_heads * g.v_head], "shape")])
    e.rename(y, outs[0])


register(
    "Attention",
    Pattern.OPAQUE,
    _attention_type,
    attention,
    inputs=(3, 7),
    outputs=(1, 4),
    attrs={
        "is_causal": 0,
        "kv_num_heads": None,
        "q_num_heads": None,
        "qk_matmul_output_mode": 0,
        "scale": None,
        "softcap": 0.0,
        "softmax_precision": None,
        "left_window_size": -1,
        "right_window_size": -1,
    },
    expand=_expand_attention,
)

__all__ = ["attention"]

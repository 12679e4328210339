"""Ops that carry a state from one call of a decoding loop to the next (opset 27), as
state-space and linear-attention language models use: CausalConvWithState (a depthwise causal
1-D convolution whose last k - 1 inputs are the state) and LinearAttention (a [d_k, d_v] state
per head, decayed, corrected and added to at each step). Both are composites; each also has its
own numpy kernel written from the ONNX spec.

LinearAttention's recurrence is unrolled over the sequence's steps at compile time (a decoding
step has one; a prefill as many as its prompt), each step a few small MatMuls in float32:

    S = S * exp(g_t)                    (gated rules; g per head or per key feature)
    v_t = beta_t * (v_t - k_t S)        (delta rules)
    S = S + k_t^T v_t;   o_t = scale * q_t S   (query heads share their group's S)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ....runtime.dtypes import is_floating
from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, UnsupportedOpError, register
from .emit import Emitter

# ---- CausalConvWithState --------------------------------------------------------------------

_ACTIVATIONS = ("none", "silu", "swish")


def _conv_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x, w = types[:2]
    bias, past = (types[i] if len(types) > i else None for i in (2, 3))
    if not is_floating(x.dtype):
        raise ValueError(f"CausalConvWithState input must be floating-point, not {x.dtype}")
    if len(x.shape) != 3:
        raise ValueError(f"CausalConvWithState input must be [N, C, L], not {list(x.shape)}")
    n, c, _ = x.shape
    if len(w.shape) != 3 or w.shape[:2] != (c, 1) or w.shape[2] < 1:
        raise ValueError(f"CausalConvWithState weight must be [{c}, 1, k], not {list(w.shape)}")
    k = w.shape[2]
    if bias is not None and bias.shape != (c,):
        raise ValueError(f"CausalConvWithState bias must be [{c}], not {list(bias.shape)}")
    if past is not None and past.shape != (n, c, k - 1):
        raise ValueError(
            f"CausalConvWithState past_state must be {[n, c, k - 1]}, not {list(past.shape)}"
        )
    if attrs["activation"] not in _ACTIVATIONS:
        raise ValueError(
            f"CausalConvWithState activation must be one of {', '.join(_ACTIVATIONS)}, not "
            f"{attrs['activation']!r}"
        )
    return [x, TensorType((n, c, k - 1), x.dtype)]


def _silu32(y: np.ndarray) -> np.ndarray:
    z = y.astype(np.float32)
    return (z / (1 + np.exp(-z))).astype(y.dtype)


def causal_conv(
    attrs: dict[str, Any], x: np.ndarray, w: np.ndarray, bias: Any = None, past: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """numpy: (output, the last k - 1 inputs) of a depthwise causal convolution."""
    n, c, length = x.shape
    k = w.shape[2]
    past = np.zeros((n, c, k - 1), x.dtype) if past is None else past
    padded = np.concatenate([past, x], axis=2).astype(np.float64)
    y = sum(padded[:, :, j : j + length] * w[None, :, 0, j, None] for j in range(k))
    if bias is not None:
        y = y + bias[None, :, None]
    y = y.astype(x.dtype)
    if attrs["activation"] != "none":
        y = _silu32(y)
    return y, padded[:, :, length:].astype(x.dtype)


def _expand_conv(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, w = node.inputs[:2]
    bias, past = (
        node.inputs[i] if len(node.inputs) > i and node.inputs[i] else None for i in (2, 3)
    )
    (n, c, length), k, dtype = e.shape(x), e.shape(w)[2], e.dtype(x)
    padded = x
    if k > 1:
        if past is None:
            past = e.const(np.zeros((n, c, k - 1)), "zeros", dtype)
        padded = e.add("Concat", [past, x], {"axis": 2})
    inputs = [padded, w] + ([bias] if bias else [])
    y = e.add("Conv", inputs, {"group": c, "kernel_shape": [k]})
    if node.attr_dict["activation"] != "none":  # in float32, as the spec's reference
        wide = y if dtype == "float32" else e.add("Cast", [y], {"to": "float32"})
        y = e.add("Mul", [wide, e.add("Sigmoid", [wide])])
        y = y if dtype == "float32" else e.add("Cast", [y], {"to": dtype})
    e.rename(y, node.outputs[0])
    if len(node.outputs) > 1 and node.outputs[1]:
        e.rename(e.slice(padded, 2, length, length + k - 1), node.outputs[1])


register(
    "CausalConvWithState",
    Pattern.OPAQUE,
    _conv_type,
    causal_conv,
    inputs=(2, 4),
    outputs=(1, 2),
    attrs={"activation": "none"},
    expand=_expand_conv,
)


# ---- LinearAttention ------------------------------------------------------------------------

_RULES = ("linear", "gated", "delta", "gated_delta")
# Steps unrolled at most (a few nodes each): a decode step has one, a short prefill a few
# hundred; a longer sequence is refused by name rather than compiled for minutes.
MAX_STEPS = 256


def _linear_geometry(attrs: dict[str, Any], types: list) -> tuple[int, ...]:
    """(batch, steps, q heads, kv heads, d_k, d_v) of a LinearAttention node's inputs."""
    q, k, v = (t.shape for t in types[:3])
    hq, hkv = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
    if not isinstance(hq, int) or not isinstance(hkv, int) or hkv < 1 or hq < 1 or hq % hkv:
        raise ValueError(
            f"LinearAttention q_num_heads and kv_num_heads must be given, q_num_heads a positive "
            f"multiple of kv_num_heads, not {hq!r} and {hkv!r}"
        )
    if len(q) != 3 or len(k) != 3 or len(v) != 3:
        raise ValueError(
            f"LinearAttention query, key and value must be [B, T, H * D], not {list(q)}, "
            f"{list(k)}, {list(v)}"
        )
    if q[2] % hq or v[2] % hkv or k[:2] != q[:2] or v[:2] != q[:2] or k[2] * hq != q[2] * hkv:
        raise ValueError(
            f"LinearAttention query {list(q)}, key {list(k)} and value {list(v)} must share "
            f"batch and steps, and split into {hq} and {hkv} heads of one key size"
        )
    return q[0], q[1], hq, hkv, q[2] // hq, v[2] // hkv


def _linear_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    q = types[0]
    if not is_floating(q.dtype):
        raise ValueError(f"LinearAttention query must be floating-point, not {q.dtype}")
    b, t, hq, hkv, dk, dv = _linear_geometry(attrs, types)
    if t > MAX_STEPS:
        raise UnsupportedOpError(
            [(f"LinearAttention over {t} steps (unrolled up to {MAX_STEPS})", "?", None)]
        )
    past, decay, beta = (types[i] if len(types) > i else None for i in (3, 4, 5))
    rule = attrs["update_rule"]
    if rule not in _RULES:
        raise ValueError(
            f"LinearAttention update_rule must be one of {', '.join(_RULES)}, not {rule!r}"
        )
    gated, delta = "gated" in rule, "delta" in rule
    if gated != (decay is not None) or delta != (beta is not None):
        raise ValueError(
            f"LinearAttention update_rule {rule!r} takes {'a' if gated else 'no'} decay and "
            f"{'a' if delta else 'no'} beta input"
        )
    if decay is not None and decay.shape not in ((b, t, hkv), (b, t, hkv * dk)):
        raise ValueError(
            f"LinearAttention decay must be {[b, t, hkv]} or {[b, t, hkv * dk]}, not "
            f"{list(decay.shape)}"
        )
    if beta is not None and beta.shape not in ((b, t, hkv), (b, t, 1)):
        raise ValueError(
            f"LinearAttention beta must be {[b, t, hkv]} or {[b, t, 1]}, not {list(beta.shape)}"
        )
    if past is not None and past.shape != (b, hkv, dk, dv):
        raise ValueError(
            f"LinearAttention past_state must be {[b, hkv, dk, dv]}, not {list(past.shape)}"
        )
    state = past.dtype if past is not None else q.dtype
    return [TensorType((b, t, hq * dv), q.dtype), TensorType((b, hkv, dk, dv), state)]


def _linear_scale(attrs: dict[str, Any], dk: int) -> float:
    return attrs["scale"] or 1.0 / math.sqrt(dk)


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    """[B, T, H * D] -> [B, H, T, D] in float64."""
    b, t, hd = x.shape
    return x.reshape(b, t, heads, hd // heads).transpose(0, 2, 1, 3).astype(np.float64)


def linear_attention(
    attrs: dict[str, Any],
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    past: Any = None,
    decay: Any = None,
    beta: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """numpy: (output [B, T, Hq * d_v], present_state [B, Hkv, d_k, d_v])."""
    types = [TensorType(a.shape, str(a.dtype)) for a in (q, k, v)]
    b, t, hq, hkv, dk, dv = _linear_geometry(attrs, types)
    q4, k4, v4 = _heads(q, hq), _heads(k, hkv), _heads(v, hkv)
    g4 = None if decay is None else _heads(decay, hkv)  # [B, H, T, 1 or d_k]
    beta4 = None if beta is None else _heads(beta, beta.shape[2])  # [B, H or 1, T, 1]
    state = np.zeros((b, hkv, dk, dv)) if past is None else past.astype(np.float64)
    out = np.zeros((b, hq, t, dv))
    for i in range(t):
        k_t, v_t = k4[:, :, i, :], v4[:, :, i, :]
        if g4 is not None:
            state = state * np.exp(g4[:, :, i, :])[..., None]
        if beta4 is not None:
            v_t = beta4[:, :, i, :] * (v_t - np.einsum("bhdm,bhd->bhm", state, k_t))
        state = state + k_t[..., :, None] * v_t[..., None, :]
        shared = np.repeat(state, hq // hkv, axis=1)
        out[:, :, i, :] = np.einsum("bhd,bhdm->bhm", q4[:, :, i, :], shared)
    out = _linear_scale(attrs, dk) * out
    y = out.transpose(0, 2, 1, 3).reshape(b, t, hq * dv).astype(q.dtype)
    return y, state.astype(q.dtype if past is None else past.dtype)


def _expand_linear(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    attrs = node.attr_dict
    ins = [*node.inputs, *[""] * (6 - len(node.inputs))]
    types = [b.types[i] if i else None for i in ins]
    batch, t, hq, hkv, dk, dv = _linear_geometry(attrs, types)
    q, k, v, past, decay, beta = (i or None for i in ins)

    def heads(x: str, n: int) -> str:  # [B, T, H * D] -> [B, H, T, D], float32
        x = x if e.dtype(x) == "float32" else e.add("Cast", [x], {"to": "float32"})
        size = e.shape(x)[2] // n
        return e.transpose(e.reshape(x, [batch, t, n, size]), (0, 2, 1, 3))

    q4, k4, v4 = heads(q, hq), heads(k, hkv), heads(v, hkv)
    g4 = None if decay is None else heads(decay, hkv)
    beta4 = None if beta is None else heads(beta, e.shape(beta)[2])
    if past is None:
        state = e.const(np.zeros((batch, hkv, dk, dv)), "state", "float32")
    else:
        state = past if e.dtype(past) == "float32" else e.add("Cast", [past], {"to": "float32"})
    steps = []
    for i in range(t):
        k_t, v_t = e.slice(k4, 2, i, i + 1), e.slice(v4, 2, i, i + 1)  # [B, H, 1, D]
        if g4 is not None:  # [B, H, 1, 1 or d_k] -> a factor per state row
            g_t = e.transpose(e.slice(g4, 2, i, i + 1), (0, 1, 3, 2))
            state = e.add("Mul", [state, e.add("Exp", [g_t])])
        if beta4 is not None:
            retrieved = e.add("MatMul", [k_t, state])
            v_t = e.add("Mul", [e.slice(beta4, 2, i, i + 1), e.add("Sub", [v_t, retrieved])])
        outer = e.add("MatMul", [e.transpose(k_t, (0, 1, 3, 2)), v_t])
        state = e.add("Add", [state, outer])
        shared = _repeat_state(e, state, hq // hkv)
        steps.append(e.add("MatMul", [e.slice(q4, 2, i, i + 1), shared]))
    out = steps[0] if t == 1 else e.add("Concat", steps, {"axis": 2})
    out = e.add("Mul", [out, e.const(_linear_scale(attrs, dk), "scale", "float32")])
    y = e.reshape(e.transpose(out, (0, 2, 1, 3)), [batch, t, hq * dv])
    dtype = e.dtype(q)
    e.rename(y if dtype == "float32" else e.add("Cast", [y], {"to": dtype}), node.outputs[0])
    if len(node.outputs) > 1 and node.outputs[1]:
        kept = e.dtype(past) if past is not None else dtype
        state = state if kept == "float32" else e.add("Cast", [state], {"to": kept})
        e.rename(state, node.outputs[1])


def _repeat_state(e: Emitter, state: str, reps: int) -> str:
    """Each head's [d_k, d_v] state `reps` times in a row (the query heads of its group)."""
    if reps == 1:
        return state
    b, h, dk, dv = e.shape(state)
    grid = e.add(
        "Expand",
        [e.add("Unsqueeze", [state, e.ints([2], "axes")]), e.ints([b, h, reps, dk, dv], "repeat")],
    )
    return e.reshape(grid, [b, h * reps, dk, dv])


register(
    "LinearAttention",
    Pattern.OPAQUE,
    _linear_type,
    linear_attention,
    inputs=(3, 6),
    outputs=(1, 2),
    attrs={
        "chunk_size": 64,  # a tuning hint: no effect on the result
        "kv_num_heads": None,
        "q_num_heads": None,
        "scale": 0.0,
        "update_rule": "gated_delta",
    },
    expand=_expand_linear,
)

__all__ = ["causal_conv", "linear_attention"]

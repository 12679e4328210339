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

from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter

# ---- CausalConvWithState --------------------------------------------------------------------

_ACTIVATIONS = ("none", "silu", "swish")


def _conv_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x, w = types[:2]
    bias, past = (types[i] if len(types) > i else None for i in (2, 3))
    if not np.issubdtype(np.dtype(x.dtype), np.floating):
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

"""The ONNX standard domain's transformer ops (opsets 23 to 25): Swish, RMSNormalization,
RotaryEmbedding and Attention. All are composites (`expand`, run by
`passes.expand_composites`) of MatMul, Softmax, Reduce*, Slice, Concat and elementwise ops;
each also has its own numpy kernel written from the ONNX spec (the reference executor's).

Attention follows the onnx reference: Q and K are each scaled by the square root of the scale,
a softcap (`c * tanh(s / c)`) comes before the additive bias, the bias sums the attention mask
(a boolean one as 0 / -inf, a short one padded with -inf), the causal and sliding-window masks
(offset by the past length, or per batch by `nonpad_kv_seqlen - q_len`) and the padding mask,
and a query row whose bias is all -inf gets zero probabilities (so Y is zero there).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....runtime.dtypes import is_floating
from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter
from .shape import normalize_axis


def _floating(op: str, ty: TensorType, what: str = "input") -> None:
    if not is_floating(ty.dtype):
        raise ValueError(f"{op} {what} must be a floating-point tensor, not {ty.dtype}")


# ---- Swish ----------------------------------------------------------------------------------


def _swish_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    _floating("Swish", types[0])
    return [types[0]]


def swish(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """`x * sigmoid(alpha * x)`."""
    z = x.astype(np.float64)
    return (z / (1.0 + np.exp(-attrs["alpha"] * z))).astype(x.dtype)


def _expand_swish(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    (x,) = node.inputs
    scaled = e.add("Mul", [x, e.const(node.attr_dict["alpha"], "alpha", e.dtype(x))])
    e.add("Mul", [x, e.add("Sigmoid", [scaled])], outputs=[node.outputs[0]])


register("Swish", Pattern.OPAQUE, _swish_type, swish, attrs={"alpha": 1.0}, expand=_expand_swish)


# ---- RMSNormalization -----------------------------------------------------------------------


def _rms_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x, scale = types
    _floating("RMSNormalization", x)
    axis = normalize_axis(attrs["axis"], len(x.shape), "RMSNormalization axis")
    if attrs["stash_type"] != 1:
        raise ValueError(
            f"RMSNormalization stash_type must be 1 (float32 statistics), not "
            f"{attrs['stash_type']!r}"
        )
    tail = x.shape[axis:]
    if len(scale.shape) > len(tail) or any(
        s not in (1, t) for s, t in zip(scale.shape[::-1], tail[::-1], strict=False)
    ):
        raise ValueError(
            f"RMSNormalization scale shape {list(scale.shape)} must broadcast to the normalized "
            f"shape {list(tail)}"
        )
    return [x]


def rms_norm(attrs: dict[str, Any], x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """`x / sqrt(mean(x^2 over axis..) + epsilon) * scale`."""
    axes = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    z = x.astype(np.float64)
    rms = np.sqrt((z * z).mean(axis=axes, keepdims=True) + attrs["epsilon"])
    return (z / rms * scale).astype(x.dtype)


def _expand_rms(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, scale = node.inputs
    rank, dtype = len(e.shape(x)), e.dtype(x)
    axes = e.ints(range(node.attr_dict["axis"] % rank, rank), "axes")
    mean = e.add("ReduceMean", [e.add("Mul", [x, x]), axes], {"keepdims": 1})
    eps = e.const(node.attr_dict["epsilon"], "epsilon", dtype)
    rms = e.add("Sqrt", [e.add("Add", [mean, eps])])
    e.add("Mul", [e.add("Div", [x, rms]), scale], outputs=[node.outputs[0]])


register(
    "RMSNormalization",
    Pattern.OPAQUE,
    _rms_type,
    rms_norm,
    inputs=(2, 2),
    attrs={"axis": -1, "epsilon": 1e-5, "stash_type": 1},
    expand=_expand_rms,
)


# ---- RotaryEmbedding ------------------------------------------------------------------------


def _rotary_geometry(attrs: dict[str, Any], shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(heads, head size, rotated size) of a RotaryEmbedding input: 4-D [B, H, S, D], or 3-D
    [B, S, H * D] with the `num_heads` attribute."""
    if len(shape) == 4:
        heads, size = shape[1], shape[3]
    elif len(shape) == 3:
        heads = attrs.get("num_heads")
        if not heads or heads < 1 or shape[2] % heads:
            raise ValueError(
                f"RotaryEmbedding num_heads must be given for a 3-D input and divide its hidden "
                f"size {shape[2]}, not {heads!r}"
            )
        size = shape[2] // heads
    else:
        raise ValueError(f"RotaryEmbedding input must be 3-D or 4-D, not shape {list(shape)}")
    rotated = attrs["rotary_embedding_dim"] or size
    if rotated > size or rotated % 2:
        raise ValueError(
            f"RotaryEmbedding rotary_embedding_dim must be even and at most the head size "
            f"{size}, not {rotated}"
        )
    return heads, size, rotated


def _rotary_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x, cos, sin = types[:3]
    ids = types[3] if len(types) > 3 else None
    _floating("RotaryEmbedding", x)
    _, _, rotated = _rotary_geometry(attrs, x.shape)
    batch, seq = x.shape[0], x.shape[2 if len(x.shape) == 4 else 1]
    want = (None, rotated // 2) if ids is not None else (batch, seq, rotated // 2)
    for ty, what in ((cos, "cos_cache"), (sin, "sin_cache")):
        if len(ty.shape) != len(want) or any(
            w not in (None, s) for w, s in zip(want, ty.shape, strict=True)
        ):
            shown = ["max_position" if w is None else w for w in want]
            raise ValueError(
                f"RotaryEmbedding {what} must have shape {shown}, not {list(ty.shape)}"
            )
    if ids is not None and (ids.shape != (batch, seq) or ids.dtype != "int64"):
        raise ValueError(
            f"RotaryEmbedding position_ids must be int64 of shape {[batch, seq]}, not "
            f"{ids.dtype} {list(ids.shape)}"
        )
    return [x]


def rotary_embedding(
    attrs: dict[str, Any], x: np.ndarray, cos: np.ndarray, sin: np.ndarray, ids: Any = None
) -> np.ndarray:
    """Rotate pairs of each head's first `rotary_embedding_dim` features by the cached angles:
    (x1, x2) -> (cos x1 - sin x2, sin x1 + cos x2), pairs being halves or neighbours."""
    heads, size, rotated = _rotary_geometry(attrs, x.shape)
    z = x.transpose(0, 2, 1, 3) if x.ndim == 4 else x.reshape(*x.shape[:2], heads, size)
    if ids is not None:
        cos, sin = cos[ids], sin[ids]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    part = z[..., :rotated]
    if attrs["interleaved"]:
        x1, x2 = part[..., 0::2], part[..., 1::2]
    else:
        x1, x2 = part[..., : rotated // 2], part[..., rotated // 2 :]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if attrs["interleaved"]:
        turned = np.stack([real, imag], axis=-1).reshape(part.shape)
    else:
        turned = np.concatenate([real, imag], axis=-1)
    out = np.concatenate([turned, z[..., rotated:]], axis=-1).astype(x.dtype)
    return out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(x.shape)


def _expand_rotary(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, cos, sin = node.inputs[:3]
    ids = node.inputs[3] if len(node.inputs) > 3 and node.inputs[3] else None
    shape = e.shape(x)
    heads, size, rotated = _rotary_geometry(node.attr_dict, shape)
    if len(shape) == 4:
        z = e.transpose(x, (0, 2, 1, 3))
    else:
        z = e.reshape(x, [*shape[:2], heads, size])
    if ids is not None:
        cos, sin = (e.add("Gather", [c, ids], {"axis": 0}) for c in (cos, sin))
    cos, sin = (e.add("Unsqueeze", [c, e.ints([2], "axes")]) for c in (cos, sin))
    part = e.slice(z, 3, 0, rotated)
    half = rotated // 2
    if node.attr_dict["interleaved"]:
        pairs = e.reshape(part, [*e.shape(part)[:3], half, 2])
        x1, x2 = e.take(pairs, 4, 0), e.take(pairs, 4, 1)
    else:
        x1, x2 = e.slice(part, 3, 0, half), e.slice(part, 3, half, rotated)
    real = e.add("Sub", [e.add("Mul", [cos, x1]), e.add("Mul", [sin, x2])])
    imag = e.add("Add", [e.add("Mul", [sin, x1]), e.add("Mul", [cos, x2])])
    if node.attr_dict["interleaved"]:
        turned = e.reshape(e.stack([real, imag], 4), e.shape(part))
    else:
        turned = e.add("Concat", [real, imag], {"axis": 3})
    if rotated < size:
        turned = e.add("Concat", [turned, e.slice(z, 3, rotated, size)], {"axis": 3})
    if len(shape) == 4:
        e.add("Transpose", [turned], {"perm": [0, 2, 1, 3]}, outputs=[node.outputs[0]])
    else:
        e.add("Reshape", [turned, e.ints(shape, "shape")], outputs=[node.outputs[0]])


register(
    "RotaryEmbedding",
    Pattern.OPAQUE,
    _rotary_type,
    rotary_embedding,
    inputs=(3, 4),
    attrs={"interleaved": 0, "rotary_embedding_dim": 0, "num_heads": None},
    expand=_expand_rotary,
)


# ---- SwiGLU ---------------------------------------------------------------------------------


def _swiglu_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    a, b = types
    _floating("SwiGLU", a, "A")
    if a.shape != b.shape:
        raise ValueError(
            f"SwiGLU A and B must have one shape, not {list(a.shape)} and {list(b.shape)}"
        )
    return [a]


def swiglu(attrs: dict[str, Any], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`swish(A, alpha) * B`."""
    return (swish(attrs, a).astype(np.float64) * b).astype(a.dtype)


def _expand_swiglu(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, gate = node.inputs
    scaled = e.add("Mul", [x, e.const(node.attr_dict["alpha"], "alpha", e.dtype(x))])
    swished = e.add("Mul", [x, e.add("Sigmoid", [scaled])])
    e.add("Mul", [swished, gate], outputs=[node.outputs[0]])


register("SwiGLU", Pattern.OPAQUE, _swiglu_type, swiglu, inputs=(2, 2), attrs={"alpha": 1.0},
         expand=_expand_swiglu)  # fmt: skip

"""LpPool (opsets 11 and 18: `y = (sum over the window of |x| ** p) ** (1 / p)`) as a composite:
the window sums are a depthwise Conv with an all-ones kernel (zero padding adds nothing, as in
the ONNX definition), so every back-end compiles it with the convolution it already has."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter
from .nn import _pool_pads, _windows, check_pool_same_dilated, window_geometry

_FLOATS = ("bfloat16", "float16", "float32", "float64")
_ATTRS = {
    "auto_pad": "NOTSET",
    "ceil_mode": 0,
    "dilations": None,
    "kernel_shape": None,
    "p": 2,
    "pads": None,
    "strides": None,
}


def _check(attrs: dict[str, Any], x: TensorType) -> None:
    if x.dtype not in _FLOATS:
        raise ValueError(f"LpPool input must be a float type, not {x.dtype}")
    if len(x.shape) < 3:
        raise ValueError(f"LpPool input must have rank 3 or more (N, C, spatial), not {x.shape}")
    if attrs.get("kernel_shape") is None:
        raise ValueError("LpPool attribute kernel_shape must be given")
    if len(attrs["kernel_shape"]) != len(x.shape) - 2:
        raise ValueError(
            f"LpPool attribute kernel_shape must have one value per spatial dim "
            f"({len(x.shape) - 2}), not {list(attrs['kernel_shape'])}"
        )
    if isinstance(attrs["p"], bool) or not isinstance(attrs["p"], int) or attrs["p"] < 1:
        raise ValueError(f"LpPool attribute p must be a positive integer, not {attrs['p']!r}")


def _lp_pool_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    x = types[0]
    _check(attrs, x)
    check_pool_same_dilated(attrs)
    ceil = bool(attrs["ceil_mode"])
    *_, outs = window_geometry(attrs, x.shape[2:], tuple(attrs["kernel_shape"]), ceil)
    return [TensorType((*x.shape[:2], *outs), x.dtype)]


def lp_pool(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """The p-norm of each window (zero padding, ceil_mode's extra end padding included)."""
    kernel, begin, end, extra, strides, dilations, outs = _pool_pads(attrs, x)
    widths = [(b, e + ex) for b, e, ex in zip(begin, end, extra, strict=True)]
    p = attrs["p"]
    xp = np.pad(np.abs(x.astype(np.float64)) ** p, [(0, 0), (0, 0), *widths])
    axes = tuple(range(-len(kernel), 0))
    total = _windows(xp, outs, strides, dilations, kernel).sum(axis=axes)
    return (total ** (1.0 / p)).astype(x.dtype)


def _expand_lp_pool(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, finish = e.float32_input()
    attrs = {**{k: v for k, v in _ATTRS.items() if v is not None}, **node.attr_dict}
    shape, dtype = e.shape(x), e.dtype(x)
    probe = np.broadcast_to(np.zeros((), dtype), shape)
    kernel, begin, end, extra, strides, dilations, _ = _pool_pads(attrs, probe)
    p = attrs["p"]
    powered = e.add("Abs", [x]) if p == 1 else e.add("Mul", [x, x])
    if p > 2:
        powered = e.add("Pow", [e.add("Abs", [x]), e.const(np.array(p, dtype), "p")])
    ones = e.const(np.ones((shape[1], 1, *kernel), dtype), "ones")
    conv_attrs = {
        "group": shape[1],
        "kernel_shape": list(kernel),
        "strides": strides,
        "dilations": dilations,
        "pads": [*begin, *(stop + more for stop, more in zip(end, extra, strict=True))],
    }
    total = e.add("Conv", [powered, ones], conv_attrs)
    if p == 1:
        finish("Identity", [total])
    elif p == 2:
        finish("Sqrt", [total])
    else:
        finish("Pow", [total, e.const(np.array(1.0 / p, dtype), "root")])


register("LpPool", Pattern.OPAQUE, _lp_pool_type, lp_pool, attrs=_ATTRS, expand=_expand_lp_pool)

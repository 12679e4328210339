"""BitCast (opset 26): a tensor's bits read as another dtype of the same width. Between
integer types (and from bool to a byte) that is a same-width Cast, which wraps modulo 2^bits
and so keeps the bits; a composite of that Cast. Reinterpreting float bits as integers or the
reverse has no graph op to build on and is refused by name."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import REQUIRED, Pattern, UnsupportedOpError, register
from .emit import Emitter


def _kind(dtype: str) -> str:
    return "float" if np.issubdtype(np.dtype(dtype), np.floating) else "integer"


def _bitcast_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    source, target = types[0].dtype, attrs["to"]
    if np.dtype(source).itemsize != np.dtype(target).itemsize:
        raise ValueError(
            f"BitCast target must have the input's width ({source}: "
            f"{np.dtype(source).itemsize * 8} bits), not {target}"
        )
    if _kind(source) != _kind(target) and source != target:
        raise UnsupportedOpError([(f"BitCast from {source} to {target} (float bits)", "?", None)])
    if target == "bool" and source != "bool":
        raise UnsupportedOpError([(f"BitCast from {source} to bool", "?", None)])
    return [TensorType(types[0].shape, target)]


def bitcast(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """numpy: the same bytes viewed as `to`."""
    return np.ascontiguousarray(x).view(attrs["to"]).copy()


def _expand_bitcast(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    e.add("Cast", [node.inputs[0]], {"to": node.attr_dict["to"]}, outputs=[node.outputs[0]])


register("BitCast", Pattern.OPAQUE, _bitcast_type, bitcast, attrs={"to": REQUIRED},
         expand=_expand_bitcast)  # fmt: skip

__all__ = ["bitcast"]

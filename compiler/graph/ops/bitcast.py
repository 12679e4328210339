"""BitCast (opset 26): a tensor's bits read as another dtype of the same width. Between
integer types (and from bool to a byte) that is a same-width Cast, which wraps modulo 2^bits
and so keeps the bits: the node expands to one. With a float type on either side it stays a
node, lowered element-wise to the `reinterpret` intrinsic (an LLVM bitcast; OpenCL's
`as_<type>`). Reading a byte as bool is refused: only 0 and 1 are bools."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import REQUIRED, Pattern, UnsupportedOpError, register
from .emit import Emitter


def _is_float(dtype: str) -> bool:
    return bool(np.issubdtype(np.dtype(dtype), np.floating))


def _bitcast_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    source, target = types[0].dtype, attrs["to"]
    if np.dtype(source).itemsize != np.dtype(target).itemsize:
        raise ValueError(
            f"BitCast target must have the input's width ({source}: "
            f"{np.dtype(source).itemsize * 8} bits), not {target}"
        )
    if target == "bool" and source != "bool":
        raise UnsupportedOpError([(f"BitCast from {source} to bool", "?", None)])
    if source == "bool" and _is_float(target):
        raise UnsupportedOpError([(f"BitCast from bool to {target}", "?", None)])
    return [TensorType(types[0].shape, target)]


def bitcast(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """numpy: the same bytes viewed as `to`."""
    return x.copy().view(attrs["to"])  # (a copy is C-contiguous, a 0-d one stays 0-d)


def _expand_bitcast(b: GraphBuilder, node: Node) -> bool:
    source, target = b.types[node.inputs[0]].dtype, node.attr_dict["to"]
    if _is_float(source) or _is_float(target):
        return False  # lowered by strategy/elemwise.py
    e = Emitter(b, node)
    e.add("Cast", [node.inputs[0]], {"to": target}, outputs=[node.outputs[0]])
    return True


register("BitCast", Pattern.ELEMWISE, _bitcast_type, bitcast, attrs={"to": REQUIRED},
         expand=_expand_bitcast)  # fmt: skip

__all__ = ["bitcast"]

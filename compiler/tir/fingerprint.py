"""Fingerprints of loop-IR functions: equal for functions equal but for their name and the
identity of their variables and buffers.

Two fused groups of a model often lower to the same function (a transformer's layers, a ResNet
stage's blocks): `graph.compile.KernelCache` keys the functions it has finished by the
fingerprint of their IR before the pass pipeline, so a repeat skips the passes and code
generation, not only LLVM. The fingerprint reads every field of every node (as
`te.visitor.field_names` lists them), variables and buffers by their first appearance with their
names, dtypes and shapes, floats by their bits. A value it cannot vouch for (an object that is
not an IR node, a number or a string) gives no fingerprint: that function is always built.
"""

from __future__ import annotations

import enum
import struct
import zlib
from typing import Any

from ..te import expr as te_expr
from ..te.visitor import field_names
from . import stmt as tir_stmt
from .stmt import Buffer, PrimFunc

#: the modules whose dataclasses are IR nodes the fingerprint walks into
_NODE_MODULES = frozenset({te_expr.__name__, tir_stmt.__name__})


class _Unkeyable(Exception):
    """A value the fingerprint cannot vouch for."""


def fingerprint(func: PrimFunc) -> tuple[int, int, int] | None:
    """`func`'s fingerprint (two independent hashes and the length of its canonical text), or
    None when it holds a value other than IR nodes, variables, buffers, numbers, strings,
    enums, None and tuples of those. Its name is left out."""
    tokens: list[Any] = []
    names: dict[Any, int] = {}  # a variable or buffer -> its number (both compare by identity)

    def walk(x: Any) -> None:
        if x is None or isinstance(x, bool | int | str):
            tokens.append((type(x).__name__, x))
        elif isinstance(x, float):
            tokens.append(("f", struct.pack("<d", x)))  # (repr gives every NaN as 'nan')
        elif isinstance(x, enum.Enum):
            tokens.append((type(x).__name__, x.name))
        elif isinstance(x, tuple):
            tokens.append(("(", len(x)))
            for item in x:
                walk(item)
        elif isinstance(x, te_expr.Var | Buffer):
            number = names.get(x)
            if number is not None:
                tokens.append(("#", number))
                return
            names[x] = len(names)
            tokens.append((type(x).__name__, x.name))
            walk(x.dtype)
            if isinstance(x, Buffer):
                walk(x.shape)
                walk(x.scope)
        elif type(x).__module__ in _NODE_MODULES and hasattr(x, "__dataclass_fields__"):
            tokens.append(type(x).__name__)
            for name in field_names(x):
                walk(getattr(x, name))
        else:
            raise _Unkeyable(type(x).__name__)

    try:
        walk(func.params)
        walk(func.body)
        walk(func.arg_shapes)
        walk(func.attrs)
    except _Unkeyable:
        return None
    text = repr(tokens)
    return hash(text), zlib.crc32(text.encode()), len(text)

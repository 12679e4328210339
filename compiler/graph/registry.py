"""The op registry: each op's attribute schema, type inference, fusion pattern and numpy kernel."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from .ir import AttrValue, GraphError, Node, TensorType


class Pattern(IntEnum):
    """How an op fuses (TVM's OpPatternKind); a larger value fuses less."""

    ELEMWISE = 0  # out[i] = f(in[i]) with all shapes equal
    BROADCAST = 1  # out[i] = f(in[g(i)]) where g drops or zeroes axes
    INJECTIVE = 2  # each output element reads one input element (reshape, transpose, ...)
    COMM_REDUCE = 3  # commutative reduction over some axes
    OUT_ELEMWISE_FUSABLE = 4  # complex op whose output can absorb elementwise ops (conv, dense)
    OPAQUE = 8  # never fused


class UnsupportedOpError(NotImplementedError):
    """A model uses ops (or op variants) the graph layer does not implement; lists all of them."""

    def __init__(self, items: Sequence[tuple[str, str, int | None]], where: str = "model") -> None:
        self.items = list(items)
        lines = [f"  {op} (node {name!r}, opset {opset})" for op, name, opset in self.items]
        super().__init__(f"{where} uses {len(self.items)} unsupported op(s):\n" + "\n".join(lines))


REQUIRED = object()  # attribute default meaning "must be given"

Infer = Callable[
    [dict[str, Any], list[TensorType | None], list[np.ndarray | None]], list[TensorType]
]
Compute = Callable[..., Any]


@dataclass(frozen=True)
class OpSpec:
    """One op: attribute defaults (`REQUIRED` if none), how many inputs/outputs, which inputs must
    be constants (their values decide output shapes), the fusion pattern and two functions:
    `infer(attrs, input_types, input_constants) -> output types` and
    `compute(attrs, *input_arrays) -> array or tuple of arrays` (numpy reference)."""

    name: str
    pattern: Pattern
    infer: Infer
    compute: Compute
    attrs: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[int, int] = (1, 1)
    outputs: tuple[int, int] = (1, 1)
    const_inputs: tuple[int, ...] = ()

    def normalize_attrs(self, attrs: dict[str, Any], where: str) -> dict[str, AttrValue]:
        """Fill defaults, reject unknown or missing attributes, coerce lists to tuples."""
        unknown = [k for k in attrs if k not in self.attrs]
        if unknown:
            raise GraphError(
                f"attributes of {self.name} must be among {sorted(self.attrs)}, "
                f"not {unknown!r} (node {where!r})"
            )
        result: dict[str, AttrValue] = {}
        for key, default in self.attrs.items():
            value = attrs.get(key, default)
            if value is REQUIRED:
                raise GraphError(f"attribute {key!r} of {self.name} must be given (node {where!r})")
            if value is not None:
                result[key] = _coerce(value, default, f"{self.name}.{key} (node {where!r})")
        return result

    def infer_node(
        self, node: Node, types: Mapping[str, TensorType], constants: Mapping[str, np.ndarray]
    ) -> list[TensorType]:
        """Output types of `node`, checking arity and constant inputs first."""
        lo, hi = self.inputs
        if not lo <= len(node.inputs) <= hi:
            raise GraphError(
                f"{self.name} must have {lo} to {hi} inputs, not {len(node.inputs)} "
                f"(node {node.name!r})"
            )
        for name in node.inputs:
            if name and name not in types:
                raise GraphError(f"input of node {node.name!r} must be defined, not {name!r}")
        in_types = [types[n] if n else None for n in node.inputs]
        consts = [constants.get(n) if n else None for n in node.inputs]
        for i in self.const_inputs:
            if i < len(node.inputs) and node.inputs[i] and consts[i] is None:
                raise GraphError(
                    f"input {i} ({node.inputs[i]!r}) of {self.name} node {node.name!r} must be a "
                    "constant: it decides the output shape"
                )
        try:
            out = self.infer(self.full_attrs(node), in_types, consts)
        except (ValueError, IndexError, TypeError) as exc:
            if isinstance(exc, GraphError):
                raise
            raise GraphError(f"{self.name} node {node.name!r}: {exc}") from exc
        count = len(node.outputs)  # optional trailing outputs may be left off
        if not self.outputs[0] <= count <= len(out):
            raise GraphError(
                f"{self.name} must have {self.outputs[0]} to {len(out)} outputs, not "
                f"{count} (node {node.name!r})"
            )
        return out[:count]

    def full_attrs(self, node: Node) -> dict[str, Any]:
        attrs = {k: v for k, v in self.attrs.items() if v is not REQUIRED}
        attrs.update(node.attrs)
        return attrs

    def run(self, node: Node, arrays: Sequence[np.ndarray | None]) -> tuple[np.ndarray, ...]:
        """Evaluate `node` on numpy arrays; returns one array per output."""
        result = self.compute(self.full_attrs(node), *arrays)
        results = result if isinstance(result, tuple) else (result,)
        return results[: len(node.outputs)]


def _coerce(value: Any, default: Any, where: str) -> AttrValue:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, list | tuple):
        return tuple(v.decode() if isinstance(v, bytes) else v for v in value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(default, float) and isinstance(value, int | float):
        return float(value)
    if isinstance(default, int) and not isinstance(default, bool) and isinstance(value, float):
        if value != int(value):
            raise GraphError(f"attribute {where} must be an integer, not {value!r}")
        return int(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


OPS: dict[str, OpSpec] = {}


def register(
    name: str,
    pattern: Pattern,
    infer: Infer,
    compute: Compute,
    **kwargs: Any,
) -> OpSpec:
    """Add an op to the registry (one definition per name)."""
    if name in OPS:
        raise ValueError(f"op name must be unique, not a second {name!r}")
    spec = OpSpec(name, pattern, infer, compute, **kwargs)
    OPS[name] = spec
    return spec


def get_op(name: str) -> OpSpec:
    """The registered op `name`; raises UnsupportedOpError if there is none."""
    from . import ops  # noqa: F401  (registers the op families on first use)

    if name not in OPS:
        raise UnsupportedOpError([(name, "?", None)], where="graph")
    return OPS[name]


def is_registered(name: str) -> bool:
    from . import ops  # noqa: F401

    return name in OPS

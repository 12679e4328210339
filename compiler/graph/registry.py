"""The op registry: each op's attribute schema, type inference, fusion pattern and numpy kernel."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from ...runtime.dtypes import is_narrow, wide_dtype
from .ir import AttrValue, DataDependentShapeError, GraphError, Node, ShapeError, TensorType

# The ONNX opsets whose op definitions the registry implements (type rules come from them).
ONNX_OPSETS = (13, 21)


class Pattern(IntEnum):
    """How an op fuses (TVM's OpPatternKind); a larger value fuses less."""

    ELEMWISE = 0  # out[i] = f(in[i]) with all shapes equal
    BROADCAST = 1  # out[i] = f(in[g(i)]) where g drops or zeroes axes
    INJECTIVE = 2  # each output element reads one input element (reshape, transpose, ...)
    COMM_REDUCE = 3  # commutative reduction over some axes
    OUT_ELEMWISE_FUSABLE = 4  # complex op whose output can absorb elementwise ops (conv, dense)
    OPAQUE = 8  # never fused


# ops whose output shape depends on their input's values (a detector's box selection): the
# graph's shapes are static, so they compile only when those inputs are constants; computed at
# run time they are refused, all such nodes at once, and the error says why
DATA_DEPENDENT_SHAPE_OPS = ("NonZero", "Compress", "Unique", "NonMaxSuppression")
_NODES_NAMED = 3  # of an op on more nodes than this, the error names the first ones and a count


class UnsupportedOpError(NotImplementedError):
    """A model uses ops (or op variants) the graph layer does not implement; lists all of them
    (`items`: every node; the message: one line per op, naming its first nodes when many, and
    why an op whose output shape depends on the data is refused)."""

    def __init__(self, items: Sequence[tuple[str, str, int | None]], where: str = "model") -> None:
        self.items = list(items)
        nodes: dict[tuple[str, int | None], list[str]] = {}
        for op, name, opset in self.items:
            nodes.setdefault((op, opset), []).append(name)
        lines = []
        for (op, opset), names in nodes.items():
            if len(names) <= _NODES_NAMED:
                lines += [f"  {op} (node {name!r}, opset {opset})" for name in names]
            else:
                first = ", ".join(repr(name) for name in names[:_NODES_NAMED])
                more = len(names) - _NODES_NAMED
                lines.append(f"  {op} ({len(names)} nodes: {first} and {more} more; opset {opset})")
        for op in dict.fromkeys(op for op, _ in nodes if op in DATA_DEPENDENT_SHAPE_OPS):
            lines.append(
                f"{op}'s output shape depends on its input's values, here computed at run time;"
                " a graph holds static shapes (tensorforge.compile runs such a node, and all"
                " that reads its result, after the compiled part: docs/compile.md, data-dependent"
                " shapes)"
            )
        for op in dict.fromkeys(op for op, _ in nodes if not _is_onnx_op(op)):
            hint = FOREIGN_OP_HINTS.get(op, "")
            lines.append(
                f"{op} is not an ONNX operator: the converter left its own framework's op in the"
                f" file, as tf2onnx does with a TensorFlow op it cannot convert{hint}"
            )
        super().__init__(f"{where} uses {len(self.items)} unsupported op(s):\n" + "\n".join(lines))


#: what a user can do about an op a converter left in a file under its own framework's name
FOREIGN_OP_HINTS = {
    "Erfc": " (here Keras's exact GELU, `activation='gelu'`; "
    "`keras.activations.gelu(x, approximate=True)` converts)",
    "StatefulPartitionedCall": " (a TensorFlow function call the converter did not inline: "
    "Keras 3 under TensorFlow runs a grouped Conv2D, `groups` > 1, as one; ConvNeXt's "
    "depthwise convolutions are such; a DepthwiseConv2D converts)",
}


def _is_onnx_op(op: str) -> bool:
    """Whether an unsupported-op listing's `op` names an operator of ONNX's default domain (or
    is a variant's description, or a qualified name of another domain)."""
    import onnx.defs

    return not op.isidentifier() or onnx.defs.has(op)


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
    `compute(attrs, *input_arrays) -> array or tuple of arrays` (numpy reference); a composite
    op also has `expand` (its rewrite into other ops)."""

    name: str
    pattern: Pattern
    infer: Infer
    compute: Compute
    attrs: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[int, int] = (1, 1)
    outputs: tuple[int, int] = (1, 1)
    const_inputs: tuple[int, ...] = ()
    # inputs before the required count that the op's schema still lets a model leave out ("")
    optional_inputs: tuple[int, ...] = ()
    # a composite op: `expand(builder, node)` adds ops that compute its outputs (same names) to
    # a `GraphBuilder`; `passes.expand_composites` calls it, so no back-end lowers the op itself.
    # An op that lowers in some forms returns False, adding nothing, for those: the node stays.
    expand: Callable[[Any, Node], bool | None] | None = None

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
        for i, name in enumerate(node.inputs[:lo]):
            if not name and i not in self.optional_inputs:  # "": an input left out
                raise GraphError(f"input {i} of {self.name} node {node.name!r} must be given; "
                                 f"only inputs from {lo} on are optional"
                                 + (f" (and {list(self.optional_inputs)})"
                                    if self.optional_inputs else ""))  # fmt: skip
        for name in node.inputs:
            if name and name not in types:
                raise GraphError(f"input of node {node.name!r} must be defined, not {name!r}")
        in_types = [types[n] if n else None for n in node.inputs]
        consts = [constants.get(n) if n else None for n in node.inputs]
        for i in self.const_inputs:
            if i < len(node.inputs) and node.inputs[i] and consts[i] is None:
                raise DataDependentShapeError(
                    f"input {i} ({node.inputs[i]!r}) of {self.name} node {node.name!r} must be a "
                    "constant: it decides the output shape"
                )
        check_same_types(self.name, node, in_types)
        try:
            attrs = self.full_attrs(node)
            check_int_attrs(self.name, attrs, node.name)
            out = self.infer(attrs, in_types, consts)
        except ShapeError as exc:
            raise ShapeError(f"{self.name} node {node.name!r}: {exc}") from None
        except UnsupportedOpError as exc:  # a variant known only from the types: name the node
            raise UnsupportedOpError([(op, node.name, v) for op, _, v in exc.items]) from None
        except (ValueError, IndexError, TypeError, ArithmeticError) as exc:
            if isinstance(exc, DataDependentShapeError) and repr(node.name) not in str(exc):
                raise DataDependentShapeError(f"{self.name} node {node.name!r}: {exc}") from exc
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
        """Evaluate `node` on numpy arrays; returns one array per output. Narrow inputs
        (bfloat16, float8, int4, ...) that the op does not take as such (`narrow_positions`)
        are widened first, and the outputs whose type is narrow rounded back, as the
        `widen_narrow` pass does for compiled code."""
        attrs = self.full_attrs(node)
        ins, outs = narrow_positions(self.name)
        widen = [
            k not in ins and a is not None and is_narrow(str(a.dtype)) for k, a in enumerate(arrays)
        ]
        narrow_out: list[str | None] = []
        if any(widen):
            in_types = [None if a is None else TensorType(a.shape, str(a.dtype)) for a in arrays]
            consts = [a if k in self.const_inputs else None for k, a in enumerate(arrays)]
            types = self.infer(attrs, in_types, consts)
            narrow_out = [t.dtype if is_narrow(t.dtype) and k not in outs else None
                          for k, t in enumerate(types)]  # fmt: skip
            arrays = [a.astype(wide_dtype(str(a.dtype))) if w else a  # type: ignore[union-attr]
                      for a, w in zip(arrays, widen, strict=True)]  # fmt: skip
        result = self.compute(attrs, *arrays)
        results = result if isinstance(result, tuple) else (result,)
        results = tuple(
            np.asarray(r).astype(narrow_out[k]) if k < len(narrow_out) and narrow_out[k] else r
            for k, r in enumerate(results)
        )
        return results[: len(node.outputs)]


#: ops that take narrow types (bfloat16, float8, int4, ...) as such: the input and output
#: positions that may hold them. Everywhere else a narrow value is widened (float32, int8 or
#: uint8: `runtime.dtypes.wide_dtype`) and the result rounded back: passes/widen_narrow.py.
NARROW_NATIVE: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "Cast": ((0,), (0,)),
    "CastLike": ((0, 1), (0,)),
    "QuantizeLinear": ((2,), (0,)),
    "DequantizeLinear": ((0, 2), ()),
}


def narrow_positions(op: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(input positions, output positions) where `op` takes narrow types as such."""
    return NARROW_NATIVE.get(op, ((), ()))


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


# Integer attributes that must be positive or non-negative (sliding windows: Conv*, pools,
# tf.q*; LayoutTransform's block; Split's num_outputs): checked for every op that has them,
# before its shape inference divides by them.
_POSITIVE_ATTRS = ("strides", "dilations", "kernel_shape", "group", "block", "num_outputs")
_NON_NEGATIVE_ATTRS = ("pads", "output_padding")


def check_int_attrs(op: str, attrs: Mapping[str, Any], node: str) -> None:
    """Raise GraphError naming `node` and the attribute if a stride, dilation, kernel size,
    group, block or output count is not a positive integer, or a pad is negative."""
    for key, positive in [(k, True) for k in _POSITIVE_ATTRS] + [
        (k, False) for k in _NON_NEGATIVE_ATTRS
    ]:
        value = attrs.get(key)
        if value is None:
            continue
        values = value if isinstance(value, tuple | list) else (value,)
        bad = [
            v
            for v in values
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < int(positive)
        ]
        if bad:
            need = "positive" if positive else "non-negative"
            raise GraphError(
                f"{op} node {node!r}: attribute {key} must hold {need} integers, not {value!r}"
            )


@functools.cache
def same_type_inputs(op: str) -> tuple[tuple[str, tuple[int, ...], bool], ...]:
    """Groups of input positions that the ONNX schema of `op` types with one type parameter at
    every opset of ONNX_OPSETS where `op` exists (so no importable model breaks the rule), as
    (parameter, formal input indices, whether further actual inputs repeat the last formal one
    with the same type: Concat, Max, Min). Empty for ops that ONNX does not define."""
    try:
        import onnx.defs
    except ImportError:  # pragma: no cover  (onnx is a dependency)
        return ()
    keys: dict[int, list[str]] = {}
    variadic = True
    versions = 0
    for opset in range(ONNX_OPSETS[0], ONNX_OPSETS[1] + 1):
        try:
            schema = onnx.defs.get_schema(op, opset, "")
        except onnx.defs.SchemaError:
            continue
        versions += 1
        params = {c.type_param_str for c in schema.type_constraints}
        formal = schema.inputs
        last = formal[-1] if formal else None
        variadic = variadic and last is not None and last.option == last.option.Variadic
        variadic = variadic and last.is_homogeneous
        for i in range(max(len(formal), max(keys, default=-1) + 1)):
            param = formal[i].type_str if i < len(formal) else None
            keys.setdefault(i, []).append(param if param in params else "")
    if not versions:
        return ()
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, key in keys.items():
        if len(key) == versions and all(key):
            groups.setdefault(tuple(key), []).append(i)
    last = max(keys, default=-1)
    return tuple(
        (key[-1], tuple(idx), variadic and idx[-1] == last)
        for key, idx in groups.items()
        if len(idx) > 1 or (variadic and idx[-1] == last)
    )


def check_same_types(op: str, node: Node, types: Sequence[TensorType | None]) -> None:
    """Raise GraphError naming the node and dtypes if inputs that the ONNX schema gives one type
    parameter (MatMul's A and B: T) have different dtypes (onnxruntime rejects such models)."""
    for param, formal, variadic_last in same_type_inputs(op):
        positions = [i for i in formal if i < len(types)]
        if variadic_last:
            positions += range(formal[-1] + 1, len(types))
        present = [(node.inputs[i], types[i].dtype) for i in positions if types[i] is not None]
        if len({dtype for _, dtype in present}) > 1:
            listed = ", ".join(f"{name!r} {dtype}" for name, dtype in present)
            raise GraphError(
                f"{op} node {node.name!r}: inputs of type parameter {param} must have one "
                f"dtype, not {listed}"
            )


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

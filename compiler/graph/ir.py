"""The graph IR: immutable typed values, nodes and graphs, and a builder that infers types.

A `Graph` is a list of `Node`s in topological order over named values. Every value has a
`TensorType` (static shape and dtype); constants (weights) are read-only numpy arrays kept in the
graph. Nodes name an op from the registry (`compiler.graph.registry`) whose semantics are ONNX's
at the latest supported opset; a missing optional input is the empty name "". Passes return new
graphs (`Graph.replace`); annotations that a pass computes (fusion groups, a memory plan) are
dropped whenever the nodes change.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ...runtime import ndarray as nd
from ...runtime.checks import split_outputs
from ...runtime.dtypes import DTYPES

if TYPE_CHECKING:
    from .passes.fuse_ops import FusedGroup
    from .passes.plan_memory import MemoryPlan

AttrValue = int | float | str | tuple[int, ...] | tuple[float, ...] | tuple[str, ...]

# The most bytes one tensor may span (4 TiB): far past any memory, far below where int64 shape
# arithmetic (strides, offsets, element counts) could wrap. A zero dim does not make the other
# dims free: they still count (a zero-size tensor may not have a dim of 2**70).
MAX_TENSOR_BYTES = 1 << 42


class GraphError(ValueError):
    """A graph is malformed: an undefined value, a type mismatch, a bad attribute."""


class DataDependentShapeError(GraphError):
    """An output shape would depend on a value computed at run time (an input that decides
    it, such as Reshape's shape or NonZero's data, is not a constant): the graph's shapes are
    static. The ONNX importer sets such a node aside into the model's run-time tail
    (`compiler/frontend/onnx_tail.py`)."""


class ShapeError(GraphError):
    """A shape is invalid: a negative or non-integer dim, or more bytes than MAX_TENSOR_BYTES.

    Raised by `TensorType` without context; op inference and the builder add the node or input
    it belongs to."""


def _itemsize(dtype: str) -> int:
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return 1


def check_shape(shape: Sequence[Any], dtype: str = "uint8") -> tuple[int, ...]:
    """`shape` as a tuple of Python ints, or `ShapeError`: every dim a non-negative integer and
    the tensor's span (the product of its dims, zeros counted as ones, times the element size)
    at most `MAX_TENSOR_BYTES`. Products are exact (Python ints never wrap)."""
    dims = []
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int | np.integer):
            if isinstance(d, float | np.floating) and float(d).is_integer():
                d = int(d)
            else:
                raise ShapeError(f"shape must have integer dims, not {tuple(shape)!r}")
        dims.append(int(d))
    dims_t = tuple(dims)
    if any(d < 0 for d in dims_t):
        raise ShapeError(f"shape must have non-negative dims, not {dims_t!r}")
    span = math.prod(max(d, 1) for d in dims_t) * _itemsize(dtype)
    if span > MAX_TENSOR_BYTES:
        raise ShapeError(
            f"shape {dims_t!r} of {dtype} spans {span} bytes, more than a tensor may "
            f"(MAX_TENSOR_BYTES = {MAX_TENSOR_BYTES})"
        )
    return dims_t


def check_dtype(dtype: str, where: str) -> str:
    """Return `dtype` if graph tensors may have it, else raise `GraphError` naming `where`."""
    if dtype not in DTYPES:
        raise GraphError(f"dtype of {where} must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return dtype


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The numpy/ONNX multidirectional broadcast of `shapes`, in exact integers; ValueError
    (naming the shapes) if two dims differ and neither is 1."""
    rank = max((len(s) for s in shapes), default=0)
    result = [1] * rank
    for shape in shapes:
        for i, d in enumerate(shape, start=rank - len(shape)):
            d = int(d)
            if d != result[i] and d != 1:
                if result[i] != 1:
                    listed = " and ".join(str(tuple(int(x) for x in s)) for s in shapes)
                    raise ValueError(f"shapes {listed} must broadcast (dim {d} vs {result[i]})")
                result[i] = d
    return tuple(result)


@dataclass(frozen=True, slots=True)
class TensorType:
    """The static type of a value: shape (a tuple of non-negative ints) and dtype name."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", check_shape(self.shape, self.dtype))

    @property
    def size(self) -> int:
        """The element count (exact)."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * _itemsize(self.dtype)

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True, slots=True)
class Node:
    """One op application: `outputs = op(inputs; attrs)`; attrs sorted by name."""

    op: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, AttrValue], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "attrs", tuple(sorted(self.attrs)))

    @property
    def attr_dict(self) -> dict[str, AttrValue]:
        return dict(self.attrs)

    def attr(self, key: str) -> AttrValue:
        for name, value in self.attrs:
            if name == key:
                return value
        raise KeyError(f"node {self.name!r} ({self.op}) has no attribute {key!r}")


def _frozen_array(array: np.ndarray) -> np.ndarray:
    """A read-only copy of `array`, C-contiguous and 64-byte aligned: what a module's executor
    binds in place, so a constant the kernels read as is never needs a second copy."""
    out = nd.empty(array.shape, str(array.dtype)).numpy()
    out[...] = array
    out.setflags(write=False)
    return out


@dataclass(frozen=True)
class Graph:
    """A whole model: inputs, constants, nodes (topological order), outputs and all types.

    `groups` (from `fuse_ops`) and `memory_plan` (from `plan_memory`) are optional annotations.
    Constants are read-only arrays, C-contiguous and 64-byte aligned, except the views that
    `GraphBuilder.add_constant(view=True)` keeps (alter_layout's blocked weights).
    """

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: tuple[Node, ...]
    types: Mapping[str, TensorType]
    constants: Mapping[str, np.ndarray]
    groups: tuple[FusedGroup, ...] | None = None
    memory_plan: MemoryPlan | None = field(default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "types", MappingProxyType(dict(self.types)))
        consts = {
            k: v if not v.flags.writeable else _frozen_array(v) for k, v in self.constants.items()
        }
        object.__setattr__(self, "constants", MappingProxyType(consts))

    @property
    def model_outputs(self) -> tuple[str, ...]:
        """The outputs the model declares: `outputs` without the run-time checks
        (`runtime.checks`, named `tf.check:...`) that the ONNX importer lists after them."""
        return split_outputs(self.outputs)[0]

    def replace(self, **changes: Any) -> Graph:
        """A copy with `changes`; a change of nodes drops the fusion groups and memory plan."""
        if "nodes" in changes and "groups" not in changes:
            changes["groups"] = None
        if ("nodes" in changes or "groups" in changes) and "memory_plan" not in changes:
            changes["memory_plan"] = None
        new = dataclasses.replace(self, **changes)
        if "nodes" not in changes and "_node_index" in self.__dict__:  # same nodes: same index
            new.__dict__["_node_index"] = self.__dict__["_node_index"]
        return new

    @functools.cached_property
    def _node_index(self) -> tuple[dict[str, Node], dict[str, frozenset[str]]]:
        """(node name -> node, value -> the names of the nodes that read it), built once per
        graph and kept by `replace` while the nodes stay: `node` and `readers` are then O(1),
        not scans of every node (a compile looks up each group's nodes)."""
        readers: dict[str, set[str]] = {}
        for n in self.nodes:
            for name in n.inputs:
                if name:
                    readers.setdefault(name, set()).add(n.name)
        frozen = {k: frozenset(v) for k, v in readers.items()}
        return {n.name: n for n in self.nodes}, frozen

    def readers(self, value: str) -> frozenset[str]:
        """The names of the nodes that read `value`."""
        return self._node_index[1].get(value, frozenset())

    def producers(self) -> dict[str, Node]:
        """value name -> the node that computes it (inputs and constants have none)."""
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        """value name -> the nodes that read it, in node order (no duplicates)."""
        result: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in dict.fromkeys(node.inputs):
                if name:
                    result.setdefault(name, []).append(node)
        return result

    def node(self, name: str) -> Node:
        found = self._node_index[0].get(name)
        if found is None:
            raise KeyError(f"graph {self.name!r} has no node {name!r}")
        return found


class GraphBuilder:
    """Builds a `Graph` node by node, inferring each output's type from the op registry.

    >>> b = GraphBuilder("tiny")
    >>> x = b.add_input("x", (2, 3), "float32")
    >>> (y,) = b.add_node("Relu", [x])
    >>> print(b.build([y]).types[y])
    float32[2, 3]
    """

    def __init__(self, name: str = "main") -> None:
        self.name = name
        self.inputs: list[str] = []
        self.nodes: list[Node] = []
        self.types: dict[str, TensorType] = {}
        self.constants: dict[str, np.ndarray] = {}
        self._counter = 0
        self._node_names: set[str] = set()  # of `nodes`: name checks in O(1), not a scan

    @classmethod
    def sharing(cls, graph: Graph) -> GraphBuilder:
        """A builder that starts as `graph` does: its inputs, and its constants shared (graph
        constants are immutable), for a pass that rebuilds the nodes."""
        b = cls(graph.name)
        for name in graph.inputs:
            ty = graph.types[name]
            b.add_input(name, ty.shape, ty.dtype)
        for name, value in graph.constants.items():
            b.add_constant(name, value, copy=False)
        return b

    def fresh(self, hint: str) -> str:
        """A value or node name not used yet, starting with `hint`."""
        name = hint
        while name in self.types or self._has_node(name) or not name:
            self._counter += 1
            name = f"{hint}_{self._counter}"
        return name

    def _has_node(self, name: str) -> bool:
        if len(self._node_names) != len(self.nodes):  # `nodes` edited directly: re-read them
            self._node_names = {n.name for n in self.nodes}
        return name in self._node_names

    def add_input(self, name: str, shape: Sequence[int], dtype: str) -> str:
        dtype = check_dtype(dtype, f"input {name!r}")
        try:
            ty = TensorType(tuple(shape), dtype)
        except ShapeError as exc:
            raise ShapeError(f"input {name!r}: {exc}") from None
        self._define(name, ty)
        self.inputs.append(name)
        return name

    def add_constant(
        self, name: str, value: np.ndarray | float | int, *, copy: bool = True, view: bool = False
    ) -> str:
        """Define constant `name`: a read-only, aligned copy of `value`; with `copy=False` an
        array that already is one (read-only, C-contiguous, 64-byte aligned) and that nothing
        else writes, e.g. the ONNX importer's own buffer, is kept as it is. With `view=True`,
        `value` is a rearranging view of a read-only constant (alter_layout's blocked weights,
        `ops.layout.pack_weight`) and is kept as a read-only view of it: no second copy of the
        weights while the graph is optimized. Code that hands constants to native code copies
        such a view into aligned memory (`ndarray.aligned`): `compile_graph` after `optimize`,
        one view at a time, and `Module` and the executor for any constant."""
        array = np.asarray(value)
        dtype = check_dtype(str(array.dtype), f"constant {name!r}")
        if view and (array.base is None or array.flags.writeable):
            raise ValueError(f"constant {name!r} must be a read-only view of an array")
        self._define(name, TensorType(array.shape, dtype))
        if view:
            self.constants[name] = array
            return name
        frozen = not array.flags.writeable and array is nd.aligned(array)
        self.constants[name] = array if frozen and not copy else _frozen_array(array)
        return name

    def add_value(self, name: str, value: np.ndarray) -> str:
        """Define constant `name` as `value` itself, made read-only, without the aligned copy
        `add_constant` makes: for a graph only the reference executor runs (`evaluate_onnx`
        evaluates a model's tail node by node, every value a constant), where the copies were
        a third of the time (Mask R-CNN's mask pasting)."""
        array = np.asarray(value)
        dtype = check_dtype(str(array.dtype), f"constant {name!r}")
        self._define(name, TensorType(array.shape, dtype))
        if array.flags.writeable:
            array = array.view()  # (the caller's own array stays writeable)
            array.flags.writeable = False
        self.constants[name] = array
        return name

    def add_node(
        self,
        op: str,
        inputs: Sequence[str],
        attrs: Mapping[str, AttrValue] | None = None,
        *,
        name: str | None = None,
        outputs: Sequence[str] | None = None,
        num_outputs: int = 1,
    ) -> tuple[str, ...]:
        """Append `op(inputs)`; returns the output value names (fresh unless given)."""
        from .registry import get_op

        spec = get_op(op)
        node_name = name if name and not self._has_node(name) else None
        node_name = node_name or self.fresh(name or op.lower())
        if outputs is None:
            outputs = [
                self.fresh(node_name if i == 0 else f"{node_name}_{i}") for i in range(num_outputs)
            ]
        full_attrs = spec.normalize_attrs(dict(attrs or {}), node_name)
        node = Node(op, node_name, tuple(inputs), tuple(outputs), tuple(full_attrs.items()))
        out_types = spec.infer_node(node, self.types, self.constants)
        for out, ty in zip(node.outputs, out_types, strict=True):
            if out:
                self._define(out, ty)
        self.nodes.append(node)
        self._node_names.add(node_name)
        return node.outputs

    def build(self, outputs: Iterable[str]) -> Graph:
        outputs = tuple(outputs)
        for out in outputs:
            if out not in self.types:
                raise GraphError(f"graph output must be a defined value, not {out!r}")
        return Graph(
            self.name, tuple(self.inputs), outputs, tuple(self.nodes), self.types, self.constants
        )

    def _define(self, name: str, ty: TensorType) -> None:
        if not name:
            raise GraphError("value name must be non-empty")
        if name in self.types:
            raise GraphError(f"value {name!r} must be defined once, not twice")
        self.types[name] = ty

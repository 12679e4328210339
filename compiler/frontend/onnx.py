"""ONNX importer: an ONNX model (file, bytes or ModelProto; opsets 13 to 21) -> a graph IR `Graph`.

Before any conversion every node is checked and all unsupported ops are reported in one
`UnsupportedOpError`. A file that is not a valid ONNX model raises `OnnxImportError` naming the
file and the problem. Shapes are static: a symbolic input dim needs `input_shapes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..graph.ir import DTYPES, Graph, GraphBuilder, GraphError
from ..graph.registry import UnsupportedOpError, get_op, is_registered

MIN_OPSET, MAX_OPSET = 13, 21
# Ops the importer turns into something else than a node of the same name.
_SPECIAL = {"Constant", "Dropout"}
# Reduce ops whose axes were an attribute before opset 18 (ReduceSum moved at 13).
_AXES_ATTR_UNTIL_18 = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"}
_FOLD_LIMIT = 64  # integer results up to this many elements are folded at import (shape math)


class OnnxImportError(ValueError):
    """The ONNX model cannot be imported: malformed file, bad opset, unknown input dims."""


class UnsupportedDtypeError(OnnxImportError):
    """A tensor of the model has an element type the graph layer does not support."""


def load_model(model: str | Path | bytes | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """Parse and check a model; returns it with a name for messages (the file name)."""
    if isinstance(model, onnx.ModelProto):
        return model, "<ModelProto>"
    where = "<bytes>"
    if isinstance(model, str | Path):
        where = str(model)
        try:
            data = Path(model).read_bytes()
        except OSError as exc:
            raise OnnxImportError(f"{where}: cannot read the ONNX file: {exc.strerror}") from None
    else:
        data = bytes(model)
    if not data:
        raise OnnxImportError(f"{where}: is not a valid ONNX model: the file is empty")
    try:
        proto = onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise OnnxImportError(
            f"{where}: is not a valid ONNX model: protobuf parse failed ({type(exc).__name__}: "
            f"{exc})"
        ) from None
    if not proto.HasField("graph") or not proto.graph.output:
        raise OnnxImportError(f"{where}: is not a valid ONNX model: it has no graph outputs")
    return proto, where


def default_opset(model: onnx.ModelProto, where: str) -> int:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise OnnxImportError(f"{where}: model must import the default ONNX domain, not none")
    if versions[0] < MIN_OPSET:
        raise OnnxImportError(
            f"{where}: opset of the default domain must be {MIN_OPSET} to {MAX_OPSET}, "
            f"not {versions[0]}"
        )
    return versions[0]


def _unsupported_variant(node: onnx.NodeProto) -> str | None:
    """A description if `node` uses a variant of a supported op that is not implemented."""
    outputs = [o for o in node.output if o]
    training = any(a.name == "training_mode" and a.i for a in node.attribute)
    if node.op_type == "MaxPool" and len(outputs) > 1:
        return "MaxPool with Indices output"
    if node.op_type == "BatchNormalization" and (len(outputs) > 1 or training):
        return "BatchNormalization in training mode"
    if node.op_type == "Dropout" and (len(outputs) > 1 or len([i for i in node.input if i]) > 2):
        return "Dropout with a mask output or training_mode"
    if any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
    ):
        return f"{node.op_type} with a subgraph"
    return None


def unsupported_ops(model: onnx.ModelProto, opset: int) -> list[tuple[str, str, int | None]]:
    """(op type, node name, opset) of every node the importer cannot convert, in model order."""
    found: list[tuple[str, str, int | None]] = []
    for i, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        if node.domain not in ("", "ai.onnx"):
            found.append((f"{node.domain}.{node.op_type}", name, None))
        elif node.op_type not in _SPECIAL and not is_registered(node.op_type):
            found.append((node.op_type, name, opset))
        elif (variant := _unsupported_variant(node)) is not None:
            found.append((variant, name, opset))
    return found


def np_dtype(elem_type: int, where: str) -> str:
    try:
        dtype = str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))
    except (KeyError, TypeError, ValueError):
        dtype = helper.tensor_dtype_to_string(elem_type) if elem_type else "undefined"
    if dtype not in DTYPES:
        raise UnsupportedDtypeError(f"{where} must have one of {', '.join(DTYPES)}, not {dtype!r}")
    return dtype


class _Importer:
    def __init__(self, model: onnx.ModelProto, where: str, opset: int) -> None:
        self.model, self.where, self.opset = model, where, opset
        self.builder = GraphBuilder(model.graph.name or "main")

    def add_inputs(
        self, constant_inputs: Mapping[str, Any], input_shapes: Mapping[str, Any]
    ) -> None:
        for init in self.model.graph.initializer:
            np_dtype(init.data_type, f"{self.where}: initializer {init.name!r}")
            self.builder.add_constant(init.name, numpy_helper.to_array(init))
        for value in self.model.graph.input:
            if value.name in self.builder.types:
                continue
            if value.name in constant_inputs:
                self.builder.add_constant(value.name, np.asarray(constant_inputs[value.name]))
                continue
            shape, dtype = self._value_type(value, input_shapes.get(value.name))
            self.builder.add_input(value.name, shape, dtype)

    def _value_type(self, value: onnx.ValueInfoProto, given: Sequence[int] | None) -> tuple:
        where = f"{self.where}: input {value.name!r}"
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            kind = value.type.WhichOneof("value")
            raise UnsupportedDtypeError(f"{where} must be a tensor, not {kind}")
        dtype = np_dtype(tensor.elem_type, where)
        if given is not None:
            return tuple(given), dtype
        dims = []
        for dim in tensor.shape.dim:
            if not dim.HasField("dim_value"):
                raise OnnxImportError(
                    f"{where} must have static dims, not {dim.dim_param or '?'!r}; "
                    "pass input_shapes={name: shape}"
                )
            dims.append(dim.dim_value)
        return tuple(dims), dtype

    def convert(self, index: int, node: onnx.NodeProto) -> None:
        name = node.name or f"{node.op_type}_{index}"
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Constant":
            self.builder.add_constant(node.output[0], _constant_value(attrs))
            return
        inputs, outputs = list(node.input), list(node.output)
        op = node.op_type
        if op == "Dropout":  # inference: identity (the mask output is unsupported)
            op, inputs, outputs, attrs = "Identity", inputs[:1], outputs[:1], {}
        attrs = self._adjust(op, attrs, inputs, outputs, name)
        if self._fold(op, name, inputs, outputs, attrs):
            return
        self.builder.add_node(op, inputs, attrs, name=name, outputs=outputs)

    def _adjust(self, op: str, attrs: dict, inputs: list, outputs: list, name: str) -> dict:
        for key in ("to", "output_dtype"):
            if key in attrs and isinstance(attrs[key], int):
                attrs[key] = (
                    np_dtype(attrs[key], f"{self.where}: {op} {key} (node {name!r})")
                    if attrs[key]
                    else None
                )
        if op in _AXES_ATTR_UNTIL_18 and "axes" in attrs:
            axes = self.builder.fresh(f"{name}_axes")
            self.builder.add_constant(axes, np.array(attrs.pop("axes"), np.int64))
            inputs[1:] = [axes]
        if op == "Split" and "split" in attrs:
            split = self.builder.fresh(f"{name}_split")
            self.builder.add_constant(split, np.array(attrs.pop("split"), np.int64))
            inputs[1:] = [split]
        if op == "Split" and (len(inputs) < 2 or not inputs[1]) and "num_outputs" not in attrs:
            attrs["num_outputs"] = len(outputs)
        return attrs

    def _fold(self, op: str, name: str, inputs: list, outputs: list, attrs: dict) -> bool:
        """Evaluate shape arithmetic (Shape, small integer ops on constants) right away."""
        consts = self.builder.constants
        present = [i for i in inputs if i]
        if op != "Shape" and not (present and all(i in consts for i in present)):
            return False
        probe = GraphBuilder()
        probe.types, probe.constants = dict(self.builder.types), dict(consts)
        probe.add_node(op, inputs, attrs, name=name, outputs=outputs)
        types = [probe.types[o] for o in outputs if o]
        if not all(t.dtype.startswith(("int", "uint")) and t.size <= _FOLD_LIMIT for t in types):
            return False
        node = probe.nodes[-1]
        if op == "Shape":
            # only the shape matters: a zero-strided view allocates nothing
            arrays = [np.broadcast_to(np.uint8(0), self.builder.types[inputs[0]].shape)]
        else:
            arrays = [consts[i] if i else None for i in inputs]
        values = get_op(op).run(node, arrays)
        for out, value in zip(outputs, values, strict=False):
            if out:
                self.builder.add_constant(out, np.asarray(value))
        return True

    def check_outputs(self, graph: Graph) -> None:
        for value in self.model.graph.output:
            tensor = value.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
            if not tensor.HasField("shape") or None in dims:
                continue
            ours = graph.types[value.name]
            if tuple(dims) != ours.shape:
                raise OnnxImportError(
                    f"{self.where}: output {value.name!r} must have the declared shape "
                    f"{tuple(dims)}, not the inferred {ours.shape}"
                )


def _constant_value(attrs: dict[str, Any]) -> np.ndarray:
    if "value" in attrs:
        return numpy_helper.to_array(attrs["value"])
    for key, dtype in (
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if key in attrs:
            return np.array(attrs[key], dtype)
    raise OnnxImportError(
        f"Constant must have value, value_float(s) or value_int(s), not {sorted(attrs)}"
    )


def from_onnx(
    model: str | Path | bytes | onnx.ModelProto,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constant_inputs: Mapping[str, np.ndarray] | None = None,
) -> Graph:
    """Import an ONNX model into the graph IR.

    Args:
        model: a file path, serialized bytes or a ModelProto.
        input_shapes: static shapes for inputs with symbolic dims.
        constant_inputs: graph inputs to bind to fixed values (they become constants).

    Returns:
        A `Graph` whose outputs are the model's outputs, with inferred static types.

    Raises:
        OnnxImportError: malformed file, opset below 13, symbolic dims, a shape mismatch.
        UnsupportedOpError: listing every unsupported node (op type, node name, opset).
    """
    proto, where = load_model(model)
    opset = default_opset(proto, where)
    missing = unsupported_ops(proto, opset)
    if missing:
        raise UnsupportedOpError(missing, where=where)
    importer = _Importer(proto, where, opset)
    importer.add_inputs(constant_inputs or {}, input_shapes or {})
    for index, node in enumerate(proto.graph.node):
        try:
            importer.convert(index, node)
        except GraphError as exc:
            raise OnnxImportError(f"{where}: {exc}") from None
    graph = importer.builder.build(o.name for o in proto.graph.output)
    importer.check_outputs(graph)
    return graph


__all__ = [
    "OnnxImportError",
    "UnsupportedDtypeError",
    "UnsupportedOpError",
    "from_onnx",
    "load_model",
]

"""ONNX importer: an ONNX model (file, bytes or ModelProto; opsets 13 to 21) -> a graph IR `Graph`.

Opsets 7 to 12 are upgraded to 13 first with onnx's version converter (`onnx_upgrade`).
Nodes of onnxruntime's contrib domain (`com.microsoft`, as its transformer optimizer writes
them) map to the registry's ops of the qualified name (`registry_name`, `ops/contrib.py`).

Newer opsets, up to the newest the installed onnx package knows, import node by node where
the op's definition (its inputs and outputs) is still opset 21's; a node whose op changed is
listed as unsupported. Before any conversion every node is checked and all unsupported ops are
reported in one `UnsupportedOpError`. A file that is not a valid ONNX model raises
`OnnxImportError` naming the file and the problem. Shapes are static: a symbolic input dim or an
input without a shape needs `input_shapes`, and no tensor may span more than
`MAX_TENSOR_BYTES` (shape arithmetic is exact: a product that would wrap in int64 is caught).
Inputs that an op's ONNX schema types alike (MatMul's A and B) must have one dtype, and every
input a dtype its schema allows, as onnxruntime requires. Large initializers are read from the
file straight into their constants (`onnx_weights`): the weights are held once, not also in the
parsed protobuf.
"""

from __future__ import annotations

import io
import operator
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...runtime import ndarray as nd
from ..graph.ir import DTYPES, Graph, GraphBuilder, GraphError, ShapeError, check_shape
from ..graph.ops.shape import SHAPE_ONLY_OPS
from ..graph.registry import (
    DATA_DEPENDENT_SHAPE_OPS,
    ONNX_OPSETS,
    UnsupportedOpError,
    get_op,
    is_registered,
)
from .onnx_dropout import RANDOM_OPS, RANDOM_REASON, convert_dropout
from .onnx_if import select_branches
from .onnx_loop import SEQUENCE_OPS, convert_sequence_op, unroll_loop
from .onnx_patterns import (
    drop_false_training_modes,
    drop_unread_outputs,
    rewrite_masked_assignments,
)
from .onnx_preview import convert_flex_attention, is_preview_op
from .onnx_scan import is_batched_scan, unroll_batched_scan, unroll_scan
from .onnx_upgrade import OLDEST_OPSET, upgrade
from .onnx_weights import Span, WireError, read_span, strip_raw_data

# The op definitions the importer implements are those of opsets 13 to 21.
MIN_OPSET, MAX_OPSET = ONNX_OPSETS
# Ops the importer turns into something else than a node of the same name.
_SPECIAL = {"Constant", "Dropout", "If", "Loop", "Scan", *SEQUENCE_OPS}
# Reduce ops whose axes were an attribute before opset 18 (ReduceSum moved at 13).
_AXES_ATTR_UNTIL_18 = {
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
    "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
}  # fmt: skip
# Results of up to this many elements computed from constants alone are folded at import (shape
# math): integers, and the bools and floats exporters compute shapes through (Equal -> Where
# before an Expand; Cast to float, Mul by a scale, Floor, Cast back before a Resize).
_FOLD_LIMIT = 64
# Integer results (offsets, positions) up to this many elements fold too: a Loop unrolled at
# import slices by them in each iteration (EmbeddingBag's offsets: one per bag).
_FOLD_LIMIT_INT = 4096


def _fold_limit(dtype: str) -> int:
    return _FOLD_LIMIT_INT if np.dtype(dtype).kind in "iu" else _FOLD_LIMIT


class OnnxImportError(ValueError):
    """The ONNX model cannot be imported: malformed file, bad opset, unknown input dims."""


#: element types ONNX files pack two to a byte (held one to a byte once imported)
PACKED_4BIT = ("int4", "uint4", "float4_e2m1fn")


class UnsupportedDtypeError(OnnxImportError):
    """A tensor of the model has an element type the graph layer does not support."""


def load_model(model: str | Path | bytes | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """Parse and check a model; returns it with a name for messages (the file name)."""
    proto, where, _ = read_model(model, in_place=False)
    return proto, where


def read_model(
    model: str | Path | bytes | onnx.ModelProto, in_place: bool = True
) -> tuple[onnx.ModelProto, str, RawWeights | None]:
    """`load_model`; with `in_place` the large initializers' raw_data is left out of the parsed
    model and read later, straight into each constant (`RawWeights`, to be closed). A model
    the wire walker cannot follow is parsed whole (`onnx_weights`)."""
    if isinstance(model, onnx.ModelProto):
        return model, "<ModelProto>", None
    where = str(model) if isinstance(model, str | Path) else "<bytes>"
    f = _open_model(model, where)
    weights = None
    try:
        size = f.seek(0, io.SEEK_END)
        if not size:
            raise OnnxImportError(f"{where}: is not a valid ONNX model: the file is empty")
        proto, weights = _parse_in_place(f, size) if in_place else (None, None)
        if proto is None:
            f.seek(0)
            proto = _parse(f.read(), where)
    finally:
        if weights is None:
            f.close()
    if not proto.HasField("graph") or not proto.graph.output:
        if weights is not None:
            weights.close()
        raise OnnxImportError(f"{where}: is not a valid ONNX model: it has no graph outputs")
    _load_external_data(proto, where, Path(model).parent if where != "<bytes>" else None)
    return proto, where, weights


def _open_model(model: str | Path | bytes, where: str) -> BinaryIO:
    if not isinstance(model, str | Path):
        return io.BytesIO(model)
    try:
        return open(model, "rb")  # noqa: SIM115  (closed by read_model or RawWeights.close)
    except OSError as exc:
        raise OnnxImportError(f"{where}: cannot read the ONNX file: {exc.strerror}") from None


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    try:
        return onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise OnnxImportError(
            f"{where}: is not a valid ONNX model: protobuf parse failed ({type(exc).__name__}: "
            f"{exc})"
        ) from None


def _parse_in_place(f: BinaryIO, size: int) -> tuple[onnx.ModelProto | None, RawWeights | None]:
    """The model parsed without its large raw_data, and where that lies; (None, None) when the
    wire walker or protobuf cannot take it (the whole model is parsed then, for its error)."""
    try:
        stripped, spans = strip_raw_data(f, size)
        proto = onnx.load_model_from_string(stripped)
    except Exception:  # noqa: BLE001  (WireError, DecodeError: the full parse decides)
        return None, None
    if not any(spans):
        return proto, None
    return proto, RawWeights(f, spans)


class RawWeights:
    """The open model file and, per initializer, where its raw_data lies (`onnx_weights`)."""

    def __init__(self, f: BinaryIO, spans: list[Span | None]) -> None:
        self.f, self.spans = f, spans

    def array(self, index: int, tensor: onnx.TensorProto, where: str) -> np.ndarray | None:
        """Initializer number `index` as a read-only aligned array read from the file (None when
        its data stayed in the parsed model); its dims are checked before any allocation."""
        span = self.spans[index] if index < len(self.spans) else None
        external = tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.HasField("raw_data")
        if span is None or external:  # (raw_data now: read from an external data file)
            return None
        dtype = np_dtype(tensor.data_type, where)
        try:
            check_shape(list(tensor.dims), dtype)
        except ShapeError as exc:
            raise OnnxImportError(f"{where}: {exc}") from None
        shape = tuple(tensor.dims)
        count = int(np.prod(shape, dtype=np.int64))
        packed = dtype in PACKED_4BIT  # two values a byte in the file, one a byte in memory
        expected = (count + 1) // 2 if packed else count * np.dtype(dtype).itemsize
        if span[1] != expected:
            raise OnnxImportError(
                f"{where} must hold data of its shape {shape}: raw_data has {span[1]} bytes "
                f"(at byte {span[0]}), not {expected}"
            )
        array = nd.empty(shape, dtype).numpy()
        raw = np.empty(expected, np.uint8) if packed else array.reshape(-1).view(np.uint8)
        try:
            read_span(self.f, span, memoryview(raw))
        except WireError as exc:
            raise OnnxImportError(f"{where}: {exc}") from None
        if packed:  # the first value in the low 4 bits, as onnx.numpy_helper unpacks them
            nibbles = array.reshape(-1).view(np.uint8)
            nibbles[0::2] = raw[: (count + 1) // 2] & 0xF
            nibbles[1::2] = raw[: count // 2] >> 4
        array.setflags(write=False)
        return array

    def close(self) -> None:
        self.f.close()


def _load_external_data(proto: onnx.ModelProto, where: str, folder: Path | None) -> None:
    """Read tensors kept in ONNX external data files from the model's own folder (never the
    working directory); a model given as bytes has no folder, so it may not have any."""
    from onnx import external_data_helper as ext

    tensors = [t for t in ext._get_all_tensors(proto) if ext.uses_external_data(t)]
    if not tensors:
        return
    if folder is None:
        raise OnnxImportError(
            f"{where}: tensor {tensors[0].name!r} keeps its data in an external file; load the "
            "model from its path, so that the file is read beside it"
        )
    try:
        ext.load_external_data_for_model(proto, str(folder))
    except Exception as exc:  # noqa: BLE001  (missing file, a path out of the folder, ...)
        raise OnnxImportError(
            f"{where}: external data of tensor {tensors[0].name!r} cannot be read from "
            f"{folder}: {type(exc).__name__}: {exc}"
        ) from None


def newest_opset() -> int:
    """The newest default-domain opset the installed onnx package defines."""
    return onnx.defs.onnx_opset_version()


def default_opset(model: onnx.ModelProto, where: str) -> int:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise OnnxImportError(f"{where}: model must import the default ONNX domain, not none")
    if len(set(versions)) > 1:
        raise OnnxImportError(
            f"{where}: model must import the default ONNX domain once, not at opsets {versions}"
        )
    newest = newest_opset()
    if versions[0] < OLDEST_OPSET:
        raise OnnxImportError(
            f"{where}: opset of the default domain must be {MIN_OPSET} to {MAX_OPSET}, "
            f"not {versions[0]} (opsets {OLDEST_OPSET} to {MIN_OPSET - 1} are upgraded to "
            f"{MIN_OPSET} with onnx's version converter; up to {newest} import where their ops "
            "are unchanged)"
        )
    if versions[0] > newest:
        raise OnnxImportError(
            f"{where}: opset {versions[0]} of the default domain is newer than the installed "
            f"onnx {onnx.__version__} defines (up to {newest}); the importer supports opsets "
            f"{MIN_OPSET} to {newest}"
        )
    return versions[0]


def _signature(schema: onnx.defs.OpSchema) -> tuple:
    return (
        [(f.name, f.option) for f in schema.inputs],
        [(f.name, f.option) for f in schema.outputs],
    )


def _changed_definition(op: str, opset: int) -> int | None:
    """The opset at which `op` took inputs or outputs other than at MAX_OPSET, if `opset` is
    newer than MAX_OPSET and uses that changed definition (type-only changes do not count;
    new attributes are rejected by name when a node sets them)."""
    if opset <= MAX_OPSET:
        return None
    try:
        new = onnx.defs.get_schema(op, opset, "")
        old = onnx.defs.get_schema(op, MAX_OPSET, "")
    except onnx.defs.SchemaError:
        return None
    if new.since_version > MAX_OPSET and _signature(new) != _signature(old):
        return new.since_version
    return None


def _is_training_batch_norm(node: onnx.NodeProto, opset: int) -> bool:
    """A BatchNormalization that normalizes by its batch's statistics: `training_mode=1`
    (opset 14 on), or below opset 14 (where there is no such attribute) one with the running
    statistics outputs, as torch's TorchScript exporter writes at opsets 9 to 13."""
    if node.op_type != "BatchNormalization":
        return False
    if any(a.name == "training_mode" and a.i for a in node.attribute):
        return True
    return opset < 14 and len([o for o in node.output if o]) > 1


def _unsupported_variant(node: onnx.NodeProto, opset: int = MAX_OPSET) -> str | None:
    """A description if `node` uses a variant of a supported op that is not implemented."""
    if (changed := _changed_definition(node.op_type, opset)) is not None:
        return f"{node.op_type} as redefined at opset {changed}"
    outputs = [o for o in node.output if o]
    training = _is_training_batch_norm(node, opset)
    if node.op_type == "BatchNormalization" and len(outputs) > 1 and not training:
        return "BatchNormalization with running statistics outputs in inference mode"
    if node.op_type not in ("If", "Loop", "Scan", "SequenceMap") and any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
    ):
        return f"{node.op_type} with a subgraph"
    return None


def unsupported_ops(model: onnx.ModelProto, opset: int) -> list[tuple[str, str, int | None]]:
    """(op type, node name, opset) of every node the importer cannot convert, in model order
    (an If's branches are checked when the branch taken is known, `_Importer._inline_if`, and a
    Loop's body when it is unrolled, `onnx_loop.unroll_loop`)."""
    return unsupported_nodes(model.graph.node, opset)


def unsupported_nodes(
    nodes: Sequence[onnx.NodeProto], opset: int
) -> list[tuple[str, str, int | None]]:
    """`unsupported_ops` of a list of nodes (a graph's, an If branch's or a Loop body's)."""
    found: list[tuple[str, str, int | None]] = []
    for i, node in enumerate(nodes):
        name = node.name or f"{node.op_type}_{i}"
        if is_preview_op(node) or is_batched_scan(node):  # subgraphs checked when converted
            continue
        if node.domain not in ("", "ai.onnx"):
            if not is_registered(registry_name(node)):
                found.append((registry_name(node), name, None))
            elif (unbuilt := _unbuilt_contrib_output(node)) is not None:
                found.append((f"{registry_name(node)} with its {unbuilt}", name, None))
        elif node.op_type in RANDOM_OPS:
            found.append((f"{node.op_type} ({RANDOM_REASON})", name, opset))
        elif node.op_type not in _SPECIAL and not is_registered(node.op_type):
            found.append((node.op_type, name, opset))
        elif (variant := _unsupported_variant(node, opset)) is not None:
            found.append((variant, name, opset))
    return found


# onnxruntime contrib ops' outputs that are not built: (op type, output index) -> what it is
_UNBUILT_CONTRIB_OUTPUTS = {
    ("Attention", 1): "present output (key/value cache)",
    ("MultiHeadAttention", 1): "present_key output (key/value cache)",
    ("MultiHeadAttention", 2): "present_value output (key/value cache)",
    ("MultiHeadAttention", 3): "qk output",
    ("SkipSimplifiedLayerNormalization", 1): "mean output",
}


def _unbuilt_contrib_output(node: onnx.NodeProto) -> str | None:
    """What a contrib node asks for that is not built: an output named in
    `_UNBUILT_CONTRIB_OUTPUTS` (left blank, it is fine)."""
    for index, out in enumerate(node.output):
        if out and (unbuilt := _UNBUILT_CONTRIB_OUTPUTS.get((node.op_type, index))):
            return unbuilt
    return None


def registry_name(node: onnx.NodeProto) -> str:
    """The registry's name of `node`'s op: the op type in the default domain, else qualified
    by its domain (onnxruntime's contrib ops: `com.microsoft.Attention`, `ops/contrib.py`)."""
    if node.domain in ("", "ai.onnx"):
        return node.op_type
    return f"{node.domain}.{node.op_type}"


def _type_str(dtype: str) -> str:
    """An ONNX type string ("tensor(float)") for a numpy dtype name."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})"


def check_required_attributes(node: onnx.NodeProto, opset: int, name: str, where: str) -> None:
    """Refuse `node` when it lacks an attribute its ONNX schema at `opset` requires (a Loop
    without a body), naming the node and the attributes, before any converter reads them."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return
    given = {a.name for a in node.attribute}
    missing = sorted(k for k, a in schema.attributes.items() if a.required and k not in given)
    if missing:  # worded as the op registry words it for the ops it converts
        also = f"; so must {missing[1:]}" if len(missing) > 1 else ""
        raise OnnxImportError(f"{where}: attribute {missing[0]!r} of {node.op_type} must be "
                              f"given (node {name!r}){also}")  # fmt: skip


def check_node_types(
    node: onnx.NodeProto, opset: int, name: str, dtypes: list[str | None], where: str = "model"
) -> None:
    """Check the input dtypes of `node` against its ONNX schema at `opset`, as onnxruntime does:
    inputs typed by one type parameter (MatMul's A and B: T) must have one dtype, and each
    input a dtype the parameter (or the fixed type) allows. Raises OnnxImportError naming
    `where` (the model), the node, the inputs and the dtypes."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    formal = list(schema.inputs)
    if not formal:
        return
    bound: dict[str, list[tuple[str, str]]] = {}
    for i, (value, dtype) in enumerate(zip(node.input, dtypes, strict=False)):
        if not value or dtype is None:
            continue
        param = formal[min(i, len(formal) - 1)]
        if i >= len(formal) and param.option != param.option.Variadic:
            continue  # arity is checked by the graph layer
        type_str = param.type_str
        ok = allowed.get(type_str, {type_str})
        if _type_str(dtype) not in ok:
            raise OnnxImportError(
                f"{where}: {node.op_type} node {name!r}: input {value!r} ({param.name}) must "
                f"have a type of {type_str} ({', '.join(sorted(ok))} at opset {opset}), "
                f"not {dtype}"
            )
        if type_str in allowed:
            if param.option == param.option.Variadic and not param.is_homogeneous:
                continue
            bound.setdefault(type_str, []).append((value, dtype))
    for param, values in bound.items():
        if len({dtype for _, dtype in values}) > 1:
            listed = ", ".join(f"{value!r} {dtype}" for value, dtype in values)
            raise OnnxImportError(
                f"{where}: {node.op_type} node {name!r}: inputs of type parameter {param} "
                f"must have one dtype, not {listed}"
            )


def _checked_array(tensor: onnx.TensorProto, where: str) -> np.ndarray:
    """The numpy value of an initializer or Constant tensor, its dims checked first (exact,
    bounded: no allocation or reshape is tried for a shape that cannot exist)."""
    dtype = np_dtype(tensor.data_type, where)
    try:
        check_shape(list(tensor.dims), dtype)
    except ShapeError as exc:
        raise OnnxImportError(f"{where}: {exc}") from None
    try:
        return numpy_helper.to_array(tensor)
    except Exception as exc:  # noqa: BLE001  (bad data length, missing external data, ...)
        raise OnnxImportError(
            f"{where} must hold data of its shape {tuple(tensor.dims)}: {type(exc).__name__}: {exc}"
        ) from None


def np_dtype(elem_type: int, where: str) -> str:
    try:
        dtype = str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))
    except (KeyError, TypeError, ValueError):
        try:
            dtype = helper.tensor_dtype_to_string(elem_type) if elem_type else "undefined"
        except (KeyError, TypeError, ValueError):  # a code no ONNX version defines
            dtype = f"unknown type code {elem_type}"
    if dtype not in DTYPES:
        raise UnsupportedDtypeError(f"{where} must have one of {', '.join(DTYPES)}, not {dtype!r}")
    return dtype


class _Importer:
    def __init__(
        self, model: onnx.ModelProto, where: str, opset: int, weights: RawWeights | None = None
    ) -> None:
        self.model, self.where, self.opset, self.weights = model, where, opset, weights
        self.builder = GraphBuilder(model.graph.name or "main")
        self.scopes: list[dict[str, str]] = []  # the If branches and Loop bodies being inlined
        self.branch_results: set[str] = set()  # outputs of Ifs inlined at import
        self.sequences: dict[str, tuple[str, ...]] = {}  # sequence values: their items' names
        self.optionals: dict[str, str | None] = {}  # optional values: the value held, or None

    def add_inputs(
        self, constant_inputs: Mapping[str, Any], input_shapes: Mapping[str, Any]
    ) -> None:
        for index, init in enumerate(self.model.graph.initializer):
            where = f"{self.where}: initializer {init.name!r}"
            raw = self.weights.array(index, init, where) if self.weights else None
            if raw is not None:  # read into its own aligned buffer: kept, not copied
                self.builder.add_constant(init.name, raw, copy=False)
            else:
                self.builder.add_constant(init.name, _checked_array(init, where))
        for sparse in self.model.graph.sparse_initializer:
            name = sparse.values.name
            where = f"{self.where}: sparse initializer {name!r}"
            self.builder.add_constant(name, _sparse_array(sparse, where))
        for value in self.model.graph.input:
            if value.name in self.builder.types:
                continue
            if value.name in constant_inputs:
                if value.type.tensor_type.elem_type:  # the declared type must be ours too
                    np_dtype(
                        value.type.tensor_type.elem_type, f"{self.where}: input {value.name!r}"
                    )
                self.builder.add_constant(value.name, np.asarray(constant_inputs[value.name]))
                continue
            shape, dtype = self._value_type(value, input_shapes.get(value.name))
            try:
                self.builder.add_input(value.name, shape, dtype)
            except GraphError as exc:
                raise OnnxImportError(f"{self.where}: {exc}") from None

    def _value_type(self, value: onnx.ValueInfoProto, given: Sequence[int] | None) -> tuple:
        where = f"{self.where}: input {value.name!r}"
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            kind = value.type.WhichOneof("value")
            raise UnsupportedDtypeError(f"{where} must be a tensor, not {kind}")
        dtype = np_dtype(tensor.elem_type, where)
        hint = (
            f"pass input_shapes={{{value.name!r}: (d0, d1, ...)}} "
            f"(CLI: --shape {value.name}=d0,d1,...)"
        )
        if given is not None:
            return self._given_shape(value, given, where), dtype
        if not tensor.HasField("shape"):
            raise OnnxImportError(f"{where} must have a shape, not an unknown rank; {hint}")
        dims = []
        for dim in tensor.shape.dim:
            if not dim.HasField("dim_value"):
                raise OnnxImportError(
                    f"{where} must have static dims, not {dim.dim_param or '?'!r}; {hint}"
                )
            dims.append(dim.dim_value)
        return tuple(dims), dtype

    @staticmethod
    def _given_shape(value: onnx.ValueInfoProto, given: Sequence[int], where: str) -> tuple:
        """`input_shapes[name]`, checked against the rank and static dims the model declares."""
        try:
            dims = tuple(operator.index(d) for d in given)
        except TypeError:
            raise OnnxImportError(
                f"{where}: input_shapes must give integer dims, not {given!r}"
            ) from None
        tensor = value.type.tensor_type
        if tensor.HasField("shape"):
            declared = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
            if len(declared) != len(dims) or any(
                d is not None and d != g for d, g in zip(declared, dims, strict=False)
            ):
                shown = tuple(d if d is not None else "?" for d in declared)
                raise OnnxImportError(
                    f"{where}: input_shapes gives {dims}, which does not fit the declared "
                    f"shape {shown}"
                )
        return dims

    def convert(self, index: int, node: onnx.NodeProto) -> None:
        name = node.name or f"{node.op_type}_{index}"
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        check_required_attributes(node, self.opset, name, self.where)
        if node.op_type == "Constant":
            where = f"{self.where}: Constant node {name!r}"
            self.builder.add_constant(node.output[0], _constant_value(attrs, where))
            return
        if node.op_type == "If":
            self._inline_if(name, node, attrs)
            return
        if node.op_type == "Loop":
            unroll_loop(self, name, node, attrs)
            return
        if node.op_type == "Scan" or is_batched_scan(node):
            (unroll_batched_scan if is_batched_scan(node) else unroll_scan)(self, name, node, attrs)
            return
        if is_preview_op(node):
            convert_flex_attention(self, name, node, attrs)
            return
        if node.op_type in SEQUENCE_OPS:
            convert_sequence_op(self, name, node, attrs)
            return
        if node.op_type == "Identity" and node.input[0] in self.sequences:
            self.sequences[node.output[0]] = self.sequences[node.input[0]]
            return
        types = self.builder.types
        dtypes = [types[i].dtype if i in types else None for i in node.input]
        check_node_types(node, self.opset, name, dtypes, self.where)
        inputs, outputs = list(node.input), list(node.output)
        op = registry_name(node)
        if op == "Dropout":  # inference: identity, the mask all true
            convert_dropout(self, name, node)
            return
        if _is_training_batch_norm(node, self.opset):
            self._refuse_saved_statistics(name, outputs[3:])
            running = outputs[1:3]
            inputs[3:5], outputs = self._batch_statistics(name, inputs, running, attrs), outputs[:1]
            attrs["training_mode"] = 0
        attrs = self._adjust(op, attrs, inputs, outputs, name)
        if self._fold(op, name, inputs, outputs, attrs):
            return
        self.builder.add_node(op, inputs, attrs, name=name, outputs=outputs)

    def _refuse_saved_statistics(self, name: str, saved: list[str]) -> None:
        """BatchNormalization-9's saved mean and variance (for a backward pass) have no
        definition to follow: refused by name when something reads them, else dropped."""
        graph = self.model.graph
        read = {v for n in graph.node for v in n.input} | {v.name for v in graph.output}
        if any(v and v in read for v in saved):
            raise UnsupportedOpError(
                [("BatchNormalization with saved statistics outputs", name, self.opset)],
                where=self.where,
            )

    def _batch_statistics(self, name: str, inputs: list, running: list, attrs: dict) -> list[str]:
        """The per-channel mean and (biased) variance of the input over the batch and spatial
        axes: what a training-mode BatchNormalization normalizes by (torch's BatchNorm with
        `track_running_stats=False`, which uses them in eval mode too, exports so). The
        `running` outputs asked for get ONNX's `input * momentum + batch * (1 - momentum)`."""
        x = inputs[0]
        shape = self.builder.types[x].shape
        axes = self.builder.add_constant(
            self.builder.fresh(f"{name}_axes"), np.array([0, *range(2, len(shape))], np.int64)
        )
        channels = self.builder.add_constant(
            self.builder.fresh(f"{name}_channels"), np.array([shape[1]], np.int64)
        )

        def value(hint: str) -> str:
            return self.builder.fresh(f"{name}_{hint}")

        mean, dev, sq, var = value("mean"), value("dev"), value("sq"), value("var")
        flat_mean, flat_var = value("batch_mean"), value("batch_var")
        self.emit("ReduceMean", [x, axes], [mean], f"{name}/mean", keepdims=1)
        self.emit("Sub", [x, mean], [dev], f"{name}/dev")
        self.emit("Mul", [dev, dev], [sq], f"{name}/sq")
        self.emit("ReduceMean", [sq, axes], [var], f"{name}/var", keepdims=1)
        self.emit("Reshape", [mean, channels], [flat_mean], f"{name}/batch_mean")
        self.emit("Reshape", [var, channels], [flat_var], f"{name}/batch_var")
        dtype = self.builder.types[x].dtype
        keep, take = (
            self.builder.add_constant(value(hint), np.array(v, dtype))
            for hint, v in (("momentum", attrs.get("momentum", 0.9)),
                            ("complement", 1 - attrs.get("momentum", 0.9)))
        )  # fmt: skip
        for out, old, batch in zip(running, inputs[3:5], (flat_mean, flat_var), strict=False):
            if out:
                kept, taken = value("kept"), value("taken")
                self.emit("Mul", [old, keep], [kept], f"{name}/{out}_kept")
                self.emit("Mul", [batch, take], [taken], f"{name}/{out}_taken")
                self.emit("Add", [kept, taken], [out], f"{name}/{out}")
        return [flat_mean, flat_var]

    def _inline_if(self, name: str, node: onnx.NodeProto, attrs: dict[str, Any]) -> None:
        """An If whose condition is known at import (shape tests on static shapes, exporters'
        guards) becomes its taken branch: the branch's nodes, their values renamed apart from
        the graph's, then Identity nodes onto the If's outputs. A condition computed at run
        time selects between both branches (`onnx_if.select_branches`)."""
        cond = self.builder.constants.get(node.input[0]) if node.input else None
        if cond is None or cond.size != 1:
            select_branches(self, name, node, attrs)
            return
        branch = attrs["then_branch" if bool(cond.reshape(())) else "else_branch"]
        missing = unsupported_nodes(branch.node, self.opset)
        if missing:
            raise UnsupportedOpError(missing, where=f"{self.where}: If node {name!r}")
        if len(branch.output) != len(node.output):
            raise OnnxImportError(
                f"{self.where}: If node {name!r} has {len(node.output)} outputs but its branch "
                f"{branch.name!r} {len(branch.output)}"
            )
        results = self.convert_subgraph(branch, name, {})
        for out, result in zip(node.output, results, strict=True):
            if out:
                self.alias(result, out, f"{name}/{out}")
                self.branch_results.add(out)

    def convert_subgraph(self, graph: onnx.GraphProto, prefix: str, renamed: dict) -> list[str]:
        """Convert the nodes of an If branch or one Loop iteration's body, their values renamed
        apart from the graph's (`renamed` starts with the body's inputs bound); the graph names
        of its outputs. Node names are `prefix/name`."""

        def local(value: str) -> str:
            renamed[value] = self.builder.fresh(f"{prefix}/{value}")
            return renamed[value]

        self.scopes.append(renamed)  # nested Ifs and Loops see this one's values
        try:
            for init in graph.initializer:
                where = f"{self.where}: node {prefix!r} initializer {init.name!r}"
                self.builder.add_constant(local(init.name), _checked_array(init, where))
            for index, inner in enumerate(graph.node):
                copy = onnx.NodeProto()
                copy.CopyFrom(inner)
                copy.name = f"{prefix}/{inner.name or f'{inner.op_type}_{index}'}"
                copy.input[:] = [self._resolve(v) for v in inner.input]
                copy.output[:] = [local(v) if v else v for v in inner.output]
                self.convert(index, copy)
            return [self._resolve(r.name) for r in graph.output]
        finally:
            self.scopes.pop()

    def alias(self, value: str, out: str, name: str) -> None:
        """Give `value` (a tensor or a sequence) the further name `out`."""
        outputs = {v.name for v in self.model.graph.output}
        if value in self.sequences:
            self.sequences[out] = self.sequences[value]
        elif value in self.builder.constants and out not in outputs:  # shape math reads it
            self.builder.add_constant(out, self.builder.constants[value])
        else:  # a graph output stays a node's output
            self.builder.add_node("Identity", [value], name=name, outputs=[out])

    def refuse(self, variant: str, name: str) -> None:
        """Raise the UnsupportedOpError of `variant` at node `name`."""
        raise UnsupportedOpError([(variant, name, self.opset)], where=self.where)

    def emit(self, op: str, inputs: list[str], outputs: list[str], name: str, **attrs) -> None:
        """Convert a node the importer writes itself (folded when its inputs are constants)."""
        self.convert(0, helper.make_node(op, inputs, outputs, name=name, **attrs))

    def _resolve(self, value: str) -> str:
        """A value's name in the graph, seen from the innermost If branch being inlined."""
        for scope in reversed(self.scopes):
            if value in scope:
                return scope[value]
        return value

    def _adjust(self, op: str, attrs: dict, inputs: list, outputs: list, name: str) -> dict:
        # (EyeLike's dtype, the signal windows' output_datatype; ConstantOfShape's is below)
        for key in ("to", "output_dtype", "dtype", "output_datatype"):
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
        if op == "ConstantOfShape" and "value" in attrs:
            attrs.update(_fill_value(attrs["value"], f"{self.where}: {op} node {name!r} value"))
        if op == "Split" and "split" in attrs:
            split = self.builder.fresh(f"{name}_split")
            self.builder.add_constant(split, np.array(attrs.pop("split"), np.int64))
            inputs[1:] = [split]
        if op == "DFT" and self.opset < 20 and "axis" not in attrs:
            attrs["axis"] = 1  # (opset 17's attribute default; opset 20's axis input: -2)
        if op == "RoiAlign" and self.opset < 16:  # (opset 10 samples as output_half_pixel)
            attrs.setdefault("coordinate_transformation_mode", "output_half_pixel")
        if op == "Split" and (len(inputs) < 2 or not inputs[1]) and "num_outputs" not in attrs:
            attrs["num_outputs"] = len(outputs)
        return attrs

    def _fold(self, op: str, name: str, inputs: list, outputs: list, attrs: dict) -> bool:
        """Evaluate shape arithmetic (Shape, Size, small results of ops on constants) right away."""
        consts = self.builder.constants
        present = [i for i in inputs if i]
        if op not in SHAPE_ONLY_OPS and not (present and all(i in consts for i in present)):
            return False
        probe = GraphBuilder()
        probe.types, probe.constants = dict(self.builder.types), dict(consts)
        probe.add_node(op, inputs, attrs, name=name, outputs=outputs)
        types = [probe.types[o] for o in outputs if o]
        if not all(t.size <= _fold_limit(t.dtype) for t in types):
            return False
        node = probe.nodes[-1]
        if op in SHAPE_ONLY_OPS:
            # only the shape matters: a zero-strided view allocates nothing
            arrays = [np.broadcast_to(np.uint8(0), self.builder.types[inputs[0]].shape)]
        else:
            arrays = [consts[i] if i else None for i in inputs]
        values = get_op(op).run(node, arrays)
        for out, value in zip(outputs, values, strict=False):
            if out:
                self.builder.add_constant(out, np.asarray(value))
        return True

    def distinct_outputs(self) -> list[str]:
        """The model's output names, a repeated one given its own copy (an Identity).

        A module that returns one tensor twice (`return y, y`) exports one value listed as
        two outputs; the compiled Module names each output once, so the copy keeps both.
        """
        names: list[str] = []
        for value in self.model.graph.output:
            name = value.name
            if name in self.sequences or name in self.optionals:
                what = "a sequence" if name in self.sequences else "an optional"
                raise UnsupportedOpError(
                    [(f"{what} as a model output", name, self.opset)], where=self.where
                )
            if name in names:
                copy, k = f"{name}_1", 1
                while copy in self.builder.types:
                    k += 1
                    copy = f"{name}_{k}"
                self.builder.add_node("Identity", [name], name=f"{copy}/copy", outputs=[copy])
                name = copy
            names.append(name)
        return names

    def check_outputs(self, graph: Graph) -> None:
        """Each output has the element type the model declares (onnxruntime refuses a file
        whose types disagree). A declared shape that differs from the computed one is a warning,
        as in onnxruntime: annotations written by onnx's shape inference can be wrong (ceil_mode
        pools, some Slices), and torch's TorchScript exporter declares an If's other branch's
        shape at times (scatter_reduce's guard on a 0-d input declares the flattened shape), so
        an If's outputs are not compared."""
        for value, name in zip(self.model.graph.output, graph.outputs, strict=True):
            tensor = value.type.tensor_type
            declared = np_dtype(tensor.elem_type, self.where) if tensor.elem_type else None
            if declared is not None and declared != graph.types[name].dtype:
                raise OnnxImportError(  # onnxruntime refuses such a file too (a type error)
                    f"{self.where}: output {value.name!r} must have the declared element type "
                    f"{declared}, not the inferred {graph.types[name].dtype}"
                )
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
            if not tensor.HasField("shape") or None in dims or value.name in self.branch_results:
                continue
            ours = graph.types[name]
            if tuple(dims) != ours.shape:  # onnxruntime warns and uses its own shape too
                warnings.warn(
                    f"{self.where}: output {value.name!r} is declared with shape {tuple(dims)} "
                    f"but its ops give {ours.shape}: the computed shape is used (annotations "
                    f"from onnx's shape inference can be wrong, e.g. after a ceil_mode pool)",
                    stacklevel=2,
                )


def _fill_value(tensor: onnx.TensorProto, where: str) -> dict[str, Any]:
    """ConstantOfShape's one-element value tensor as the graph op's scalar `value` and `dtype`."""
    array = _checked_array(tensor, where)
    if array.size != 1:
        raise OnnxImportError(f"{where} must hold one element, not {array.size}")
    return {"value": array.reshape(()).item(), "dtype": str(array.dtype)}


def _sparse_array(sparse: onnx.SparseTensorProto, where: str) -> np.ndarray:
    """The dense value of a sparse tensor (a sparse initializer or Constant): its values at
    its indices (linear, or one row of coordinates each), zeros elsewhere; indices checked."""
    values = _checked_array(sparse.values, f"{where} (values)").reshape(-1)
    dense = np.zeros(check_shape(list(sparse.dims), str(values.dtype)), values.dtype)
    indices = _checked_array(sparse.indices, f"{where} (indices)") if values.size else None
    if indices is None:
        return dense
    if indices.ndim == 1 and indices.shape[0] == values.size:
        flat = indices
    elif indices.shape == (values.size, dense.ndim):
        if ((indices < 0) | (indices >= np.array(dense.shape))).any():
            raise OnnxImportError(f"{where}: sparse indices must lie in dims {list(dense.shape)}")
        flat = np.ravel_multi_index(tuple(indices.T), dense.shape) if dense.ndim else indices[:, 0]
    else:
        raise OnnxImportError(
            f"{where}: sparse indices must be [{values.size}] or [{values.size}, {dense.ndim}], "
            f"not {list(indices.shape)}"
        )
    if ((flat < 0) | (flat >= dense.size)).any():
        raise OnnxImportError(f"{where}: sparse indices must lie in dims {list(dense.shape)}")
    dense.reshape(-1)[flat] = values
    return dense


def _constant_value(attrs: dict[str, Any], where: str = "Constant") -> np.ndarray:
    if "value" in attrs:
        return _checked_array(attrs["value"], where)
    if "sparse_value" in attrs:
        return _sparse_array(attrs["sparse_value"], where)
    for key, dtype in (
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if key in attrs:
            return np.array(attrs[key], dtype)
    raise OnnxImportError(
        f"{where} must have value, sparse_value, value_float(s) or value_int(s), not "
        f"{sorted(attrs)}"
    )


def _inline_functions(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    """`model` with its local functions' calls replaced by their bodies (onnx's inliner); the
    initializers, which the in-place weight reader indexes, stay as they are."""
    from onnx import inliner

    names = [t.name for t in model.graph.initializer]
    try:
        inlined = inliner.inline_local_functions(model)
    except Exception as exc:  # noqa: BLE001  (the inliner raises RuntimeError and friends)
        raise OnnxImportError(
            f"{where}: its local functions could not be inlined: {type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
        ) from None
    if [t.name for t in inlined.graph.initializer] != names:
        raise OnnxImportError(f"{where}: inlining its local functions changed its initializers")
    return inlined


def from_onnx(
    model: str | Path | bytes | onnx.ModelProto,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constant_inputs: Mapping[str, np.ndarray] | None = None,
) -> Graph:
    """Import an ONNX model into the graph IR.

    Args:
        model: a file path, serialized bytes or a ModelProto.
        input_shapes: static shapes for inputs with symbolic dims or no shape (they must fit
            the declared rank and static dims).
        constant_inputs: graph inputs to bind to fixed values (they become constants).

    Returns:
        A `Graph` whose outputs are the model's outputs, with inferred static types.

    Raises:
        OnnxImportError: malformed file, opset below 7 or unknown to onnx (7 to 12 are upgraded
            to 13 first, `onnx_upgrade`), a failed upgrade, symbolic dims or
            no shape, a shape mismatch, a tensor past MAX_TENSOR_BYTES, mismatched or
            disallowed input dtypes, a bad attribute (node named).
        UnsupportedOpError: listing every unsupported node (op type, node name, opset).
    """
    proto, where, weights = read_model(model)
    try:
        if proto.functions:  # model-local functions (exporters' modules): inlined, as by ORT
            proto = _inline_functions(proto, where)
        proto = rewrite_masked_assignments(proto)  # x[mask] = v: a Where, not NonZero
        proto = drop_unread_outputs(proto)  # exporters' unread Dropout masks, MaxPool indices
        proto = drop_false_training_modes(proto)  # Dropout(x, ratio, false): inference
        opset = default_opset(proto, where)
        if opset < MIN_OPSET:  # the converter rewrites initializers: read the model whole
            if weights is not None:
                weights.close()
                proto, where, weights = read_model(model, in_place=False)
            proto, opset = upgrade(proto, where, opset, MIN_OPSET), MIN_OPSET
        missing = unsupported_ops(proto, opset)
        if missing:
            raise UnsupportedOpError(missing, where=where)
        _check_input_shapes(input_shapes, proto, where)
        importer = _Importer(proto, where, opset, weights)
        importer.add_inputs(constant_inputs or {}, input_shapes or {})
    finally:
        if weights is not None:
            weights.close()
    for index, node in enumerate(proto.graph.node):
        try:
            importer.convert(index, node)
        except GraphError as exc:
            if node.op_type in DATA_DEPENDENT_SHAPE_OPS and "decides the output shape" in str(exc):
                items = _data_dependent_nodes(proto, index, opset)
                raise UnsupportedOpError(items, where=where) from None
            raise OnnxImportError(f"{where}: {exc}") from None
        except UnsupportedOpError as exc:  # a variant the op's type inference refused
            items = [(op, name, opset if v is None else v) for op, name, v in exc.items]
            raise UnsupportedOpError(items, where=where) from None
    graph = importer.builder.build(importer.distinct_outputs())
    importer.check_outputs(graph)
    return graph


def _data_dependent_nodes(
    proto: onnx.ModelProto, first: int, opset: int
) -> list[tuple[str, str, int | None]]:
    """The node at `first`, whose output shape would depend on run-time values (NonZero of a
    computed mask, ...), and every later node of those ops whose inputs are not all weights:
    one error that names them all and says why (a detector's box selection has hundreds)."""
    weights = {t.name for t in proto.graph.initializer}
    items = []
    for i, node in enumerate(proto.graph.node[first:], start=first):
        if node.op_type not in DATA_DEPENDENT_SHAPE_OPS:
            continue
        if i > first and all(not name or name in weights for name in node.input):
            continue
        items.append((node.op_type, node.name or f"{node.op_type}_{i}", opset))
    return items


def _check_input_shapes(input_shapes: Any, proto: onnx.ModelProto, where: str) -> None:
    """`input_shapes` must map names of the model's inputs (a typo would be ignored)."""
    if input_shapes is None:
        return
    if not isinstance(input_shapes, Mapping):
        raise OnnxImportError(f"{where}: input_shapes must map input names to shapes, not "
                              f"{type(input_shapes).__name__} {input_shapes!r:.60}")  # fmt: skip
    names = [i.name for i in proto.graph.input]
    unknown = sorted(str(k) for k in input_shapes if k not in names)
    if unknown:
        raise OnnxImportError(f"{where}: input_shapes names {unknown}, which the model does not "
                              f"take; its inputs are {names}")  # fmt: skip


def graph_inputs(model: str | Path | bytes | onnx.ModelProto) -> dict[str, list[int | None] | None]:
    """The model's inputs that are not weights, name -> dims (a symbolic dimension is None; an
    input without a shape is None), read without the weights' bytes: what a caller needs to
    name --input arrays and --shape dims before `from_onnx` reads the same file.

    Raises:
        OnnxImportError: as `from_onnx`, for a file that is missing, empty or not ONNX.
    """
    proto, _, weights = read_model(model)
    if weights is not None:
        weights.close()
    initializers = {t.name for t in proto.graph.initializer}
    out: dict[str, list[int | None] | None] = {}
    for value in proto.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        out[value.name] = dims if tensor.HasField("shape") else None
    return out


__all__ = [
    "OnnxImportError",
    "UnsupportedDtypeError",
    "UnsupportedOpError",
    "from_onnx",
    "graph_inputs",
    "load_model",
    "read_model",
]

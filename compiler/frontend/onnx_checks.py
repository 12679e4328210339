"""Checks of an ONNX model before and while it is imported (`onnx.py`): the opset a model may
use and which op definitions changed after it, the ops and variants that are not built (all
listed at once), required attributes, each input's element type against the op's schema, and
the errors the importer raises (`OnnxImportError`, `UnsupportedDtypeError`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..graph.ir import DTYPES, ShapeError, check_shape
from ..graph.registry import ONNX_OPSETS, is_registered
from .onnx_dropout import RANDOM_OPS, RANDOM_REASON
from .onnx_loop import SEQUENCE_OPS
from .onnx_preview import is_preview_op
from .onnx_scan import is_batched_scan
from .onnx_upgrade import OLDEST_OPSET

# The op definitions the importer implements are those of opsets 13 to 21.
MIN_OPSET, MAX_OPSET = ONNX_OPSETS
# Ops the importer turns into something else than a node of the same name.
_SPECIAL = {"Constant", "Dropout", "If", "Loop", "Scan", *SEQUENCE_OPS}


class OnnxImportError(ValueError):
    """The ONNX model cannot be imported: malformed file, bad opset, unknown input dims."""


#: element types ONNX files pack two to a byte (held one to a byte once imported)
PACKED_4BIT = ("int4", "uint4", "float4_e2m1fn")


class UnsupportedDtypeError(OnnxImportError):
    """A tensor of the model has an element type the graph layer does not support."""


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

"""An ONNX Loop that runs at run time: one graph node `Loop` whose body is a model of its own.

`onnx_loop.unroll_loop` hands over a Loop without scan outputs whose trip count or condition is
computed at run time (or whose unrolled copies would pass the cap). Every loop-carried value
keeps its shape from one iteration to the next, so the graph stays static: the node's outputs
have the carried values' types.

The body becomes a self-contained ONNX model (`compiler/graph/ops/loop.py` gives its form): its
inputs the iteration number, the condition, the carried values (typed as the values the loop
starts from) and the outer values it reads, its outputs the condition and the carried values.
An outer value the import has folded to a constant is an initializer of the body; any other is
an input of the node. The body is imported here once, so a body that does not compile, or that
changes a carried value's shape, is refused at import, naming the node.

Before: `%v = Loop[body: (i, c, v) -> (c' = i < %n, v * %w)](%M, %true, %v0)` (`%M`, `%n` given
        at run time, `%w` a weight)
After:  `%v = Loop[body=<model: (i, c, v) -> (i < n, v * w), w an initializer>](%M, %true,
        %v0, %n)`
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...runtime.dtypes import is_narrow
from ..graph.ir import DataDependentShapeError
from ..graph.ops.loop import encode_body
from ..graph.registry import DATA_DEPENDENT_SHAPE_OPS, UnsupportedOpError

if TYPE_CHECKING:
    from ..graph.ir import Graph, TensorType
    from .onnx import _Importer


def _error(message: str) -> Exception:
    from .onnx import OnnxImportError  # (onnx.py imports this module's importer)

    return OnnxImportError(message)


def free_names(graph: onnx.GraphProto) -> list[str]:
    """The values `graph` (and the graphs nested in its nodes) reads from outside itself, in
    order of first use."""
    defined = {v.name for v in graph.input} | {i.name for i in graph.initializer}
    defined |= {i.values.name for i in graph.sparse_initializer}
    found: dict[str, None] = {}

    def need(name: str) -> None:
        if name and name not in defined:
            found.setdefault(name)

    for node in graph.node:
        for name in node.input:
            need(name)
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                for name in free_names(sub):
                    need(name)
        defined.update(node.output)
    for out in graph.output:
        need(out.name)
    return list(found)


def runtime_loop(
    importer: _Importer,
    name: str,
    node: onnx.NodeProto,
    body: onnx.GraphProto,
    trips: np.ndarray | None,
    cond: np.ndarray | None,
) -> None:
    """Convert Loop `node` into one graph node `Loop`. `trips` and `cond`: the trip count and
    first condition when they are constants (else None).

    Raises:
        UnsupportedOpError: scan outputs whose length is known only at run time (a trip count
            or condition computed then), naming the node.
        OnnxImportError: a body that does not compile, or a carried value whose shape changes.
    """
    from .onnx import from_onnx

    builder, where = importer.builder, f"{importer.where}: Loop node {name!r}"
    trip_name, cond_name = (list(node.input) + ["", ""])[:2]
    carried_in = list(node.input[2:])
    scan_outs = list(node.output[len(carried_in) :]) if any(node.output[len(carried_in) :]) else []
    listed = [v for v in carried_in if v in importer.sequences or v in importer.optionals]
    if listed:  # a sequence's length, or an optional's presence, would be a run-time fact
        importer.refuse(
            "Loop run at run time carrying a sequence or optional (a list built in the loop: its "
            f"length is known only at run time; {listed[0]!r})", name)  # fmt: skip
    if not carried_in and not scan_outs:
        raise _error(f"{where} runs at run time and gives no value: it computes nothing")
    if scan_outs and trip_name and trips is None:
        importer.refuse("Loop with scan outputs and a trip count computed at run time", name)
    if scan_outs and (not trip_name or (cond_name and cond is None)):
        importer.refuse("Loop with scan outputs and a condition computed at run time", name)
    for value, want in ((trip_name, "int64"), (cond_name, "bool")):
        if value and builder.types[value].dtype != want:
            raise _error(f"{where}: input {value!r} must be {want}, not {builder.types[value]}")
    inputs = [
        helper.make_tensor_value_info(body.input[0].name, onnx.TensorProto.INT64, []),
        helper.make_tensor_value_info(body.input[1].name, onnx.TensorProto.BOOL, []),
    ]
    carried_types = [builder.types[v] for v in carried_in]
    for inner, ty in zip(body.input[2:], carried_types, strict=True):
        inputs.append(value_info(inner.name, ty, where))
    initializers, captured = [], []
    for outer in free_names(body):
        value = importer._resolve(outer)
        if value in importer.sequences or value in importer.optionals:
            raise _error(f"{where}: its body reads {outer!r}, a sequence or optional (unsupported)")
        if value in builder.constants:
            initializers.append(
                numpy_helper.from_array(np.asarray(builder.constants[value]), outer)
            )
        elif value in builder.types:
            inputs.append(value_info(outer, builder.types[value], where))
            captured.append(value)
        else:
            raise _error(f"{where}: its body reads {outer!r}, which is not defined before it")
    count = 1 + len(carried_in) + len(scan_outs)
    outputs = [helper.make_tensor_value_info(o.name, 0, None) for o in body.output[:count]]
    graph = helper.make_graph(list(body.node), f"{name}_body", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=list(importer.model.opset_import))
    model.ir_version = importer.model.ir_version or onnx.IR_VERSION
    data = model.SerializeToString()
    try:
        imported = from_onnx(data)
    except UnsupportedOpError as exc:  # the body's own errors, placed at this node
        if exc.items and all(op in DATA_DEPENDENT_SHAPE_OPS for op, _, _ in exc.items):
            # a body of data-dependent shapes: the loop can run in the model's tail
            error = DataDependentShapeError(
                f"{where}: its body has shapes that depend on run-time values "
                f"({', '.join(sorted({op for op, _, _ in exc.items}))})"
            )
            error.refusal = UnsupportedOpError(exc.items, where=f"{where}, in its body")
            raise error from exc
        raise UnsupportedOpError(exc.items, where=f"{where}, in its body") from exc
    except Exception as exc:  # noqa: BLE001  (any other import error of the body)
        raise _error(f"{where}, in its body: {exc}") from exc
    cond_out, *carried_out = (
        imported.types[o] for o in imported.model_outputs[: count - len(scan_outs)]
    )
    if cond_out.dtype != "bool" or int(np.prod(cond_out.shape)) != 1:
        raise _error(f"{where}: its body's condition must be one bool, not {cond_out}")
    for k, (before, after) in enumerate(zip(carried_types, carried_out, strict=True)):
        if (before.shape, before.dtype) != (after.shape, after.dtype):
            raise _error(
                f"{where}: loop-carried value {k} ({body.input[2 + k].name!r}) is {before} before "
                f"the loop and {after} after an iteration; a loop that runs at run time must keep "
                "its carried values' shapes (TensorForge compiles static shapes)"
            )
    has_cond = bool(cond_name)
    if scan_outs and cond_name:  # true at first (else it was unrolled, zero times): and after?
        if not _stays_true(imported, body):
            importer.refuse(
                "Loop with scan outputs whose body computes its condition at run time", name
            )
        has_cond = False  # a condition true in every iteration: a for loop
    given = list(node.output[: len(carried_in)])
    named = given + [""] * (len(carried_in) - len(given)) + scan_outs
    outs = [o or builder.fresh(f"{name}/unused_{k}") for k, o in enumerate(named)]
    attrs = {
        "body": encode_body(data),
        "carried": len(carried_in),
        "has_trips": int(bool(trip_name)),
        "has_cond": int(has_cond),
        "scans": len(scan_outs),
        "name": name,
    }
    fixed = [v for v in (trip_name, cond_name if has_cond else "") if v]
    builder.add_node(
        "Loop", [*fixed, *carried_in, *captured], attrs, name=builder.fresh(name), outputs=outs
    )


def _stays_true(imported: Graph, body: onnx.GraphProto) -> bool:
    """Whether the body's condition out is true whenever its condition in is: a constant true,
    or the condition in passed through."""
    out = imported.model_outputs[0]
    if out in imported.constants:
        return bool(np.asarray(imported.constants[out]).reshape(-1)[0])
    return body.output[0].name == body.input[1].name


def value_info(name: str, ty: TensorType, where: str, narrow: bool = False) -> onnx.ValueInfoProto:
    """The ONNX declaration of value `name` of type `ty`, an input of a model the importer
    writes (a run-time loop's body, a data-dependent tail): `where` names it in errors. A
    narrow type (bfloat16, float8, int4...) only with `narrow` (a loop kernel's body would move
    it through the arena as its storage integer, which is not built)."""
    if is_narrow(ty.dtype) and not narrow:
        raise _error(f"{where}: a {ty.dtype} value ({name!r}) passed into it is unsupported")
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(ty.dtype))
    return helper.make_tensor_value_info(name, elem, list(ty.shape))

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
from ..graph.ops.loop import encode_body

if TYPE_CHECKING:
    from ..graph.ir import TensorType
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
    importer: _Importer, name: str, node: onnx.NodeProto, body: onnx.GraphProto
) -> None:
    """Convert Loop `node` (no scan output used) into one graph node `Loop`."""
    from .onnx import from_onnx

    builder, where = importer.builder, f"{importer.where}: Loop node {name!r}"
    trip_name, cond_name = (list(node.input) + ["", ""])[:2]
    carried_in = list(node.input[2:])
    if not carried_in:
        raise _error(f"{where} runs at run time and carries no value: it computes nothing")
    for value, want in ((trip_name, "int64"), (cond_name, "bool")):
        if value and builder.types[value].dtype != want:
            raise _error(f"{where}: input {value!r} must be {want}, not {builder.types[value]}")
    inputs = [
        helper.make_tensor_value_info(body.input[0].name, onnx.TensorProto.INT64, []),
        helper.make_tensor_value_info(body.input[1].name, onnx.TensorProto.BOOL, []),
    ]
    carried_types = [builder.types[v] for v in carried_in]
    for inner, ty in zip(body.input[2:], carried_types, strict=True):
        inputs.append(_value_info(inner.name, ty, where))
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
            inputs.append(_value_info(outer, builder.types[value], where))
            captured.append(value)
        else:
            raise _error(f"{where}: its body reads {outer!r}, which is not defined before it")
    outputs = [
        helper.make_tensor_value_info(o.name, 0, None) for o in body.output[: 1 + len(carried_in)]
    ]
    graph = helper.make_graph(list(body.node), f"{name}_body", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=list(importer.model.opset_import))
    model.ir_version = importer.model.ir_version or onnx.IR_VERSION
    data = model.SerializeToString()
    try:
        imported = from_onnx(data)
    except Exception as exc:  # the body's own error, placed at this node
        raise type(exc)(f"{where}, in its body: {exc}") from exc
    cond_out, *carried_out = (imported.types[o] for o in imported.model_outputs)
    if cond_out.dtype != "bool" or int(np.prod(cond_out.shape)) != 1:
        raise _error(f"{where}: its body's condition must be one bool, not {cond_out}")
    for k, (before, after) in enumerate(zip(carried_types, carried_out, strict=True)):
        if (before.shape, before.dtype) != (after.shape, after.dtype):
            raise _error(
                f"{where}: loop-carried value {k} ({body.input[2 + k].name!r}) is {before} before "
                f"the loop and {after} after an iteration; a loop that runs at run time must keep "
                "its carried values' shapes (TensorForge compiles static shapes)"
            )
    outs = [
        o or builder.fresh(f"{name}/unused_{k}")
        for k, o in enumerate(node.output[: len(carried_in)])
    ]
    outs += [builder.fresh(f"{name}/unused_{k}") for k in range(len(outs), len(carried_in))]
    attrs = {
        "body": encode_body(data),
        "carried": len(carried_in),
        "has_trips": int(bool(trip_name)),
        "has_cond": int(bool(cond_name)),
        "name": name,
    }
    fixed = [v for v in (trip_name, cond_name) if v]
    builder.add_node(
        "Loop", [*fixed, *carried_in, *captured], attrs, name=builder.fresh(name), outputs=outs
    )


def _value_info(name: str, ty: TensorType, where: str) -> onnx.ValueInfoProto:
    if is_narrow(ty.dtype):
        raise _error(
            f"{where}: a {ty.dtype} value ({name!r}) in a loop run at run time is unsupported"
        )
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(ty.dtype))
    return helper.make_tensor_value_info(name, elem, list(ty.shape))

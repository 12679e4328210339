"""Models of opsets 1 to 12 (the ONNX model zoo's, older exporters') upgraded to opset 13 by
onnx's own version converter before import, with the semantics the converter drops put back:
a Resize made from an opset-7-10 Upsample or Resize gets that op's coordinate rule, and the
broadcasts of opsets 1-6 (arithmetic's `broadcast`/`axis`, PRelu's per-channel slope) are
written as numpy ones first (`_legacy_broadcasts`).

Before opset 11, Upsample and Resize mapped output pixel `i` to input coordinate `i / scale`
(what opset 11 calls "asymmetric"), and onnxruntime's nearest mode takes the floor of it when
enlarging and the ceiling when shrinking. The converter emits an opset-13 Resize without a
`coordinate_transformation_mode`, so it would default to "half_pixel" and move every sample
(0.21 relative error on a bilinear x2 upsample). The upgraded Resize nodes are matched to the
original ones by order (subgraphs' too) and get `coordinate_transformation_mode="asymmetric"`
and, for nearest, `nearest_mode` "floor" or "ceil".

The converter also leaves Hardmax as it is, though opset 13 changed its meaning like Softmax's
(which the converter does rewrite): before, `axis` flattened the input to 2-D at that axis and
the hardmax ran over the whole trailing block. Each old Hardmax becomes Flatten(axis), a
Hardmax over the last axis, and a Reshape back to the input's shape.

Before the upgrade, the experimental ops that opsets 7-9 still define (and onnxruntime still
runs) but the converter has no schema for are rewritten: ImageScaler (tiny-YOLOv2's and Emotion
FERPlus's first node) into Mul and Add, Scale into Mul, Crop by borders into Slice, and a
per-activation (spatial=0) BatchNormalization, which the converter refuses, into element-wise
ops; a node whose op the model's opset does not define (Affine, a centre Crop, a misspelt op)
is listed by name in an UnsupportedOpError instead of failing inside the converter. IR-3 files
whose initializers are not also graph inputs are converted as IR 4 (the converter refuses them),
and the declared output and value_info types are kept (its shape inference overwrites them).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter

#: the oldest default-domain opset the importer upgrades: every one (what the converter has no
#: adapter for, such as opset 1's Pad or Cast, it refuses by name)
OLDEST_OPSET = 1
#: the opset that gave arithmetic numpy broadcasting (before: a `broadcast` flag and an `axis`)
#: and PRelu a numpy-broadcast slope (before: one slope per channel, axis 1)
_NUMPY_BROADCAST = 7
#: the ops whose `broadcast`/`axis` attributes the converter's 6->7 adapter turns into numpy
#: broadcasting (for an `axis` other than the suffix one it writes a broken Unsqueeze)
_LEGACY_BROADCAST_OPS = ("Add", "Sub", "Mul", "Div", "Pow")
_RESIZES = ("Upsample", "Resize")
#: the last opset whose Upsample/Resize had the old coordinate rule
_OLD_RESIZE = 10
#: the first opset whose Scan has no batch axis
_SCAN_UNBATCHED = 9
#: (domain, op) under which an opset-8 Scan passes the version converter, which would drop its
#: batch axis (`onnx_scan.unroll_batched_scan` converts it; its body is upgraded on its own)
BATCHED_SCAN = ("tensorforge.upgrade", "Scan8")


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Values of the initializers and Constant nodes (small ones only: scales, sizes)."""
    found = {t.name: t for t in graph.initializer if np.prod(t.dims) <= 16}
    for node in _all_nodes(graph):
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = node.attribute[0].t
    return {name: numpy_helper.to_array(t) for name, t in found.items()}


def _old_scales(
    node: onnx.NodeProto, consts: dict[str, np.ndarray], graph: onnx.GraphProto, opset: int
) -> np.ndarray | None:
    """The scales of an opset-7-10 Upsample/Resize: an attribute until opset 9, then input 1
    (a constant, or computed from constants alone: exporters' Concat of Constants)."""
    for attr in node.attribute:
        if attr.name == "scales":
            return np.asarray(attr.floats, np.float64)
    if len(node.input) < 2:
        return None
    if node.input[1] in consts:
        return consts[node.input[1]].astype(np.float64)
    value = _evaluate(graph, node.input[1], opset)
    return None if value is None else value.astype(np.float64)


def _model_at(graph: onnx.GraphProto, opset: int) -> onnx.ModelProto:
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _evaluate(graph: onnx.GraphProto, name: str, opset: int) -> np.ndarray | None:
    """The value of `name` when the top-level nodes computing it read only small initializers
    and Constant nodes (onnx's reference evaluator runs them); else None."""
    producer = {o: n for n in graph.node for o in n.output if o}
    small = {t.name: t for t in graph.initializer if np.prod(t.dims) <= 16}
    needed, inits, todo = [], {}, [name]
    while todo:
        value = todo.pop()
        if value in small:
            inits[value] = small[value]
        elif value in producer and producer[value] not in needed:
            needed.append(producer[value])
            todo += [i for i in producer[value].input if i]
        elif value not in producer:
            return None  # a graph input, or a large weight
    order = [n for n in graph.node if n in needed]
    if any(a.type in (a.GRAPH, a.GRAPHS) for n in order for a in n.attribute):
        return None
    try:
        from onnx.reference import ReferenceEvaluator

        out = helper.make_value_info(name, onnx.TypeProto())
        sub = helper.make_graph(order, "scales", [], [out], list(inits.values()))
        (value,) = ReferenceEvaluator(_model_at(sub, opset)).run(None, {})
    except Exception:  # noqa: BLE001  (anything it cannot run leaves the default rule)
        return None
    return np.asarray(value)


def _nearest_mode(scales: np.ndarray | None, where: str, name: str) -> str:
    """onnxruntime's rule for the old nearest mode: floor when enlarging, ceiling when
    shrinking (one direction per node; scales of 1 go either way)."""
    if scales is None or bool(np.all(scales >= 1)):
        return "floor"
    if bool(np.all(scales <= 1)):
        return "ceil"
    raise onnx_import_error(
        f"{where}: nearest {name!r} both enlarges and shrinks (scales {scales.tolist()}); "
        "before opset 11 that rounds per direction, which an opset-13 Resize cannot express"
    )


def onnx_import_error(message: str) -> Exception:
    from .onnx import OnnxImportError

    return OnnxImportError(message)


def upgrade(model: onnx.ModelProto, where: str, opset: int, target: int) -> onnx.ModelProto:
    """`model` (default-domain `opset`, OLDEST_OPSET <= opset < target) at opset `target`.

    Raises:
        OnnxImportError: naming `where`, when onnx's converter fails (with its reason) or a
            nearest resize both enlarges and shrinks.
        UnsupportedOpError: listing the nodes whose op `opset` does not define (the
            experimental ops removed at opset 10 but ImageScaler, Scale and Crop by borders).
    """
    if model.ir_version < _IR_INITIALIZERS_APART:
        model = _with_ir_version(model, _IR_INITIALIZERS_APART)
    rewritten = (*_REMOVED_REWRITES, *_VARIANT_REWRITES)
    if any(n.op_type in rewritten and n.domain in ("", "ai.onnx") for n in model.graph.node):
        model = _rewrite_old_ops(model)
    if opset < _NUMPY_BROADCAST:
        model = _legacy_broadcasts(model)
    if opset < _SCAN_UNBATCHED and any(n.op_type == "Scan" for n in model.graph.node):
        model = _hide_batched_scans(model)
    _check_schemas(model.graph, where, opset)
    consts = _constants(model.graph)
    old = [  # opset 11 gave Resize its coordinate modes: only older ones need the rule
        n
        for n in _all_nodes(model.graph)
        if n.op_type in _RESIZES and n.domain in ("", "ai.onnx") and opset <= _OLD_RESIZE
    ]
    rules = []
    for i, node in enumerate(old):
        mode = helper.get_node_attr_value(node, "mode") if any(
            a.name == "mode" for a in node.attribute
        ) else b"nearest"  # fmt: skip
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        name = node.name or f"{node.op_type}_{i}"
        rules.append(
            _nearest_mode(_old_scales(node, consts, model.graph, opset), where, name)
            if mode == "nearest"
            else None
        )
    try:
        new = version_converter.convert_version(model, target)
    except Exception as exc:  # noqa: BLE001  (the converter raises RuntimeError, ValueError...)
        raise onnx_import_error(
            f"{where}: opset {opset} could not be upgraded to opset {target} by onnx's version "
            f"converter: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
        ) from None
    resizes = [n for n in _all_nodes(new.graph) if n.op_type == "Resize" and opset <= _OLD_RESIZE]
    if len(resizes) != len(old):
        raise onnx_import_error(
            f"{where}: upgrading opset {opset} to {target} turned {len(old)} Upsample/Resize "
            f"nodes into {len(resizes)} Resize nodes; their coordinate rule cannot be kept"
        )
    for node, nearest in zip(resizes, rules, strict=True):
        keep = [a for a in node.attribute if a.name not in ("coordinate_transformation_mode",
                                                            "nearest_mode")]  # fmt: skip
        del node.attribute[:]
        node.attribute.extend(keep)
        node.attribute.append(helper.make_attribute("coordinate_transformation_mode", "asymmetric"))
        if nearest is not None:
            node.attribute.append(helper.make_attribute("nearest_mode", nearest))
    for node in new.graph.node:
        if (node.domain, node.op_type) == BATCHED_SCAN:
            _upgrade_body(node, model, where, opset, target)
    if opset < _NEW_HARDMAX:
        _coerce_hardmax(new.graph, _value_names(new.graph))
    _keep_declared_types(new.graph, model.graph)
    return new


def _keep_declared_types(new: onnx.GraphProto, old: onnx.GraphProto) -> None:
    """The graph outputs and value_info as the model declared them: the converter's shape
    inference writes what it infers into them (a wrong intermediate value_info, which
    onnxruntime ignores, would become a wrong declared output shape)."""
    for out, declared in zip(new.output, old.output, strict=True):
        out.type.CopyFrom(declared.type)
    del new.value_info[:]
    new.value_info.extend(old.value_info)


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes of `graph` and of its subgraphs (If branches, Loop bodies), each node before
    its subgraphs' nodes: one order, the same before and after the converter."""
    found = []
    for node in graph.node:
        found.append(node)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                found += _all_nodes(sub)
    return found


def _legacy_broadcasts(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` (opset below 7; `model` itself when no node needs it) whose broadcasts
    mean under numpy's rule what they meant under the old one, by an Unsqueeze of the second
    operand (axes as an attribute, as opsets 1-12 write it), so the converter has nothing left
    to move:

    - Add/Sub/Mul/Div/Pow with `broadcast=1` and an `axis` matched B's dimensions to A's from
      `axis` on: B gains trailing 1s up to A's rank and the `axis` goes (onnx's adapter writes
      the Unsqueeze's axes as a third input of the arithmetic node for targets from 13);
    - PRelu's 1-D slope of C > 1 values was one per channel (axis 1): it gains A's rank - 2
      trailing 1s (the converter keeps it as it is, which numpy would broadcast on the last
      axis: PReLU exported by torch before opset 7).

    Ranks come from onnx's shape inference; a node whose ranks it cannot give is left to the
    converter."""
    if not any(_legacy_broadcast(n) for n in model.graph.node):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(copy).graph
    except Exception:  # noqa: BLE001  (no ranks: every node is left as it is)
        return copy
    ranks = {
        v.name: len(v.type.tensor_type.shape.dim)
        for v in [*inferred.input, *inferred.value_info, *inferred.output]
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")
    }
    ranks.update({t.name: len(t.dims) for t in copy.graph.initializer})
    taken = _value_names(copy.graph)
    nodes = []
    for i, node in enumerate(copy.graph.node):
        kind = _legacy_broadcast(node)
        extra = None  # how many trailing 1s the second operand gains
        if kind == "axis":
            a, b = (ranks.get(v) for v in node.input[:2])
            if a is not None and b is not None:
                axis = next(x.i for x in node.attribute if x.name == "axis")
                extra = a - (axis + a if axis < 0 else axis) - b
                keep = [x for x in node.attribute if x.name != "axis"]
                del node.attribute[:]
                node.attribute.extend(keep)
        elif kind == "slope":
            a, b = (ranks.get(v) for v in node.input)
            if a is not None and a > 2 and b == 1:
                extra = a - 2
        if extra is not None and extra > 0:
            slope = node.input[1]
            unsqueezed = _prefix(f"{slope}__unsqueeze{i}", taken)
            nodes.append(helper.make_node("Unsqueeze", [slope], [unsqueezed],
                                          axes=list(range(b, b + extra))))  # fmt: skip
            node.input[1] = unsqueezed
        nodes.append(node)
    del copy.graph.node[:]
    copy.graph.node.extend(nodes)
    return copy


def _legacy_broadcast(node: onnx.NodeProto) -> str | None:
    """ "axis" for arithmetic broadcasting B from an axis, "slope" for a PRelu, else None."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "PRelu" and len(node.input) == 2:
        return "slope"
    names = {a.name: a for a in node.attribute}
    if node.op_type in _LEGACY_BROADCAST_OPS and "axis" in names and "broadcast" in names:
        return "axis" if names["broadcast"].i == 1 else None
    return None


#: the IR version from which initializers need not be listed as graph inputs: the converter
#: refuses an IR-3 model whose initializers are not ("Input w is undefined!"), though onnxruntime
#: runs it, and nothing else the converter does depends on the IR version
_IR_INITIALIZERS_APART = 4


def _with_ir_version(model: onnx.ModelProto, ir_version: int) -> onnx.ModelProto:
    """A copy of `model` (the caller's is left as it is) declaring `ir_version`."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.ir_version = ir_version
    return copy


def _hide_batched_scans(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose opset-8 Scans are `BATCHED_SCAN` nodes."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        if node.op_type == "Scan" and node.domain in ("", "ai.onnx"):
            node.domain, node.op_type = BATCHED_SCAN
    copy.opset_import.append(helper.make_opsetid(BATCHED_SCAN[0], 1))
    return copy


def _upgrade_body(
    node: onnx.NodeProto, model: onnx.ModelProto, where: str, opset: int, target: int
) -> None:
    """An opset-8 Scan's body upgraded to `target` on its own (a model of the body alone)."""
    (attr,) = [a for a in node.attribute if a.name == "body"] or [None]
    if attr is None:
        return  # (the importer names the missing body)
    body = helper.make_model(attr.g, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=model.ir_version)  # fmt: skip
    try:
        attr.g.CopyFrom(version_converter.convert_version(body, target).graph)
    except Exception as exc:  # noqa: BLE001  (as in `upgrade`)
        raise onnx_import_error(
            f"{where}: the body of Scan node {node.name!r} (opset {opset}) could not be upgraded "
            f"to opset {target} by onnx's version converter: {type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0][:300]}"
        ) from None


def _check_schemas(graph: onnx.GraphProto, where: str, opset: int) -> None:
    """Every default-domain node of `graph` has an op that `opset` defines (the converter
    would fail on the first one without, with an assertion's text)."""
    from ..graph.registry import UnsupportedOpError

    missing = []
    for i, node in enumerate(graph.node):
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            onnx.defs.get_schema(node.op_type, opset, "")
        except onnx.defs.SchemaError:
            missing.append((node.op_type, node.name or f"{node.op_type}_{i}", opset))
    if missing:
        raise UnsupportedOpError(missing, where=where)


def _image_scaler(node: onnx.NodeProto, attrs: dict, tmp: str) -> list[onnx.NodeProto]:
    """ImageScaler: y = scale * x + bias[c] over NCHW."""
    scale = np.array(attrs.get("scale", 1.0), np.float32)
    bias = np.array(attrs.get("bias", [0.0]), np.float32).reshape(1, -1, 1, 1)
    return [
        _constant(f"{tmp}_scale", scale),
        _constant(f"{tmp}_bias", bias),
        helper.make_node("Mul", [node.input[0], f"{tmp}_scale"], [f"{tmp}_scaled"]),
        helper.make_node("Add", [f"{tmp}_scaled", f"{tmp}_bias"], [node.output[0]], node.name),
    ]


def _scale(node: onnx.NodeProto, attrs: dict, tmp: str) -> list[onnx.NodeProto]:
    """Scale: y = scale * x."""
    factor = np.array(attrs.get("scale", 1.0), np.float32)
    return [
        _constant(f"{tmp}_scale", factor),
        helper.make_node("Mul", [node.input[0], f"{tmp}_scale"], [node.output[0]], node.name),
    ]


def _crop(node: onnx.NodeProto, attrs: dict, tmp: str) -> list[onnx.NodeProto] | None:
    """Crop by `border` (left, top, right, bottom) over NCHW: a Slice of H and W (a centre
    crop to `scale` is left to the refusal)."""
    border = list(attrs.get("border", []))
    if "scale" in attrs or len(border) != 4:
        return None
    left, top, right, bottom = border
    ends = [-bottom if bottom else _END, -right if right else _END]
    return [
        helper.make_node(
            "Slice",
            node.input[:1],
            node.output[:1],
            node.name,
            starts=[top, left],
            ends=ends,
            axes=[2, 3],
        )  # fmt: skip
    ]


def _batchnorm_per_activation(
    node: onnx.NodeProto, attrs: dict, tmp: str, consts: dict[str, np.ndarray]
) -> list[onnx.NodeProto] | None:
    """BatchNormalization with spatial=0 (opsets 7-8: one mean per activation, parameters of
    the input's shape past the batch, as onnxruntime requires) written out element-wise:
    y = (x - mean) / sqrt(var + epsilon) * scale + bias. The converter refuses spatial=0."""
    outputs = [o for o in node.output if o]
    scale = consts.get(node.input[1]) if len(node.input) == 5 else None
    if attrs.get("spatial", 1) != 0 or len(outputs) != 1 or scale is None or scale.ndim < 2:
        return None  # (the converter names what it refuses)
    x, _, bias, mean, var = node.input
    eps = np.array(attrs.get("epsilon", 1e-5), np.float32)
    return [
        _constant(f"{tmp}_eps", eps),
        helper.make_node("Sub", [x, mean], [f"{tmp}_centred"]),
        helper.make_node("Add", [var, f"{tmp}_eps"], [f"{tmp}_var"]),
        helper.make_node("Sqrt", [f"{tmp}_var"], [f"{tmp}_std"]),
        helper.make_node("Div", [f"{tmp}_centred", f"{tmp}_std"], [f"{tmp}_normed"]),
        helper.make_node("Mul", [f"{tmp}_normed", node.input[1]], [f"{tmp}_scaled"]),
        helper.make_node("Add", [f"{tmp}_scaled", bias], outputs, node.name),
    ]


_END = 2**63 - 1
#: experimental ops that opsets 7-9 still defined and onnxruntime still runs, rewritten into
#: standard ones before the upgrade (opset 10 removed them; the converter knows none)
_REMOVED_REWRITES = {"ImageScaler": _image_scaler, "Scale": _scale, "Crop": _crop}
#: old variants of ops the converter refuses, rewritten the same way
_VARIANT_REWRITES = {"BatchNormalization": _batchnorm_per_activation}


def _constant(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))


def _rewrite_old_ops(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with its ImageScaler, Scale and Crop nodes and its per-activation
    BatchNormalizations written in standard ops (tiny-YOLOv2 and Emotion FERPlus begin with
    an ImageScaler)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    arrays = {t.name: numpy_helper.to_array(t) for t in copy.graph.initializer}
    taken = _value_names(copy.graph)
    nodes = []
    for i, node in enumerate(copy.graph.node):
        removed = _REMOVED_REWRITES.get(node.op_type)
        variant = _VARIANT_REWRITES.get(node.op_type)
        if (removed is None and variant is None) or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        tmp = _prefix(f"{node.output[0]}__{node.op_type.lower()}{i}", taken)
        new = removed(node, attrs, tmp) if removed else variant(node, attrs, tmp, arrays)
        nodes += [node] if new is None else new
    del copy.graph.node[:]
    copy.graph.node.extend(nodes)
    return copy


def _value_names(graph: onnx.GraphProto) -> set[str]:
    """Every value name of `graph` and its subgraphs."""
    names = {v.name for v in [*graph.input, *graph.output, *graph.initializer]}
    for node in _all_nodes(graph):
        names.update(node.input)
        names.update(node.output)
    return names


def _prefix(base: str, taken: set[str]) -> str:
    """`base`, lengthened until no name in `taken` starts with it (the names a rewrite makes
    from it are then new), and taken."""
    while any(name.startswith(base) for name in taken):
        base += "_"
    taken.add(base)
    return base


#: the opset whose Hardmax (like Softmax and LogSoftmax) stopped flattening to 2-D
_NEW_HARDMAX = 13


def _coerce_hardmax(graph: onnx.GraphProto, taken: set[str]) -> None:
    """Rewrite each default-domain Hardmax of `graph` (and its subgraphs) with the old 2-D
    semantics: Flatten(x, axis) -> Hardmax(axis=-1) -> Reshape(Shape(x))."""
    nodes = []
    for i, node in enumerate(graph.node):
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                _coerce_hardmax(sub, taken)
        if node.op_type != "Hardmax" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        (x,), (y,) = node.input, node.output
        tmp = _prefix(f"{y}__hardmax{i}", taken)
        nodes += [
            helper.make_node("Flatten", [x], [f"{tmp}_2d"], axis=axis),
            helper.make_node("Hardmax", [f"{tmp}_2d"], [f"{tmp}_max"], node.name, axis=-1),
            helper.make_node("Shape", [x], [f"{tmp}_shape"]),
            helper.make_node("Reshape", [f"{tmp}_max", f"{tmp}_shape"], [y]),
        ]
    del graph.node[:]
    graph.node.extend(nodes)


__all__ = ["OLDEST_OPSET", "upgrade"]

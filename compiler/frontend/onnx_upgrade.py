"""Models of opsets 7 to 12 (the ONNX model zoo's, older exporters') upgraded to opset 13 by
onnx's own version converter before import, with the one semantic the converter drops put
back: a Resize made from an opset-7-10 Upsample or Resize gets that op's coordinate rule.

Before opset 11, Upsample and Resize mapped output pixel `i` to input coordinate `i / scale`
(what opset 11 calls "asymmetric"), and onnxruntime's nearest mode takes the floor of it when
enlarging and the ceiling when shrinking. The converter emits an opset-13 Resize without a
`coordinate_transformation_mode`, so it would default to "half_pixel" and move every sample
(0.21 relative error on a bilinear x2 upsample). The upgraded Resize nodes are matched to the
original ones by order and get `coordinate_transformation_mode="asymmetric"` and, for nearest,
`nearest_mode` "floor" or "ceil".

The converter also leaves Hardmax as it is, though opset 13 changed its meaning like Softmax's
(which the converter does rewrite): before, `axis` flattened the input to 2-D at that axis and
the hardmax ran over the whole trailing block. Each old Hardmax becomes Flatten(axis), a
Hardmax over the last axis, and a Reshape back to the input's shape.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter

#: the oldest default-domain opset the importer upgrades (older ones changed op semantics
#: the converter cannot always carry, e.g. BatchNormalization's consumed_inputs)
OLDEST_OPSET = 7
_RESIZES = ("Upsample", "Resize")
#: the last opset whose Upsample/Resize had the old coordinate rule
_OLD_RESIZE = 10


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Values of the initializers and Constant nodes (small ones only: scales, sizes)."""
    found = {t.name: t for t in graph.initializer if np.prod(t.dims) <= 16}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = node.attribute[0].t
    return {name: numpy_helper.to_array(t) for name, t in found.items()}


def _old_scales(node: onnx.NodeProto, consts: dict[str, np.ndarray]) -> np.ndarray | None:
    """The scales of an opset-7-10 Upsample/Resize: an attribute until opset 9, then input 1."""
    for attr in node.attribute:
        if attr.name == "scales":
            return np.asarray(attr.floats, np.float64)
    if len(node.input) > 1 and node.input[1] in consts:
        return consts[node.input[1]].astype(np.float64)
    return None


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
    """
    if model.ir_version < _IR_INITIALIZERS_APART:
        model = _with_ir_version(model, _IR_INITIALIZERS_APART)
    consts = _constants(model.graph)
    old = [  # opset 11 gave Resize its coordinate modes: only older ones need the rule
        n
        for n in model.graph.node
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
            _nearest_mode(_old_scales(node, consts), where, name) if mode == "nearest" else None
        )
    try:
        new = version_converter.convert_version(model, target)
    except Exception as exc:  # noqa: BLE001  (the converter raises RuntimeError, ValueError...)
        raise onnx_import_error(
            f"{where}: opset {opset} could not be upgraded to opset {target} by onnx's version "
            f"converter: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
        ) from None
    resizes = [n for n in new.graph.node if n.op_type == "Resize" and opset <= _OLD_RESIZE]
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
    if opset < _NEW_HARDMAX:
        _coerce_hardmax(new.graph)
    return new


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


#: the opset whose Hardmax (like Softmax and LogSoftmax) stopped flattening to 2-D
_NEW_HARDMAX = 13


def _coerce_hardmax(graph: onnx.GraphProto) -> None:
    """Rewrite each default-domain Hardmax of `graph` (and its subgraphs) with the old 2-D
    semantics: Flatten(x, axis) -> Hardmax(axis=-1) -> Reshape(Shape(x))."""
    nodes = []
    for i, node in enumerate(graph.node):
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                _coerce_hardmax(sub)
        if node.op_type != "Hardmax" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        (x,), (y,) = node.input, node.output
        tmp = f"{y}__hardmax{i}"
        nodes += [
            helper.make_node("Flatten", [x], [f"{tmp}_2d"], axis=axis),
            helper.make_node("Hardmax", [f"{tmp}_2d"], [f"{tmp}_max"], node.name, axis=-1),
            helper.make_node("Shape", [x], [f"{tmp}_shape"]),
            helper.make_node("Reshape", [f"{tmp}_max", f"{tmp}_shape"], [y]),
        ]
    del graph.node[:]
    graph.node.extend(nodes)


__all__ = ["OLDEST_OPSET", "upgrade"]

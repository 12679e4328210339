"""The `ai.onnx.preview` domain's FlexAttention (onnx 1.23), converted at import: its
`score_mod` and `prob_mod` attributes are graphs, inlined between the importer's own nodes
(`_Importer.convert_subgraph`, as an If's taken branch), so no graph op has a subgraph.

    scores = (Q * sqrt(scale)) @ (K * sqrt(scale))^T      (grouped kv heads repeated)
    scores = score_mod(scores);  probs = prob_mod(Softmax(scores));  Y = probs @ V

The softmax and its modifiers compute in float32 for float16 inputs (double for double, or
the `softmax_precision` given), as the spec says; Y takes V's type.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ..graph.registry import UnsupportedOpError

if TYPE_CHECKING:
    from .onnx import _Importer

PREVIEW_DOMAIN = "ai.onnx.preview"
PREVIEW_OPS = ("FlexAttention",)
# ONNX TensorProto data types that softmax_precision may name
_PRECISION = {1: "float32", 10: "float16", 11: "float64"}


def is_preview_op(node: onnx.NodeProto) -> bool:
    return node.domain == PREVIEW_DOMAIN and node.op_type in PREVIEW_OPS


def convert_flex_attention(imp: _Importer, name: str, node: onnx.NodeProto, attrs: dict) -> None:
    """Add FlexAttention node `name`'s computation to the importer's graph."""
    from .onnx import OnnxImportError, unsupported_nodes

    known = {"scale", "score_mod", "prob_mod", "softmax_precision"}
    if unknown := sorted(set(attrs) - known):
        raise OnnxImportError(
            f"{imp.where}: attributes of FlexAttention must be among {sorted(known)}, not "
            f"{unknown} (node {name!r})"
        )
    types = imp.builder.types
    q, k, v = node.input[:3]
    shapes = [types[x].shape for x in (q, k, v)]
    if len(node.input) != 3 or any(len(s) != 4 for s in shapes):
        raise OnnxImportError(
            f"{imp.where}: FlexAttention node {name!r} must have 4-D Q, K and V, not "
            f"{[list(s) for s in shapes]}"
        )
    (b, hq, _, e), (_, hkv, s, ek), (_, hv, sv, dv) = shapes
    if hkv != hv or s != sv or ek != e or hq % hkv:
        raise OnnxImportError(
            f"{imp.where}: FlexAttention node {name!r}: K {list(shapes[1])} and V "
            f"{list(shapes[2])} must share heads and length, K's head size be Q's {e}, and the "
            f"kv heads divide Q's {hq}"
        )
    dtype = types[q].dtype
    precision = attrs.get("softmax_precision")
    if precision is not None and precision not in _PRECISION:
        raise OnnxImportError(
            f"{imp.where}: FlexAttention node {name!r}: softmax_precision must be one of "
            f"{sorted(_PRECISION)}, not {precision!r}"
        )
    wide = _PRECISION[precision] if precision else ("float64" if dtype == "float64" else "float32")
    for key in ("score_mod", "prob_mod"):
        if key in attrs:
            missing = unsupported_nodes(attrs[key].node, imp.opset)
            if missing:
                raise UnsupportedOpError(
                    missing, where=f"{imp.where}: FlexAttention {name!r} {key}"
                )
            if len(attrs[key].input) != 1 or len(attrs[key].output) != 1:
                raise OnnxImportError(
                    f"{imp.where}: FlexAttention node {name!r}: {key} must take and give one tensor"
                )

    def value(hint: str) -> str:
        return imp.builder.fresh(f"{name}_{hint}")

    def const(hint: str, array: Any, of: str = "int64") -> str:
        return imp.builder.add_constant(value(hint), np.asarray(array, of))

    def op(kind: str, inputs: list[str], **kw: Any) -> str:
        out = value(kind.lower())
        imp.emit(kind, inputs, [out], f"{name}/{out}", **kw)
        return out

    def repeat(x: str, size: int) -> str:
        if hq == hkv:
            return x
        grid = op("Unsqueeze", [x, const("axes", [2])])
        grid = op("Expand", [grid, const("repeat", [b, hkv, hq // hkv, s, size])])
        return op("Reshape", [grid, const("shape", [b, hq, s, size])])

    scale = attrs.get("scale", 1.0 / math.sqrt(e))
    root = const("scale", math.sqrt(np.float32(scale)), dtype)
    k_t = op("Transpose", [op("Mul", [repeat(k, e), root])], perm=[0, 1, 3, 2])
    scores = op("MatMul", [op("Mul", [q, root]), k_t])
    if wide != dtype:
        scores = op("Cast", [scores], to=onnx.helper.np_dtype_to_tensor_dtype(np.dtype(wide)))
    if "score_mod" in attrs:
        scores = _modify(imp, name, attrs["score_mod"], scores, wide)
    probs = op("Softmax", [scores], axis=-1)
    if "prob_mod" in attrs:
        probs = _modify(imp, name, attrs["prob_mod"], probs, wide)
    values = repeat(v, dv)
    if types[values].dtype != wide:
        to = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(wide))
        values = op("Cast", [values], to=to)
    y = op("MatMul", [probs, values])
    out_type = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(types[v].dtype))
    imp.emit("Cast", [y], [node.output[0]], f"{name}/{node.output[0]}", to=out_type)


def _modify(imp: _Importer, name: str, graph: onnx.GraphProto, x: str, dtype: str) -> str:
    """The modifier graph's output for input `x`, inlined; cast back to `dtype` if needed."""
    (result,) = imp.convert_subgraph(graph, f"{name}/{graph.name}", {graph.input[0].name: x})
    if imp.builder.types[result].dtype != dtype:
        cast = imp.builder.fresh(f"{name}_mod_cast")
        to = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        imp.emit("Cast", [result], [cast], f"{name}/{cast}", to=to)
        result = cast
    return result

"""onnxruntime's quantized contrib ops (the `com.microsoft` domain) that its static quantizer
writes in the QOperator format (`quantize_static(..., quant_format=QuantFormat.QOperator)`):
QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool,
QLinearAveragePool, QLinearConcat, QLinearSoftmax, QLinearReduceMean, QLinearWhere, QGemm, and
the domain's own QLinearConv (with `channels_last`), QuantizeLinear and DequantizeLinear.

Each is a composite (`expand`): its quantized inputs dequantized (DequantizeLinear), the float
op, the result quantized (QuantizeLinear), as onnxruntime's documentation defines them
(docs/ContribOperators.md) and as its QDQ format writes the same model. onnxruntime's kernels
compute some of them in fixed point or through lookup tables (QLinearAdd/Mul with the scale
ratios folded, QLinearSigmoid/Softmax by table), so an output can differ from the composite's
by one quantization step where the exact value lies near a rounding boundary; the tests check
every op against onnxruntime with that tolerance. The contrib QLinearConv maps onto the
standard QLinearConv (native int8 code), transposed around for `channels_last`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, get_op, register
from .emit import Emitter
from .quant import dequantize_linear, quantize_linear

MS = "com.microsoft."
_DQ_ATTRS = {"axis": 1, "block_size": 0}

#: how a float op's inputs are made from the node's: ("q", x, scale, zero point) dequantized,
#: ("raw", index) as it is, ("ints", attribute) an int64 constant of an attribute's values
Source = tuple


def _present(inputs: Sequence[Any], i: int) -> bool:
    return i < len(inputs) and inputs[i] is not None and not (isinstance(inputs[i], str)
                                                              and not inputs[i])  # fmt: skip


class QSpec:
    """One quantized op: `sources(attrs, n)` lists the float op's inputs, `out` the indices of
    the output's scale and zero point, `float_op`/`float_attrs` the op between."""

    def __init__(
        self,
        float_op: str,
        sources: Callable[[dict[str, Any], int], list[Source]],
        out: Callable[[int], tuple[int, int]],
        float_attrs: Callable[[dict[str, Any]], dict[str, Any]] = lambda a: {},
        out_like: int = 0,
    ) -> None:
        self.float_op, self.sources, self.out = float_op, sources, out
        self.float_attrs, self.out_like = float_attrs, out_like


def _channels_last_perm(rank: int, to_first: bool) -> list[int]:
    return [0, rank - 1, *range(1, rank - 1)] if to_first else [0, *range(2, rank), 1]


def _compute(name: str, spec: QSpec) -> Callable[..., np.ndarray]:
    def compute(attrs: dict[str, Any], *args: Any) -> np.ndarray:
        floats = []
        for src in spec.sources(attrs, len(args)):
            if src[0] in ("raw", "ints"):
                raw = src[0] == "raw"
                floats.append(args[src[1]] if raw else np.asarray(attrs[src[1]], np.int64))
                continue
            _, x, s, z = src
            zero = args[z] if _present(args, z) else None
            floats.append(dequantize_linear(_DQ_ATTRS, args[x], args[s], zero))
        last = attrs.get("channels_last", 0)
        if last:
            floats[0] = floats[0].transpose(_channels_last_perm(floats[0].ndim, True))
        op = get_op(spec.float_op)
        y = op.compute(op.normalize_attrs(spec.float_attrs(attrs), name), *floats)
        if last:
            y = y.transpose(_channels_last_perm(y.ndim, False))
        s, z = spec.out(len(args))
        zero = args[z] if _present(args, z) else None
        q_attrs = {"axis": 1, "block_size": 0, "saturate": 1, "output_dtype": None}
        if zero is None:
            q_attrs["output_dtype"] = str(args[spec.out_like].dtype)
        return quantize_linear(q_attrs, y.astype(np.float32), args[s], zero)

    return compute


def _infer(name: str, spec: QSpec) -> Callable[..., list[TensorType]]:
    def infer(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
        for src in spec.sources(attrs, len(types)):
            if src[0] == "q" and np.dtype(types[src[1]].dtype).kind not in "iu":
                raise ValueError(
                    f"{name} input {src[1]} must be an 8-bit integer tensor, "
                    f"not {types[src[1]].dtype}"
                )
        floats, consts_ = [], []
        for src in spec.sources(attrs, len(types)):
            if src[0] == "ints":
                values = np.asarray(attrs[src[1]], np.int64)
                floats.append(TensorType(values.shape, "int64"))
                consts_.append(values)
                continue
            t = types[src[1]]
            floats.append(t if src[0] == "raw" else TensorType(t.shape, "float32"))
            consts_.append(None)
        if attrs.get("channels_last", 0):
            x = floats[0].shape
            floats[0] = TensorType(
                tuple(x[i] for i in _channels_last_perm(len(x), True)), "float32"
            )
        op = get_op(spec.float_op)
        (y,) = op.infer(op.normalize_attrs(spec.float_attrs(attrs), name), floats, consts_)
        shape = y.shape
        if attrs.get("channels_last", 0):
            shape = tuple(shape[i] for i in _channels_last_perm(len(shape), False))
        s, z = spec.out(len(types))
        zero = types[z] if _present(types, z) else None
        return [TensorType(shape, zero.dtype if zero is not None else types[spec.out_like].dtype)]

    return infer


def _expand(spec: QSpec) -> Callable[[GraphBuilder, Node], None]:
    def expand(b: GraphBuilder, node: Node) -> None:
        e = Emitter(b, node)
        ins, attrs = node.inputs, node.attr_dict
        floats = []
        for src in spec.sources(attrs, len(ins)):
            if src[0] in ("raw", "ints"):
                floats.append(ins[src[1]] if src[0] == "raw" else e.ints(attrs[src[1]], src[1]))
                continue
            _, x, s, z = src
            args = [ins[x], ins[s]] + ([ins[z]] if _present(ins, z) else [])
            floats.append(e.add("DequantizeLinear", args, {"axis": 1}))
        last = attrs.get("channels_last", 0)
        if last:
            floats[0] = e.transpose(floats[0], _channels_last_perm(len(e.shape(floats[0])), True))
        y = e.add(spec.float_op, floats, spec.float_attrs(attrs))
        if last:
            y = e.transpose(y, _channels_last_perm(len(e.shape(y)), False))
        s, z = spec.out(len(ins))
        q_attrs: dict[str, Any] = {"axis": 1}
        if not _present(ins, z):
            q_attrs["output_dtype"] = e.dtype(ins[spec.out_like])
        args = [y, ins[s]] + ([ins[z]] if _present(ins, z) else [])
        e.add("QuantizeLinear", args, q_attrs, outputs=[node.outputs[0]])

    return expand


def _unary(attrs: dict[str, Any], n: int) -> list[Source]:
    return [("q", 0, 1, 2)]


def _binary(attrs: dict[str, Any], n: int) -> list[Source]:
    return [("q", 0, 1, 2), ("q", 3, 4, 5)]


def _where(attrs: dict[str, Any], n: int) -> list[Source]:
    return [("raw", 0), ("q", 1, 2, 3), ("q", 4, 5, 6)]


def _concat(attrs: dict[str, Any], n: int) -> list[Source]:
    if n < 5 or (n - 2) % 3:
        raise ValueError(
            f"{MS}QLinearConcat takes Y_scale, Y_zero_point and (X, X_scale, X_zero_point) "
            f"triples: 2 + 3k inputs, not {n}"
        )
    return [("q", i, i + 1, i + 2) for i in range(2, n, 3)]


def _pick(keys: Sequence[str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda attrs: {k: attrs[k] for k in keys if attrs.get(k) is not None}


def _softmax_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    if attrs["opset"] < 13:
        raise ValueError(
            f"{MS}QLinearSoftmax with opset {attrs['opset']} (softmax over the flattened "
            "trailing axes) is not built; opset 13's per-axis form is"
        )
    return {"axis": attrs["axis"]}


def _axes_input(attrs: dict[str, Any], n: int) -> list[Source]:
    return [("q", 0, 1, 2), ("ints", "axes")]


_POOL = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
_UNARY_OUT = lambda n: (3, 4)  # noqa: E731
_BINARY_OUT = lambda n: (6, 7)  # noqa: E731

_OPS: dict[str, tuple[QSpec, dict[str, Any], tuple[int, int], tuple[int, ...]]] = {
    # name: (spec, attribute defaults, input count range, optional inputs before the last)
    "QLinearAdd": (QSpec("Add", _binary, _BINARY_OUT), {}, (7, 8), (2, 5)),
    "QLinearMul": (QSpec("Mul", _binary, _BINARY_OUT), {}, (7, 8), (2, 5)),
    "QLinearSigmoid": (QSpec("Sigmoid", _unary, _UNARY_OUT), {}, (4, 5), (2,)),
    "QLinearLeakyRelu": (
        QSpec("LeakyRelu", _unary, _UNARY_OUT, _pick(["alpha"])),
        {"alpha": 0.01},
        (4, 5),
        (2,),
    ),
    "QLinearGlobalAveragePool": (
        QSpec("GlobalAveragePool", _unary, _UNARY_OUT),
        {"channels_last": 0},
        (5, 5),
        (),
    ),
    "QLinearAveragePool": (
        QSpec("AveragePool", _unary, _UNARY_OUT, _pick(_POOL)),
        {
            "auto_pad": "NOTSET",
            "ceil_mode": 0,
            "count_include_pad": 0,
            "kernel_shape": None,
            "pads": None,
            "strides": None,
            "channels_last": 0,
        },
        (4, 5),
        (2,),
    ),  # fmt: skip
    "QLinearSoftmax": (
        QSpec("Softmax", _unary, _UNARY_OUT, _softmax_attrs),
        {"axis": -1, "opset": 13},
        (5, 5),
        (2,),
    ),
    "QLinearReduceMean": (
        QSpec("ReduceMean", _axes_input, _UNARY_OUT, _pick(["keepdims"])),
        {"axes": None, "keepdims": 1},
        (4, 5),
        (2,),
    ),
    "QLinearWhere": (QSpec("Where", _where, lambda n: (7, 8), out_like=1), {}, (9, 9), ()),
    "QLinearConcat": (
        QSpec("Concat", _concat, lambda n: (0, 1), _pick(["axis"]), out_like=2),
        {"axis": None},
        (5, 2 + 3 * 64),
        (),
    ),
}

for _name, (_spec, _attrs, _inputs, _optional) in _OPS.items():
    register(
        MS + _name,
        Pattern.OPAQUE,
        _infer(MS + _name, _spec),
        _compute(MS + _name, _spec),
        attrs=_attrs,
        inputs=_inputs,
        optional_inputs=_optional,
        expand=_expand(_spec),
    )


# ---- QGemm: an int8 Gemm, its output float32 or quantized -------------------------------------

_QGEMM_ATTRS = {"alpha": 1.0, "transA": 0, "transB": 0}


def _qgemm_float(attrs: dict[str, Any], a, a_s, a_z, b, b_s, b_z, c=None) -> np.ndarray:
    """`alpha * (A' B' + C)`, A and B dequantized, the int32 bias C at the scale
    `a_scale * b_scale` (onnxruntime's QGemm: alpha scales the bias too)."""
    fa = dequantize_linear(_DQ_ATTRS, a, a_s, a_z)
    fb = dequantize_linear({"axis": 0 if attrs["transB"] else 1, "block_size": 0}, b, b_s, b_z)
    gemm = get_op("Gemm")
    args = [fa, fb]
    if c is not None:
        scale = (np.asarray(a_s, np.float32) * np.asarray(b_s, np.float32)).astype(np.float32)
        args.append((c.astype(np.float32) * scale).astype(np.float32))
    own = {**attrs, "beta": attrs["alpha"]}
    return gemm.compute(gemm.normalize_attrs(own, "QGemm"), *args).astype(np.float32)


def _qgemm(attrs: dict[str, Any], *args: Any) -> np.ndarray:
    args = list(args) + [None] * (9 - len(args))
    y = _qgemm_float(attrs, *args[:6], args[6] if _present(args, 6) else None)
    if not _present(args, 7):
        return y
    zero = args[8] if _present(args, 8) else None
    q_attrs = {"axis": 1, "block_size": 0, "saturate": 1, "output_dtype": str(args[0].dtype)}
    return quantize_linear(q_attrs, y, args[7], zero)


def _qgemm_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    a, b = types[0], types[3]
    for i, t in ((0, a), (3, b)):
        if np.dtype(t.dtype).kind not in "iu":
            raise ValueError(f"{MS}QGemm input {i} must be an 8-bit integer tensor, not {t.dtype}")
    gemm = get_op("Gemm")
    (y,) = gemm.infer(
        gemm.normalize_attrs({**attrs, "beta": 0.0}, "QGemm"),
        [TensorType(a.shape, "float32"), TensorType(b.shape, "float32")],
        [None, None],
    )
    if not _present(types, 7):
        return [TensorType(y.shape, "float32")]
    zero = types[8] if _present(types, 8) else None
    return [TensorType(y.shape, zero.dtype if zero is not None else a.dtype)]


def _expand_qgemm(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    ins, attrs = list(node.inputs), node.attr_dict
    ins += [""] * (9 - len(ins))
    fa = e.add("DequantizeLinear", ins[0:3], {"axis": 1})
    fb = e.add("DequantizeLinear", ins[3:6], {"axis": 0 if attrs["transB"] else 1})
    gemm_attrs = {"alpha": attrs["alpha"], "beta": attrs["alpha"], "transA": attrs["transA"],
                  "transB": attrs["transB"]}  # fmt: skip
    args = [fa, fb]
    if _present(ins, 6):
        scale = e.add("Mul", [ins[1], ins[4]])
        args.append(e.add("Mul", [e.add("Cast", [ins[6]], {"to": "float32"}), scale]))
    quantized = _present(ins, 7)
    y = e.add("Gemm", args, gemm_attrs, **({} if quantized else {"outputs": [node.outputs[0]]}))
    if quantized:
        args = [y, ins[7]] + ([ins[8]] if _present(ins, 8) else [])
        q_attrs = {"axis": 1, "output_dtype": e.dtype(ins[0])}
        e.add("QuantizeLinear", args, q_attrs, outputs=[node.outputs[0]])


register(
    MS + "QGemm",
    Pattern.OPAQUE,
    _qgemm_type,
    _qgemm,
    attrs=_QGEMM_ATTRS,
    inputs=(6, 9),
    expand=_expand_qgemm,
)


# ---- the domain's QLinearConv, QuantizeLinear and DequantizeLinear ------------------------------


def _standard_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """A contrib node's attributes as its standard op takes them: `channels_last` and unset
    ones left out."""
    return {k: v for k, v in attrs.items() if k != "channels_last" and v is not None}


def _expand_as_standard(op: str) -> Callable[[GraphBuilder, Node], None]:
    def expand(b: GraphBuilder, node: Node) -> None:
        e = Emitter(b, node)
        attrs = _standard_attrs(node.attr_dict)
        ins = list(node.inputs)
        if not node.attr_dict.get("channels_last", 0):
            e.add(op, ins, attrs, outputs=[node.outputs[0]])
            return
        rank = len(e.shape(ins[0]))
        ins[0] = e.transpose(ins[0], _channels_last_perm(rank, True))
        y = e.add(op, ins, attrs)
        e.add("Transpose", [y], {"perm": _channels_last_perm(rank, False)},
              outputs=[node.outputs[0]])  # fmt: skip

    return expand


def _as_standard(op: str, attrs: dict[str, Any]) -> None:
    std = get_op(op)

    def perm(a: dict[str, Any], rank: int, to_first: bool) -> list[int] | None:
        return _channels_last_perm(rank, to_first) if a.get("channels_last", 0) else None

    def infer(a: dict[str, Any], types: list, consts: list) -> list[TensorType]:
        p = perm(a, len(types[0].shape), True)
        if p:
            types = [TensorType(tuple(types[0].shape[i] for i in p), types[0].dtype), *types[1:]]
        (y,) = std.infer(std.normalize_attrs(_standard_attrs(a), MS + op), types, consts)
        q = perm(a, len(y.shape), False)
        return [TensorType(tuple(y.shape[i] for i in q), y.dtype) if q else y]

    def compute(a: dict[str, Any], *args: Any) -> np.ndarray:
        args = list(args)
        p = perm(a, args[0].ndim, True)
        if p:
            args[0] = args[0].transpose(p)
        y = std.compute(std.normalize_attrs(_standard_attrs(a), MS + op), *args)
        q = perm(a, y.ndim, False)
        return y.transpose(q) if q else y

    register(
        MS + op,
        Pattern.OPAQUE,
        infer,
        compute,
        attrs=attrs,
        inputs=std.inputs,
        optional_inputs=std.optional_inputs,
        expand=_expand_as_standard(op),
    )


_as_standard("QLinearConv", {**get_op("QLinearConv").attrs, "channels_last": 0})
_as_standard("QuantizeLinear", {"axis": 1})
_as_standard("DequantizeLinear", {"axis": 1})

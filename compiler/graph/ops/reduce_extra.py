"""Reductions beyond shape.py's five, as composite ops (`expand`, run by
`passes.expand_composites`) over ReduceSum/ReduceMax/ReduceMin and element-wise ops:
ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp (max-stabilized), ArgMax,
ArgMin and Hardmax. Each also has its own numpy kernel, written from the ONNX spec.

With `noop_with_empty_axes` and no axes, a Reduce op applies its element-wise part only
(ReduceSumSquare squares, ReduceL1 takes the absolute value), as onnxruntime does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ....runtime.dtypes import is_floating
from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter
from .shape import REDUCE_ATTRS, normalize_axis, reduce_axes, reduce_type

# op -> (element-wise part before the sum, part after it), for the numpy kernels
_SUMS: dict[str, tuple[Callable, Callable]] = {
    "ReduceL1": (np.abs, lambda s: s),
    "ReduceL2": (np.square, np.sqrt),
    "ReduceSumSquare": (np.square, lambda s: s),
    "ReduceLogSum": (lambda z: z, np.log),
}
# onnxruntime's integer ReduceLogSumExp exponentiates in the integer type (each exp(x - max)
# truncated): not followed; its integer ReduceL2 and ReduceLogSum are (sum in the type, then
# the root or log in float64, truncated)
_FLOAT_ONLY = ("ReduceLogSumExp",)


def _extra_reduce_type(op: str) -> Callable:
    def infer(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
        if op in _FLOAT_ONLY and not is_floating(types[0].dtype):
            raise ValueError(f"{op} input must be a floating-point tensor, not {types[0].dtype}")
        return reduce_type(attrs, types, consts)

    return infer


def _numpy_axes(attrs: dict[str, Any], x: np.ndarray, axes: Any) -> tuple[int, ...]:
    found = reduce_axes(attrs, x.ndim, axes)
    return () if found is None else found  # no axes: element-wise part only


def _sum_compute(op: str) -> Callable:
    before, after = _SUMS[op]

    def compute(attrs: dict[str, Any], x: np.ndarray, axes: Any = None) -> np.ndarray:
        wide = x.astype(np.float64) if x.dtype.kind == "f" else x.astype(np.int64)
        keep = bool(attrs["keepdims"])
        with np.errstate(divide="ignore", invalid="ignore"):
            total = after(before(wide).sum(axis=_numpy_axes(attrs, x, axes), keepdims=keep))
        return np.asarray(total).astype(x.dtype)

    return compute


def log_sum_exp(attrs: dict[str, Any], x: np.ndarray, axes: Any = None) -> np.ndarray:
    """`log(sum(exp(x)))` over the axes, computed as `m + log(sum(exp(x - m)))` with `m` the
    maximum (0 where it is infinite); an empty reduction gives -inf."""
    z = x.astype(np.float64)
    found = _numpy_axes(attrs, x, axes)
    m = z.max(axis=found, keepdims=True, initial=-np.inf)
    m = np.where(np.isinf(m), 0.0, m)
    with np.errstate(divide="ignore", over="ignore"):
        y = np.log(np.exp(z - m).sum(axis=found, keepdims=True)) + m
    if not attrs["keepdims"]:
        y = y.reshape([d for i, d in enumerate(y.shape) if i not in found])
    return y.astype(x.dtype)


def _axes_value(node: Node) -> list[str]:
    return node.inputs[1:2] if len(node.inputs) > 1 and node.inputs[1] else []


# op -> (element-wise op before the ReduceSum, op after it), for the expansions; None: nothing
_SUM_OPS = {
    "ReduceL1": ("Abs", None),
    "ReduceL2": ("Square", "Sqrt"),
    "ReduceSumSquare": ("Square", None),
    "ReduceLogSum": (None, "Log"),
}


def _expand_sum(b: GraphBuilder, node: Node) -> None:
    """ReduceSum of the element-wise part, then the part after the sum."""
    e = Emitter(b, node)
    x, finish = e.float32_input()
    before, after = _SUM_OPS[node.op]
    if before == "Square":
        x = e.add("Mul", [x, x])
    elif before is not None:
        x = e.add(before, [x])
    attrs = {k: node.attr_dict[k] for k in REDUCE_ATTRS}
    if after is None:
        finish("ReduceSum", [x, *_axes_value(node)], attrs)
    elif e.dtype(x).startswith(("int", "uint")):  # the integer sum's root or log, truncated
        total = e.add("Cast", [e.add("ReduceSum", [x, *_axes_value(node)], attrs)],
                      {"to": "float64"})  # fmt: skip
        finish("Cast", [e.add(after, [total])], {"to": e.dtype(x)})
    else:
        finish(after, [e.add("ReduceSum", [x, *_axes_value(node)], attrs)])


def _expand_log_sum_exp(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    x, finish = e.float32_input()
    noop = {"noop_with_empty_axes": node.attr_dict["noop_with_empty_axes"]}
    axes = _axes_value(node)
    m = e.add("ReduceMax", [x, *axes], {"keepdims": 1, **noop})
    inf, zero = (e.const(v, hint, e.dtype(x)) for v, hint in ((np.inf, "inf"), (0, "zero")))
    m = e.add("Where", [e.add("Equal", [e.add("Abs", [m]), inf]), zero, m])
    total = e.add(
        "ReduceSum", [e.add("Exp", [e.add("Sub", [x, m])]), *axes], {"keepdims": 1, **noop}
    )
    y = e.add("Add", [e.add("Log", [total]), m])
    finish("Reshape", [y, e.ints(_out_shape(b, node), "shape")])


def _out_shape(b: GraphBuilder, node: Node) -> list[int]:
    consts = [None, b.constants.get(node.inputs[1])] if _axes_value(node) else [None]
    (ty,) = reduce_type(node.attr_dict, [b.types[node.inputs[0]]], consts)
    return list(ty.shape)


for _op in _SUMS:
    register(
        _op,
        Pattern.COMM_REDUCE,
        _extra_reduce_type(_op),
        _sum_compute(_op),
        inputs=(1, 2),
        const_inputs=(1,),
        attrs=REDUCE_ATTRS,
        expand=_expand_sum,
    )
register(
    "ReduceLogSumExp",
    Pattern.COMM_REDUCE,
    _extra_reduce_type("ReduceLogSumExp"),
    log_sum_exp,
    inputs=(1, 2),
    const_inputs=(1,),
    attrs=REDUCE_ATTRS,
    expand=_expand_log_sum_exp,
)


# ---- ArgMax, ArgMin, Hardmax ----------------------------------------------------------------


def _arg_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    shape = types[0].shape
    axis = normalize_axis(attrs["axis"], len(shape), "ArgMax/ArgMin axis")
    if shape[axis] == 0:
        raise ValueError(f"the reduced axis {axis} must not be empty (input shape {shape})")
    keep = attrs["keepdims"]
    dims = tuple(1 if i == axis else d for i, d in enumerate(shape) if keep or i != axis)
    return [TensorType(dims, "int64")]


def _arg(fn: Callable) -> Callable:
    largest = fn is np.argmax

    def compute(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
        """The index of the first (or with select_last_index the last) extreme along axis; NaN
        as onnxruntime's scan from the first element has it: a NaN there wins (index 0), a NaN
        anywhere else loses."""
        axis = attrs["axis"] % x.ndim
        if x.dtype.kind == "f":
            clean = np.where(np.isnan(x), -np.inf if largest else np.inf, x)
            hit = x == (np.max if largest else np.min)(clean, axis=axis, keepdims=True)
            if attrs["select_last_index"]:
                index = x.shape[axis] - 1 - np.argmax(np.flip(hit, axis), axis=axis)
            else:
                index = np.argmax(hit, axis=axis)
            first = np.isnan(np.take(x, 0, axis=axis))
            index = np.where(first, 0, index)
        elif attrs["select_last_index"]:
            index = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
        else:
            index = fn(x, axis=axis)
        index = np.asarray(index, np.int64)
        return np.expand_dims(index, axis) if attrs["keepdims"] else index

    return compute


def _iota(e: Emitter, n: int, axis: int, rank: int) -> str:
    """0..n-1 laid along `axis` of a rank-`rank` tensor (ones elsewhere)."""
    shape = [n if i == axis else 1 for i in range(rank)][axis:]
    return e.const(np.arange(n, dtype=np.int64).reshape(shape), "iota")


def _emit_arg(e: Emitter, x: str, axis: int, largest: bool, last: bool, **kw: Any) -> str:
    """The index (int64, axis kept) of the extreme of `x` along `axis`: the extreme, where `x`
    equals it its index and elsewhere a value that loses, then the smallest (or largest) index.
    A float NaN goes as in onnxruntime's scan from the first element: first, it wins (index 0);
    anywhere else it loses (so a row of NaN only gives 0, not an index past the axis)."""
    shape = e.shape(x)
    axes = e.ints([axis], "axes")
    floating = np.dtype(e.dtype(x)).kind == "f"
    numbers = x
    if floating:  # the extreme of the numbers alone (NaN never equals it)
        worst = e.const(-np.inf if largest else np.inf, "worst", e.dtype(x))
        numbers = e.add("Where", [e.add("IsNaN", [x]), worst, x])
    extreme = e.add("ReduceMax" if largest else "ReduceMin", [numbers, axes], {"keepdims": 1})
    hit = e.add("Equal", [x, extreme])
    losing = e.const(-1 if last else shape[axis], "no_index", "int64")
    index = e.add("Where", [hit, _iota(e, shape[axis], axis, len(shape)), losing])
    if not floating:
        return e.add("ReduceMax" if last else "ReduceMin", [index, axes], {"keepdims": 1}, **kw)
    index = e.add("ReduceMax" if last else "ReduceMin", [index, axes], {"keepdims": 1})
    first = e.add("Slice", [x, e.ints([0], "start"), e.ints([1], "end"), axes])
    zero = e.const(0, "zero", "int64")
    return e.add("Where", [e.add("IsNaN", [first]), zero, index], **kw)


def _expand_arg(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    (x,) = node.inputs
    attrs = node.attr_dict
    axis = attrs["axis"] % len(e.shape(x))
    (y,) = node.outputs
    last = bool(attrs["select_last_index"])
    if attrs["keepdims"]:
        _emit_arg(e, x, axis, node.op == "ArgMax", last, outputs=[y])
    else:
        index = _emit_arg(e, x, axis, node.op == "ArgMax", last)
        shape = [d for i, d in enumerate(e.shape(index)) if i != axis]
        e.add("Reshape", [index, e.ints(shape, "shape")], outputs=[y])


_ARG_ATTRS = {"axis": 0, "keepdims": 1, "select_last_index": 0}
register("ArgMax", Pattern.OPAQUE, _arg_type, _arg(np.argmax), attrs=_ARG_ATTRS, expand=_expand_arg)
register("ArgMin", Pattern.OPAQUE, _arg_type, _arg(np.argmin), attrs=_ARG_ATTRS, expand=_expand_arg)


def _hardmax_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    normalize_axis(attrs["axis"], len(types[0].shape), "Hardmax axis")
    return [types[0]]


def hardmax(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """1 at the first largest element along axis, 0 elsewhere; a row whose first element is NaN
    is all 0 (onnxruntime's: its max is that NaN, which no element equals)."""
    axis = attrs["axis"] % x.ndim
    if x.size == 0:
        return np.zeros_like(x)
    argmax = _arg(np.argmax)
    index = argmax({"axis": axis, "keepdims": 1, "select_last_index": 0}, x)
    positions = np.arange(x.shape[axis]).reshape([-1] + [1] * (x.ndim - axis - 1))
    return ((positions == index) & ~np.isnan(x)).astype(x.dtype)


def _expand_hardmax(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    (x,) = node.inputs
    shape = e.shape(x)
    axis = node.attr_dict["axis"] % len(shape)
    index = _emit_arg(e, x, axis, largest=True, last=False)
    hit = e.add("Equal", [_iota(e, shape[axis], axis, len(shape)), index])
    if np.dtype(e.dtype(x)).kind == "f":  # a first NaN's index 0 marks no element
        hit = e.add("And", [hit, e.add("Not", [e.add("IsNaN", [x])])])
    e.add("Cast", [hit], {"to": e.dtype(x)}, outputs=[node.outputs[0]])


register("Hardmax", Pattern.OPAQUE, _hardmax_type, hardmax, attrs={"axis": -1},
         expand=_expand_hardmax)  # fmt: skip

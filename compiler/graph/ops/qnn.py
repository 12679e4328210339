"""Accelerator-exact int8 ops: tf.quantize, tf.dequantize, tf.qconv2d, tf.qdense, tf.qadd,
tf.qmaxpool.

Their integer semantics are compiler.quantize's, called directly (one definition): int8 x int8
products accumulate in wrapping ``acc_width``-bit integers, an int32 bias (at the accumulator
scale) is added, and the requantization is the list of ALU steps stored in the node's
attributes (``requant_ops``/``requant_imms``, from ``requant_params``), after a multiply by one
integer per output channel where the weights have per-channel scales (``channel_multipliers``,
from ``requant_params_per_channel``, after a right shift by ``pre_shift``; ``weight_scale`` is
then a tuple), so what a node computes
is exactly what the accelerator's ALU would. ``quantize_graph`` (compiler/quantize/graph.py)
writes these nodes; the partition pass sets their ``target`` ("cpu" or "vta").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....hw.isa import AluOp
from ...quantize.reference import conv2d_int8, dense_int8, max_pool2d_int8
from ...quantize.requant import AluStep, RequantParams
from ...quantize.residual import AddParams, add_int8
from ...quantize.scheme import dequantize, quantize
from ..ir import AttrValue, TensorType
from ..registry import REQUIRED, Pattern, register
from .nn import window_geometry

TARGETS = ("cpu", "vta")

# The requantization an op ends with, as attributes (see requant_attrs).
_REQUANT_ATTRS = {
    "requant_ops": REQUIRED,
    "requant_imms": REQUIRED,
    "multiplier": REQUIRED,
    "shift": REQUIRED,
    "rounding": REQUIRED,
    "out_lo": REQUIRED,
    "out_hi": REQUIRED,
    "acc_width": 32,
    "channel_multipliers": (),
    "pre_shift": 0,
    "out_scale": REQUIRED,
    "target": "cpu",
}


def requant_attrs(params: RequantParams) -> dict[str, AttrValue]:
    """Node attributes that store ``params`` exactly (the ALU steps and their summary)."""
    return {
        "requant_ops": tuple(s.op.name for s in params.steps),
        "requant_imms": tuple(int(s.imm) for s in params.steps),
        "multiplier": params.multiplier,
        "shift": params.shift,
        "rounding": int(params.rounding),
        "out_lo": params.lo,
        "out_hi": params.hi,
        "acc_width": params.acc_width,
        "channel_multipliers": tuple(int(m) for m in params.channel_multipliers),
        "pre_shift": params.pre_shift,
    }


def requant_from_attrs(attrs: dict[str, Any]) -> RequantParams:
    """The ``RequantParams`` a node's attributes store (inverse of ``requant_attrs``)."""
    ops, imms = attrs["requant_ops"], attrs["requant_imms"]
    if len(ops) != len(imms):
        raise ValueError(f"requant_ops and requant_imms must have one length, not {ops}, {imms}")
    steps = tuple(AluStep(AluOp[op], int(imm)) for op, imm in zip(ops, imms, strict=True))
    return RequantParams(
        steps,
        attrs["multiplier"],
        attrs["shift"],
        bool(attrs["rounding"]),
        attrs["out_lo"],
        attrs["out_hi"],
        attrs["acc_width"],
        tuple(int(m) for m in attrs.get("channel_multipliers", ())),
        int(attrs.get("pre_shift", 0)),
    )


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def _check_int8(types: list, names: tuple[str, ...], op: str) -> None:
    for ty, name in zip(types, names, strict=False):
        _check(ty is None or ty.dtype == "int8", f"{op} {name} must be int8, not {ty}")


def _check_bias(types: list, channels: int, op: str) -> None:
    if len(types) > 2 and types[2] is not None:
        want = TensorType((channels,), "int32")
        _check(types[2] == want, f"{op} bias must be {want}, not {types[2]}")


# ---- tf.quantize / tf.dequantize: the boundaries to float parts of the graph (CPU) ----------


def _quantize_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    _check(types[0].dtype.startswith("float"), f"tf.quantize input must be float, not {types[0]}")
    return [TensorType(types[0].shape, "int8")]


def _dequantize_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    _check_int8(types, ("input",), "tf.dequantize")
    return [TensorType(types[0].shape, "float32")]


_SCALE_ATTRS = {"scale": REQUIRED, "target": "cpu"}
register(
    "tf.quantize",
    Pattern.ELEMWISE,
    _quantize_type,
    lambda attrs, x: quantize(x, attrs["scale"]),
    attrs=_SCALE_ATTRS,
)
register(
    "tf.dequantize",
    Pattern.ELEMWISE,
    _dequantize_type,
    lambda attrs, q: dequantize(q, attrs["scale"]),
    attrs=_SCALE_ATTRS,
)


# ---- tf.qconv2d: int8 NCHW x int8 OIHW (+ int32 bias) -> int8 NCHW (grouped: I = C / group) ----


def _conv_geometry(attrs: dict[str, Any], x: tuple[int, ...], k: tuple[int, ...]) -> list[int]:
    *_, outs = window_geometry(attrs, x, k)
    return outs


def _qconv_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    _check_int8(types, ("input", "weight"), "tf.qconv2d")
    x, w, group = types[0].shape, types[1].shape, attrs["group"]
    _check(
        isinstance(group, int) and group >= 1 and len(w) == 4 and w[0] % group == 0,
        f"tf.qconv2d group must be an int >= 1 dividing the weight's O, not {group!r} ({w})",
    )
    _check(
        len(x) == 4 and x[1] == w[1] * group,
        f"tf.qconv2d input (NCHW) and weight (OIHW) must agree on C"
        f"{f' (C = group {group} x the weight I)' if group > 1 else ''}, not {x} and {w}",
    )
    _check_bias(types, w[0], "tf.qconv2d")
    return [TensorType((x[0], w[0], *_conv_geometry(attrs, x[2:], w[2:])), "int8")]


def qconv2d(attrs: dict[str, Any], x: np.ndarray, w: np.ndarray, b: Any = None) -> np.ndarray:
    """conv2d_int8 with the node's stride, (possibly asymmetric) zero padding, groups and
    requant."""
    top, left, bottom, right = attrs["pads"]
    if (top, left) != (bottom, right):  # zero padding is exact: 0 is the zero point
        x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
        top = left = 0
    return conv2d_int8(
        x, w, b, stride=tuple(attrs["strides"]), padding=(top, left),
        requant=requant_from_attrs(attrs), groups=attrs["group"],
    )  # fmt: skip


_SCALES = {"in_scale": REQUIRED, "weight_scale": REQUIRED}
register(
    "tf.qconv2d",
    Pattern.OPAQUE,
    _qconv_type,
    qconv2d,
    inputs=(2, 3),
    const_inputs=(1, 2),
    attrs={"strides": (1, 1), "pads": (0, 0, 0, 0), "group": 1, **_SCALES, **_REQUANT_ATTRS},
)


# ---- tf.qdense: int8 (N, K) x int8 (M, K) (+ int32 bias) -> int8 (N, M) ----------------------


def _qdense_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    _check_int8(types, ("input", "weight"), "tf.qdense")
    x, w = types[0].shape, types[1].shape
    _check(
        len(x) == 2 and len(w) == 2 and x[1] == w[1],
        f"tf.qdense input (N x K) and weight (M x K) must agree on K, not {x} and {w}",
    )
    _check_bias(types, w[0], "tf.qdense")
    return [TensorType((x[0], w[0]), "int8")]


register(
    "tf.qdense",
    Pattern.OPAQUE,
    _qdense_type,
    lambda attrs, x, w, b=None: dense_int8(x, w, b, requant=requant_from_attrs(attrs)),
    inputs=(2, 3),
    const_inputs=(1, 2),
    attrs={**_SCALES, **_REQUANT_ATTRS},
)


# ---- tf.qadd: the residual add of two int8 tensors of one shape ------------------------------


def add_attrs(params: AddParams) -> dict[str, AttrValue]:
    """Node attributes that store ``params`` exactly."""
    attrs = requant_attrs(params.requant)
    for side, step in (("lhs", params.lhs), ("rhs", params.rhs)):
        attrs[f"{side}_op"] = step.op.name if step else ""
        attrs[f"{side}_imm"] = int(step.imm) if step else 0
    return attrs


def add_from_attrs(attrs: dict[str, Any]) -> AddParams:
    """The ``AddParams`` a tf.qadd node stores (inverse of ``add_attrs``)."""
    steps = [
        AluStep(AluOp[attrs[f"{side}_op"]], attrs[f"{side}_imm"]) if attrs[f"{side}_op"] else None
        for side in ("lhs", "rhs")
    ]
    return AddParams(steps[0], steps[1], requant_from_attrs(attrs))


def _qadd_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    _check_int8(types, ("lhs", "rhs"), "tf.qadd")
    _check(
        types[0].shape == types[1].shape,
        f"tf.qadd operands must have one shape, not {types[0]} and {types[1]}",
    )
    return [types[0]]


register(
    "tf.qadd",
    Pattern.OPAQUE,
    _qadd_type,
    lambda attrs, a, b: add_int8(a, b, add_from_attrs(attrs)),
    inputs=(2, 2),
    attrs={
        "lhs_op": "",
        "lhs_imm": 0,
        "rhs_op": "",
        "rhs_imm": 0,
        "lhs_scale": REQUIRED,
        "rhs_scale": REQUIRED,
        **_REQUANT_ATTRS,
    },
)


# ---- tf.qmaxpool: max pooling on int8 (commutes with the monotonic requantization) -----------


def _qpool_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    _check_int8(types, ("input",), "tf.qmaxpool")
    x = types[0].shape
    _check(len(x) == 4, f"tf.qmaxpool input must be NCHW, not {types[0]}")
    outs = _conv_geometry(attrs, x[2:], tuple(attrs["kernel_shape"]))
    return [TensorType((*x[:2], *outs), "int8")]


def qmaxpool(attrs: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """max_pool2d_int8 after padding with the int8 minimum (below every value: -inf)."""
    top, left, bottom, right = attrs["pads"]
    low = np.iinfo(np.int8).min
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=low)
    kh, kw = attrs["kernel_shape"]
    sh, sw = attrs["strides"]
    return max_pool2d_int8(x, (kh, kw), (sh, sw))


register(
    "tf.qmaxpool",
    Pattern.OPAQUE,
    _qpool_type,
    qmaxpool,
    attrs={
        "kernel_shape": REQUIRED,
        "strides": (1, 1),
        "pads": (0, 0, 0, 0),
        "scale": REQUIRED,
        "target": "cpu",
    },
)

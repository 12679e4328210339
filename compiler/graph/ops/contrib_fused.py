"""onnxruntime's fused ops with an activation (`com.microsoft` domain), as a file saved after
its graph optimizations holds them (`SessionOptions.optimized_model_filepath`): FusedGemm
(a Gemm and its activation: BERT's pooler Tanh, an MLP's Relu) and FusedConv (a Conv, an
optional sum input Z, the activation).

Composites: the Gemm or Conv, the Add of Z, then the registry's own activation op with the
activation's parameters (FusedGemm's `activation_alpha`/`_beta`/`_gamma`, FusedConv's
`activation_params` list). An activation not listed in `ACTIVATIONS` is refused by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, get_op, register
from .contrib import MS, refuse
from .emit import Emitter
from .nn import _CONV_ATTRS as CONV_ATTRS

# activation -> its attributes, in the order of FusedConv's activation_params
ACTIVATIONS: dict[str, tuple[str, ...]] = {
    "Relu": (),
    "Tanh": (),
    "Sigmoid": (),
    "Softplus": (),
    "Softsign": (),
    "LeakyRelu": ("alpha",),
    "Elu": ("alpha",),
    "ThresholdedRelu": ("alpha",),
    "HardSigmoid": ("alpha", "beta"),
    "Selu": ("alpha", "gamma"),
    "Clip": ("min", "max"),
}


def _activation_params(op: str, attrs: dict[str, Any]) -> tuple[str, dict[str, float]]:
    """(activation op, its parameters given) of a FusedGemm's or FusedConv's attributes."""
    act = attrs["activation"]
    if act not in ACTIVATIONS:
        raise refuse(op, f"with activation {act!r} (built: {', '.join(ACTIVATIONS)})")
    names = ACTIVATIONS[act]
    if "activation_params" in attrs:
        values = list(attrs["activation_params"] or ())
        if values and len(values) != len(names):
            raise ValueError(
                f"{MS}{op} activation_params of {act} must hold {len(names)} values "
                f"({', '.join(names) or 'none'}), not {values}"
            )
        return act, dict(zip(names, values, strict=False))
    given = {n: attrs.get(f"activation_{n}") for n in names if n not in ("min", "max")}
    return act, {k: v for k, v in given.items() if v is not None}


def _activate_np(act: str, params: dict[str, float], y: np.ndarray) -> np.ndarray:
    if act == "Clip":
        low, high = params.get("min", -np.inf), params.get("max", np.inf)
        return np.clip(y, low, high).astype(y.dtype)
    spec = get_op(act)
    full = {k: v for k, v in spec.attrs.items()} | params
    return np.asarray(spec.compute(full, y)).astype(y.dtype)


def _activate(e: Emitter, act: str, params: dict[str, float], y: str, out: str) -> None:
    if act == "Clip":
        dtype = e.dtype(y)
        bounds = [e.const(params[k], k, dtype) if k in params else "" for k in ("min", "max")]
        e.add("Clip", [y, *bounds], outputs=[out])
        return
    e.add(act, [y], params, outputs=[out])


# ---- FusedGemm -------------------------------------------------------------------------------

_GEMM_ATTRS = {
    "alpha": 1.0,
    "beta": 1.0,
    "transA": 0,
    "transB": 0,
    "activation": "",
    "activation_alpha": None,
    "activation_beta": None,
    "activation_gamma": None,
}
_GEMM_KEYS = ("alpha", "beta", "transA", "transB")


def _gemm_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    _activation_params("FusedGemm", attrs)
    return get_op("Gemm").infer({k: attrs[k] for k in _GEMM_KEYS}, types, consts)


def _gemm(attrs: dict[str, Any], *arrays: np.ndarray) -> np.ndarray:
    y = get_op("Gemm").compute({k: attrs[k] for k in _GEMM_KEYS}, *arrays)
    return _activate_np(*_activation_params("FusedGemm", attrs), y)


def _expand_gemm(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    attrs = node.attr_dict
    y = e.add("Gemm", list(node.inputs), {k: attrs[k] for k in _GEMM_KEYS})
    _activate(e, *_activation_params("FusedGemm", attrs), y, node.outputs[0])


register(
    MS + "FusedGemm",
    Pattern.OUT_ELEMWISE_FUSABLE,
    _gemm_type,
    _gemm,
    inputs=(2, 3),
    attrs=_GEMM_ATTRS,
    expand=_expand_gemm,
)


# ---- FusedConv -------------------------------------------------------------------------------

_CONV_KEYS = tuple(CONV_ATTRS)  # the standard Conv's attributes
_CONV_ATTRS = {**CONV_ATTRS, "activation": "", "activation_params": None}


def _conv_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: attrs[k] for k in _CONV_KEYS if attrs.get(k) is not None}


def _conv_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    if attrs["activation"]:
        _activation_params("FusedConv", attrs)
    (out,) = get_op("Conv").infer(get_op("Conv").attrs | _conv_attrs(attrs), types[:3], consts[:3])
    if len(types) > 3 and types[3] is not None and types[3].shape != out.shape:
        raise ValueError(f"{MS}FusedConv Z must have the output's shape {out.shape}")
    return [out]


def _conv(attrs: dict[str, Any], x: np.ndarray, w: np.ndarray, *rest: Any) -> np.ndarray:
    bias, z = (*rest, None, None)[:2]
    spec = get_op("Conv")
    y = spec.compute(spec.attrs | _conv_attrs(attrs), x, w, bias)
    if z is not None:
        y = y + z
    if not attrs["activation"]:
        return y
    return _activate_np(*_activation_params("FusedConv", attrs), y)


def _expand_conv(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    attrs = node.attr_dict
    x, w, bias, z = (*node.inputs, "", "")[:4]
    out = node.outputs[0]
    act = attrs["activation"]
    y = e.add("Conv", [x, w, bias] if bias else [x, w], _conv_attrs(attrs))
    if z:
        y = e.add("Add", [y, z], outputs=None if act else [out])
    if act:
        _activate(e, *_activation_params("FusedConv", attrs), y, out)
    elif not z:
        e.rename(y, out)


register(
    MS + "FusedConv",
    Pattern.OUT_ELEMWISE_FUSABLE,
    _conv_type,
    _conv,
    inputs=(2, 4),
    attrs=_CONV_ATTRS,
    expand=_expand_conv,
)

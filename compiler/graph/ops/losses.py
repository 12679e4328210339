"""The loss ops' inference forms: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss
(evaluation scripts and exported training graphs compute them forward only). Both are
composites (`expand`); each also has its own numpy kernel written from the ONNX spec.

For input x [N, C, d...] and targets t [N, d...], the loss at each target is
`-x[n, t, d...] * w[t]` (w the optional class weights, else one), zero where t is
`ignore_index`; reduction "none" keeps that tensor, "sum" adds it up and "mean" divides the sum
by the sum of the weights taken (the count of targets not ignored, without weights).
SoftmaxCrossEntropyLoss is that loss of LogSoftmax(x) over the classes, which it can also
return (its second output).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....runtime.dtypes import is_floating
from ..ir import GraphBuilder, Node, TensorType
from ..registry import Pattern, register
from .emit import Emitter

_REDUCTIONS = ("none", "sum", "mean")


def _loss_type(op: str, attrs: dict[str, Any], types: list) -> TensorType:
    x, t = types[:2]
    weight = types[2] if len(types) > 2 else None
    if not is_floating(x.dtype):
        raise ValueError(f"{op} input must be a floating-point tensor, not {x.dtype}")
    if len(x.shape) < 2:
        raise ValueError(f"{op} input must be [N, C, d...], not shape {list(x.shape)}")
    want = (x.shape[0], *x.shape[2:])
    if t.dtype not in ("int32", "int64") or t.shape != want:
        raise ValueError(
            f"{op} target must be int32 or int64 of shape {list(want)}, not {t.dtype} "
            f"{list(t.shape)}"
        )
    if weight is not None and weight.shape != (x.shape[1],):
        raise ValueError(f"{op} weight must have shape [{x.shape[1]}], not {list(weight.shape)}")
    if attrs["reduction"] not in _REDUCTIONS:
        raise ValueError(
            f"{op} reduction must be one of {', '.join(_REDUCTIONS)}, not {attrs['reduction']!r}"
        )
    return TensorType(want if attrs["reduction"] == "none" else (), x.dtype)


def _nll_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    return [_loss_type("NegativeLogLikelihoodLoss", attrs, types)]


def _sce_type(attrs: dict[str, Any], types: list, consts: list) -> list[TensorType]:
    return [_loss_type("SoftmaxCrossEntropyLoss", attrs, types), types[0]]


def nll_loss(attrs: dict[str, Any], x: np.ndarray, t: np.ndarray, weight: Any = None) -> np.ndarray:
    """numpy: the negative log-likelihood of the targets, weighted and reduced."""
    ignore = attrs.get("ignore_index")
    valid = np.ones(t.shape, bool) if ignore is None else t != ignore
    safe = np.where(valid, t, 0).astype(np.int64)
    picked = np.take_along_axis(x, safe[:, None], axis=1)[:, 0]
    w = np.ones(t.shape, x.dtype) if weight is None else weight[safe]
    w = np.where(valid, w, 0).astype(x.dtype)
    loss = -picked * w
    if attrs["reduction"] == "sum":
        return np.asarray(loss.sum(), x.dtype)
    if attrs["reduction"] == "mean":
        return np.asarray(loss.sum() / w.sum(), x.dtype)
    return loss.astype(x.dtype)


def softmax_cross_entropy_loss(
    attrs: dict[str, Any], x: np.ndarray, t: np.ndarray, weight: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """numpy: (the loss of the log-softmax over classes, that log-softmax)."""
    z = x.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    log_prob = (z - np.log(np.exp(z).sum(axis=1, keepdims=True))).astype(x.dtype)
    return nll_loss(attrs, log_prob, t, weight), log_prob


def _expand_loss(e: Emitter, node: Node, x: str) -> None:
    """`node`'s first output: the loss of log-probabilities `x` (node's other inputs)."""
    t = node.inputs[1]
    weight = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    attrs = node.attr_dict
    dtype, rank = e.dtype(x), len(e.shape(x))
    t = t if e.dtype(t) == "int64" else e.add("Cast", [t], {"to": "int64"})
    valid = None
    if attrs.get("ignore_index") is not None:
        ignore = e.const(attrs["ignore_index"], "ignore_index", "int64")
        valid = e.add("Not", [e.add("Equal", [t, ignore])])
        t = e.add("Where", [valid, t, e.const(0, "zero", "int64")])
    picked = e.add("GatherElements", [x, e.add("Unsqueeze", [t, e.ints([1], "axes")])], {"axis": 1})
    loss = e.add("Neg", [e.reshape(picked, e.shape(t))])
    w = None
    if weight is not None:
        w = e.add("Gather", [weight, t], {"axis": 0})
        if valid is not None:
            w = e.add("Where", [valid, w, e.const(0, "zero", dtype)])
    elif valid is not None:
        w = e.add("Cast", [valid], {"to": dtype})
    if w is not None:
        loss = e.add("Mul", [loss, w])
    reduction = attrs["reduction"]
    if reduction == "none":
        e.rename(loss, node.outputs[0])
        return
    axes = e.ints(range(rank - 1), "axes")
    if reduction == "mean" and w is None:
        e.add("ReduceMean", [loss, axes], {"keepdims": 0}, outputs=[node.outputs[0]])
        return
    total = e.add("ReduceSum", [loss, axes], {"keepdims": 0})
    if reduction == "sum":
        e.rename(total, node.outputs[0])
        return
    count = e.add("ReduceSum", [w, axes], {"keepdims": 0})
    e.add("Div", [total, count], outputs=[node.outputs[0]])


def _expand_nll(b: GraphBuilder, node: Node) -> None:
    _expand_loss(Emitter(b, node), node, node.inputs[0])


def _expand_sce(b: GraphBuilder, node: Node) -> None:
    e = Emitter(b, node)
    log_prob = e.add("LogSoftmax", [node.inputs[0]], {"axis": 1})
    _expand_loss(e, node, log_prob)
    if len(node.outputs) > 1 and node.outputs[1]:
        e.rename(log_prob, node.outputs[1])


_LOSS_ATTRS = {"reduction": "mean", "ignore_index": None}
register("NegativeLogLikelihoodLoss", Pattern.OPAQUE, _nll_type, nll_loss, inputs=(2, 3),
         attrs=_LOSS_ATTRS, expand=_expand_nll)  # fmt: skip
register("SoftmaxCrossEntropyLoss", Pattern.OPAQUE, _sce_type, softmax_cross_entropy_loss,
         inputs=(2, 3), outputs=(1, 2), attrs=_LOSS_ATTRS, expand=_expand_sce)  # fmt: skip

__all__ = ["nll_loss", "softmax_cross_entropy_loss"]

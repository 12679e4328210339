"""Tensor intrinsic declarations: a compute it performs plus the loop IR it lowers to (TVM §4.3).

The declaration is independent of any schedule; `Stage.tensorize(axis, intrin)` replaces the loop
nest under `axis` with the intrinsic's lowering. Intrinsics are registered by name so that a saved
schedule can be replayed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .tensor import ComputeOp, PlaceholderOp, Tensor

# name -> TensorIntrin; filled by decl_tensor_intrin, read by schedule replay
INTRINSICS: dict[str, TensorIntrin] = {}


@dataclass(frozen=True, slots=True, eq=False)
class TensorIntrin:
    """A hardware (or library) operation on small tensors.

    Attributes:
        name: registry name, used by saved schedules.
        op: the compute the intrinsic performs, over its own placeholders.
        inputs: those placeholders, in argument order.
        lower: `lower(ins, outs) -> Stmt`, given one `tir.BufferRegion` per input and output;
            returns the loop-IR statement that performs the computation in place.
    """

    name: str
    op: ComputeOp
    inputs: tuple[Tensor, ...]
    lower: Callable[[list[Any], list[Any]], Any]


def decl_tensor_intrin(
    output: Tensor, lower: Callable[[list[Any], list[Any]], Any], name: str
) -> TensorIntrin:
    """Declare (and register under `name`) a tensor intrinsic computing `output`.

    Args:
        output: a compute over placeholders only, e.g. a 4x4 matmul.
        lower: builds the loop IR for given input/output buffer regions.
        name: unique registry name.

    Raises:
        ValueError: when `output` is not a compute over placeholders.
    """
    op = output.op
    if not isinstance(op, ComputeOp):
        raise ValueError(f"tensor intrinsic {name!r} must be declared by a compute, not {op!r}")
    inputs = tuple(op.input_tensors)
    for t in inputs:
        if not isinstance(t.op, PlaceholderOp):
            raise ValueError(f"tensor intrinsic {name!r}: input {t.name!r} must be a placeholder")
    intrin = TensorIntrin(name, op, inputs, lower)
    INTRINSICS[name] = intrin
    return intrin

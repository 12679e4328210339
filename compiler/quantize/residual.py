"""The int8 residual add as the accelerator's ALU computes it: rescale, add, requantize.

Adding two int8 tensors with different scales ``s_a``, ``s_b`` into an output scale ``s_y``
needs ``y = clip(round(a * s_a / s_y + b * s_b / s_y))``. On the tensor ALU each operand,
widened into the accumulator, is first brought to a common fine scale ``s_y / 2**n`` by one
instruction (a shift, ``SHR -k`` being a left shift, or with ``HWConfig.alu_mul`` a ``MUL``);
the two are summed by ``ADD`` with an ACC operand; then the usual requantization steps
(``requant_params`` for the ratio ``2**-n``: rounding ``ADD``, ``SHR n``, ``MAX``/``MIN``)
return to int8::

    acc = scale_a(a) + scale_b(b)         scale_x: SHR -k_x (shift mode) or MUL m_x (mul mode)
    y   = requant(acc, ratio 2**-n)       fused ReLU: MAX 0

In shift mode the scales are powers of two and ``n`` is chosen so the ratios are exact
(``k_x = log2(s_x / s_y) + n``); in mul mode ``m_x = round(s_x / s_y * 2**n)`` with ``n``
as large as the 16-bit immediate allows, so each realized ratio ``m_x / 2**n`` is within
``2**-(n+1)`` of the real one, where ``2**n >= 2**14 / max(ratios)``.

Example:
    >>> import numpy as np
    >>> from tensorforge.hw.config import HWConfig
    >>> p = add_params(2.0**-1, 1.0, HWConfig.preset("pynq"), relu=True)
    >>> [(s.op.name, s.imm) for s in (p.lhs, p.rhs) if s], p.requant.shift
    ([('SHR', -1)], 1)
    >>> add_int8(np.array([3, -9], np.int8), np.array([2, 1], np.int8), p).tolist()
    [4, 0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...hw.isa import AluOp, alu_apply, wrap
from .requant import IMM_MAX, AluStep, RequantParams, apply_requant, requant_params
from .scheme import qrange

if TYPE_CHECKING:
    from ...hw.config import HWConfig

# Shift-mode operands are scaled by at most 2**MAX_LEFT_SHIFT (so 127 * 2**k stays far from
# wrapping); a larger spread between the two ratios right-shifts the smaller operand instead.
MAX_LEFT_SHIFT = 16


@dataclass(frozen=True, slots=True)
class AddParams:
    """The exact integer residual add ``requant(scale_a(a) + scale_b(b))``.

    Attributes:
        lhs, rhs: the ALU step that scales each operand (``SHR`` with a signed amount, or
            ``MUL``), or None when the operand is used as is.
        requant: the requantization of the sum (rounding, shift, ReLU and clip).
    """

    lhs: AluStep | None
    rhs: AluStep | None
    requant: RequantParams


def add_params(
    ratio_a: float,
    ratio_b: float,
    cfg: HWConfig,
    *,
    mode: str = "shift",
    relu: bool = False,
) -> AddParams:
    """The ALU steps of ``y = clip(round(a * ratio_a + b * ratio_b))`` (ratios ``s_x / s_y``).

    Args:
        ratio_a, ratio_b: positive factors from each operand's scale to the output scale.
        cfg: the accelerator config (accumulator width, the MUL extension).
        mode: ``"shift"`` (both ratios powers of two) or ``"mul"`` (any ratios; ``MUL`` needs
            ``cfg.alu_mul`` unless a multiplier happens to be a power of two).
        relu: fuse a ReLU (saturate at 0).

    Raises:
        ValueError: naming the argument, for a non-positive ratio, a ratio that is not a power
            of two in shift mode, or a MUL on a config without ``alu_mul``.
    """
    for what, r in (("ratio_a", ratio_a), ("ratio_b", ratio_b)):
        if not (math.isfinite(r) and r > 0):
            raise ValueError(f"residual add {what} must be a positive finite number, not {r!r}")
    if mode == "shift":
        amounts, n = _shift_amounts(ratio_a, ratio_b)
        lhs, rhs = (_shift_step(k) for k in amounts)
        gains = [2.0**k for k in amounts]
    elif mode == "mul":
        multipliers, n = _multipliers(ratio_a, ratio_b)
        lhs, rhs = (_mul_step(m, cfg) for m in multipliers)
        gains = [float(m) for m in multipliers]
    else:
        raise ValueError(f"residual add mode must be 'shift' or 'mul', not {mode!r}")
    bound = math.ceil(qrange(cfg.inp_width)[1] * sum(gains))
    requant = requant_params(2.0**-n, cfg, mode="shift", relu=relu, acc_bound=max(bound, 1))
    return AddParams(lhs, rhs, requant)


def _log2_exact(ratio: float, what: str) -> int:
    mantissa, exponent = math.frexp(ratio)
    if mantissa != 0.5:
        raise ValueError(
            f"residual add {what} must be a power of two in mode 'shift', not {ratio!r} "
            "(choose power-of-two scales, or use mode 'mul')"
        )
    return exponent - 1


def _shift_amounts(ratio_a: float, ratio_b: float) -> tuple[tuple[int, int], int]:
    """Left-shift amounts (negative: right) and the final right shift n."""
    ea, eb = _log2_exact(ratio_a, "ratio_a"), _log2_exact(ratio_b, "ratio_b")
    n = max(0, -min(ea, eb))
    n = min(n, max(0, MAX_LEFT_SHIFT - max(ea, eb)))
    return (ea + n, eb + n), n


def _shift_step(k: int) -> AluStep | None:
    return AluStep(AluOp.SHR, -k) if k else None


def _multipliers(ratio_a: float, ratio_b: float) -> tuple[tuple[int, int], int]:
    """The largest n whose multipliers round(ratio * 2**n) fit the immediate."""
    n = math.floor(math.log2(IMM_MAX / max(ratio_a, ratio_b)))
    while max(round(r * 2.0**n) for r in (ratio_a, ratio_b)) > IMM_MAX:
        n -= 1
    return (round(ratio_a * 2.0**n), round(ratio_b * 2.0**n)), n


def _mul_step(m: int, cfg: HWConfig) -> AluStep | None:
    if m == 1:
        return None
    if m > 0 and m & (m - 1) == 0:
        return AluStep(AluOp.SHR, -(m.bit_length() - 1))
    if not cfg.alu_mul:
        raise ValueError(
            f"residual add mode 'mul' needs the ALU MUL extension, but HWConfig {cfg.name!r} "
            f"has alu_mul=False (multiplier {m}; use mode 'shift' with power-of-two scales)"
        )
    return AluStep(AluOp.MUL, m)


def _scale(x: np.ndarray, step: AluStep | None, acc_width: int) -> np.ndarray:
    x = x.astype(np.int64)
    return x if step is None else alu_apply(step.op, x, step.imm, acc_width)


def add_int8(a: np.ndarray, b: np.ndarray, params: AddParams) -> np.ndarray:
    """The int8 residual add: both operands int8 of one shape; returns int8 of that shape.

    Raises:
        TypeError: if an operand is not int8.
        ValueError: if the shapes differ.
    """
    a, b = np.asarray(a), np.asarray(b)
    for what, x in (("a", a), ("b", b)):
        if x.dtype != np.int8:
            raise TypeError(f"add_int8: {what} must be int8, not {x.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"add_int8: operands must have one shape, not {a.shape} and {b.shape}")
    width = params.requant.acc_width
    acc = alu_apply(AluOp.ADD, _scale(a, params.lhs, width), _scale(b, params.rhs, width), width)
    return wrap(apply_requant(acc, params.requant), 8).astype(np.int8)

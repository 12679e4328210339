"""Requantization as the accelerator's ALU computes it: accumulator int32 -> int8.

A requantization multiplies an accumulator by ``ratio = acc_scale / out_scale`` and saturates to
the output range. The tensor ALU has MIN, MAX, ADD, SHR (arithmetic, signed amount) and, on
configs with ``alu_mul``, MUL, each with a signed ``ALU_IMM_WIDTH``-bit immediate; it has no
rounding instruction. So the ratio is realized as ``multiplier / 2**shift`` and the steps are::

    MUL multiplier           (only when multiplier != 1; needs HWConfig.alu_mul)
    SHR pre                  (only when the shift is too large for one rounding constant)
    ADD 2**(post - 1)        (only with rounding: round half up)
    SHR post
    MAX lo                   (lo = 0 with ReLU, else the output minimum)
    MIN hi

With per-channel weight scales (``requant_params_per_channel``) each output channel has its own
ratio. The ALU's immediate is one value per instruction, so the multipliers become a tensor: an
int32 vector (one per output channel) loaded into the accumulator buffer beside the bias and
multiplied in by one tensor-tensor ``MUL``; the shift, rounding and clipping that follow are
shared immediates (one shift for every channel, chosen so that the largest product still fits).

Splitting the shift is exact: ``floor((floor(x / 2**a) + 2**(b-1)) / 2**b)`` equals
``floor((x + 2**(a+b-1)) / 2**(a+b))``, so the result is always
``clip(floor(acc * multiplier / 2**shift + 1/2))`` (or without the ``+ 1/2`` when rounding is
off), provided ``|acc| * multiplier`` stays within the accumulator (``acc_bound`` guarantees it).

``apply_requant`` runs the steps through ``hw.isa.alu_apply``, the function every model of the
hardware uses, so this is the accelerator's arithmetic bit for bit.

Example:
    >>> import numpy as np
    >>> from tensorforge.hw.config import HWConfig
    >>> p = requant_params(2.0**-4, HWConfig.preset("pynq"), relu=True)
    >>> [(s.op.name, s.imm) for s in p.steps]
    [('ADD', 8), ('SHR', 4), ('MAX', 0), ('MIN', 127)]
    >>> apply_requant(np.array([-40, 23, 24, 5000]), p).tolist()
    [0, 1, 2, 127]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from ...hw.isa import ALU_IMM_WIDTH, AluOp, alu_apply
from .scheme import AccumulatorRangeError, qrange

if TYPE_CHECKING:
    from ...hw.config import HWConfig

IMM_MAX = (1 << (ALU_IMM_WIDTH - 1)) - 1
IMM_MIN = -(1 << (ALU_IMM_WIDTH - 1))
MODES = ("shift", "mul")
WEIGHT_SCALES = ("per-channel", "per-tensor")
MODE_NAMES = {"shift": "shift (power-of-two scales)", "mul": "mul (multiply+shift)"}


def default_weight_scales(mode: str) -> str:
    """The weight scales a requantization mode gets by default: ``"per-channel"`` with
    multiply+shift (one multiplier per channel), ``"per-tensor"`` with power-of-two shifts."""
    return "per-channel" if mode == "mul" else "per-tensor"


def default_mode(cfg: HWConfig) -> str:
    """The most accurate requantization mode `cfg` can run: ``"mul"`` with the ALU MUL
    extension (any scales), else ``"shift"`` (power-of-two scales, VTA-compatible)."""
    return "mul" if cfg.alu_mul else "shift"


@dataclass(frozen=True, slots=True)
class AluStep:
    """One ALU instruction with an immediate operand: ``ACC = op(ACC, imm)``."""

    op: AluOp
    imm: int


@dataclass(frozen=True, slots=True)
class RequantParams:
    """The exact integer requantization ``acc -> clip(round(acc * multiplier / 2**shift))``.

    Attributes:
        steps: the ALU instructions, in order (what the code generator emits).
        multiplier: the integer multiplier (1 when no MUL is needed).
        shift: the total right shift (negative: a left shift).
        rounding: whether a rounding constant is added (round half up) before the shift.
        lo, hi: the saturation bounds (``lo`` is 0 when ReLU is fused).
        acc_width: the accumulator width the steps wrap to.
        channel_multipliers: per output channel, the integer multipliers applied (wrapping) before
            ``steps`` (which then hold no MUL, and ``multiplier`` is 1); empty: per tensor.
        pre_shift: with channel multipliers, an arithmetic right shift of the accumulator before
            them (``SHR pre_shift``), so the multipliers can be that many bits more precise.
    """

    steps: tuple[AluStep, ...]
    multiplier: int
    shift: int
    rounding: bool
    lo: int
    hi: int
    acc_width: int
    channel_multipliers: tuple[int, ...] = ()
    pre_shift: int = 0

    @property
    def ratio(self) -> Fraction:
        """The ratio these steps realize exactly (per tensor only: see ``channel_ratios``)."""
        if self.channel_multipliers:
            raise ValueError("a per-channel requantization has one ratio per channel")
        return Fraction(self.multiplier) / Fraction(2) ** self.shift

    def channel_ratios(self) -> list[Fraction]:
        """The ratio of each output channel (per-channel params only)."""
        total = Fraction(2) ** (self.shift + self.pre_shift)
        return [Fraction(m) / total for m in self.channel_multipliers]


def requant_params(
    ratio: float,
    cfg: HWConfig,
    *,
    mode: str = "shift",
    rounding: bool = True,
    relu: bool = False,
    acc_bound: int | None = None,
) -> RequantParams:
    """The ALU steps that requantize accumulators by ``ratio`` (``acc_scale / out_scale``).

    Args:
        ratio: the positive real factor from accumulator units to output units.
        cfg: the accelerator config (accumulator and output widths, the MUL extension).
        mode: ``"shift"``: ratio must be a power of two (pure shift, VTA-compatible);
            ``"mul"``: any ratio, as ``multiplier / 2**shift`` (needs ``cfg.alu_mul`` unless the
            ratio is a power of two).
        rounding: add ``2**(shift-1)`` before shifting (round half up, error <= 0.5 LSB);
            without it the shift floors (error < 1 LSB).
        relu: saturate at 0 instead of the output minimum (``-(2**(out_width-1) - 1)``).
        acc_bound: the largest ``|acc|`` the steps must handle without wrapping. Required for
            ``"mul"`` (it bounds the multiplier) and for a left shift; when given it is always
            checked. Without it, shift mode assumes ``|acc| + 2**14`` fits the accumulator
            (the rounding ADD wraps, as the hardware does, beyond that).

    Returns:
        The ``RequantParams``; ``apply_requant`` evaluates them.

    Raises:
        ValueError: naming the argument, for a bad ratio or mode, a missing or too large
            ``acc_bound``, or a MUL on a config without ``alu_mul``.
    """
    if not (math.isfinite(ratio) and ratio > 0):
        raise ValueError(f"requant ratio must be a positive finite number, not {ratio!r}")
    if mode not in MODES:
        raise ValueError(f"requant mode must be one of {MODES}, not {mode!r}")
    if acc_bound is not None and acc_bound < 1:
        raise ValueError(f"acc_bound must be >= 1, not {acc_bound!r}")
    if mode == "shift":
        multiplier, shift = _power_of_two(ratio)
    else:
        multiplier, shift = _multiplier(ratio, cfg.acc_width, acc_bound)
        if multiplier != 1 and not cfg.alu_mul:
            raise ValueError(
                f"requant mode 'mul' needs the ALU MUL extension, but HWConfig {cfg.name!r} has "
                f"alu_mul=False (ratio {ratio!r} is not a power of two; use mode 'shift' with "
                "power-of-two scales)"
            )
    _check_no_overflow(multiplier, shift, rounding, cfg.acc_width, acc_bound)
    lo, hi = qrange(cfg.out_width)  # symmetric, as every quantized tensor
    lo = 0 if relu else lo
    steps = _steps(multiplier, shift, rounding, lo, hi, cfg.acc_width)
    return RequantParams(steps, multiplier, shift, rounding, lo, hi, cfg.acc_width)


def requant_params_per_channel(
    ratios: np.ndarray,
    cfg: HWConfig,
    *,
    acc_bounds: np.ndarray,
    rounding: bool = True,
    relu: bool = False,
    pre_shift: int = 0,
) -> RequantParams:
    """The requantization of per-channel ratios: ``clip(round((acc_c >> pre) * m_c / 2**shift))``.

    One tensor-tensor MUL by the int32 multipliers ``m_c`` (loaded like the bias), then the
    shared shift, rounding and clipping steps. The common shift is the largest for which every
    ``|acc_c| * m_c`` (``|acc_c| <= acc_bounds[c]``) still fits the accumulator with room for the
    rounding constant, so each channel keeps as many bits of its ratio as its bound allows.
    ``pre_shift``: shift the accumulator right (floor) by that much first, which divides the
    bounds and so buys the multipliers as many bits (the floor costs up to ``2**pre * ratio``
    of an output step).

    Raises:
        ValueError: for a ratio that is not positive and finite, mismatched lengths, a config
            without the ALU MUL, or a bound too large for any multiplier.
    """
    r = np.asarray(ratios, dtype=np.float64).reshape(-1)
    bounds = np.asarray(acc_bounds, dtype=np.int64).reshape(-1)
    if r.size == 0 or r.shape != bounds.shape:
        raise ValueError(f"ratios and acc_bounds must be non-empty and of one length, not "
                         f"{r.size} and {bounds.size}")  # fmt: skip
    if not (np.all(np.isfinite(r)) and np.all(r > 0)):
        raise ValueError(f"requant ratios must be positive finite numbers, not {r.min()!r}")
    if np.any(bounds < 1):
        raise ValueError(f"acc_bounds must be >= 1, not {int(bounds.min())}")
    if not cfg.alu_mul:
        raise ValueError(f"per-channel requantization needs the ALU MUL extension, but HWConfig "
                         f"{cfg.name!r} has alu_mul=False")  # fmt: skip
    if not 0 <= pre_shift < cfg.acc_width - 1:
        raise ValueError(f"pre_shift must be in [0, {cfg.acc_width - 2}], not {pre_shift!r}")
    r, bounds = r * 2.0**pre_shift, -(-bounds // (1 << pre_shift))
    limits = (1 << (cfg.acc_width - 2)) // bounds
    if np.any(limits < 1):
        raise ValueError(f"acc_bounds must be <= 2**{cfg.acc_width - 2} for a per-channel "
                         f"requantization, not {int(bounds.max())}")  # fmt: skip
    exact = [Fraction(float(x)) for x in r]

    def multipliers(shift: int) -> list[int]:
        return [math.floor(e * Fraction(2) ** shift + Fraction(1, 2)) for e in exact]

    shift = min(math.floor(math.log2(int(lim) / x)) for lim, x in zip(limits, r, strict=True))
    ms = multipliers(shift)
    while any(m > lim for m, lim in zip(ms, limits, strict=True)):  # float log2 overshoot
        shift -= 1
        ms = multipliers(shift)
    while all(m % 2 == 0 for m in ms) and any(ms):  # canonical: not all even
        ms = [m // 2 for m in ms]
        shift -= 1
    for m, bound in zip(ms, bounds, strict=True):
        _check_no_overflow(m, shift, rounding, cfg.acc_width, int(bound))
    lo, hi = qrange(cfg.out_width)
    lo = 0 if relu else lo
    steps = _steps(1, shift, rounding, lo, hi, cfg.acc_width)
    return RequantParams(steps, 1, shift, rounding, lo, hi, cfg.acc_width, tuple(ms), pre_shift)


def _power_of_two(ratio: float) -> tuple[int, int]:
    mantissa, exponent = math.frexp(ratio)
    if mantissa != 0.5:
        raise ValueError(
            f"requant ratio must be a power of two in mode 'shift', not {ratio!r} "
            "(choose power-of-two scales, or use mode 'mul')"
        )
    return 1, 1 - exponent


def _multiplier(ratio: float, acc_width: int, acc_bound: int | None) -> tuple[int, int]:
    """The most precise (multiplier, shift) whose product with acc_bound cannot wrap."""
    if acc_bound is None:
        raise ValueError("acc_bound is required in requant mode 'mul' (the largest |acc|)")
    # Half the accumulator range for the product leaves room for the rounding constant.
    limit = min(IMM_MAX, (1 << (acc_width - 2)) // acc_bound)
    if limit < 1:
        raise AccumulatorRangeError(
            f"acc_bound must be <= 2**{acc_width - 2} for requant mode 'mul', not {acc_bound!r}"
        )
    exact = Fraction(ratio)
    shift = math.floor(math.log2(limit / ratio))  # exact * 2**shift lies in (limit/2, limit]
    multiplier = math.floor(exact * Fraction(2) ** shift + Fraction(1, 2))
    while multiplier > limit:  # float log2 or rounding up can overshoot by one step
        shift -= 1
        multiplier = math.floor(exact * Fraction(2) ** shift + Fraction(1, 2))
    while multiplier % 2 == 0:  # the canonical form: an odd multiplier (1 when a power of two)
        multiplier //= 2
        shift -= 1
    return multiplier, shift


def _check_no_overflow(
    multiplier: int, shift: int, rounding: bool, acc_width: int, acc_bound: int | None
) -> None:
    """No intermediate value for |acc| <= acc_bound may wrap (a left shift needs the bound)."""
    if acc_bound is None:
        if shift < 0:
            raise ValueError(
                f"acc_bound is required when the requant ratio is > 1 (a left shift by {-shift})"
            )
        return
    peak = (acc_bound * multiplier) << max(0, -shift)
    if rounding and shift > 0:
        peak += 1 << (min(shift, ALU_IMM_WIDTH - 1) - 1)
    if peak > (1 << (acc_width - 1)) - 1:
        raise AccumulatorRangeError(
            f"acc_bound * ratio must fit {acc_width}-bit accumulators, not "
            f"{acc_bound} * {multiplier} * 2**{-shift}" + (" + rounding" if rounding else "")
        )


def _steps(
    multiplier: int, shift: int, rounding: bool, lo: int, hi: int, acc_width: int
) -> tuple[AluStep, ...]:
    # Shifting right by acc_width - 1 or more leaves only the sign, so larger amounts are
    # clamped (exact), and every amount fits the immediate.
    shift = max(shift, -acc_width)
    steps = []
    if multiplier != 1:
        steps.append(AluStep(AluOp.MUL, multiplier))
    if rounding and shift > 0:
        # 2**(post - 1) must fit the signed immediate; shift away the rest first (exact).
        post = min(shift, ALU_IMM_WIDTH - 1)
        if shift > post:
            steps.append(AluStep(AluOp.SHR, min(shift - post, acc_width)))
        steps += [AluStep(AluOp.ADD, 1 << (post - 1)), AluStep(AluOp.SHR, post)]
    elif shift != 0:
        steps.append(AluStep(AluOp.SHR, min(shift, acc_width)))
    steps += [AluStep(AluOp.MAX, lo), AluStep(AluOp.MIN, hi)]
    for step in steps:
        assert IMM_MIN <= step.imm <= IMM_MAX, step
    return tuple(steps)


def apply_requant(acc: np.ndarray, params: RequantParams, channel_axis: int = 1) -> np.ndarray:
    """Run the requantization steps on accumulator values with the hardware's ALU semantics.

    Args:
        acc: integer accumulator values (any shape), within the signed ``acc_width`` range.
        params: from ``requant_params`` or ``requant_params_per_channel``.
        channel_axis: the output-channel axis of ``acc`` (per-channel params only).

    Returns:
        int64 values in ``[params.lo, params.hi]``.

    Raises:
        ValueError: if an accumulator value is outside the ``acc_width``-bit range.
    """
    x = np.asarray(acc, dtype=np.int64)
    lo, hi = qrange(params.acc_width, narrow=False)
    if x.size and (x.min() < lo or x.max() > hi):
        raise ValueError(
            f"accumulator values must fit {params.acc_width} bits [{lo}, {hi}], "
            f"not [{x.min()}, {x.max()}]"
        )
    if params.channel_multipliers:
        m = np.asarray(params.channel_multipliers, dtype=np.int64)
        if x.ndim <= channel_axis or x.shape[channel_axis] != m.size:
            raise ValueError(f"per-channel requantization of {m.size} channels needs axis "
                             f"{channel_axis} of that length, not shape {x.shape}")  # fmt: skip
        shape = [1] * x.ndim
        shape[channel_axis] = -1
        if params.pre_shift:
            x = alu_apply(AluOp.SHR, x, params.pre_shift, params.acc_width)
        x = alu_apply(AluOp.MUL, x, m.reshape(shape), params.acc_width)
    for step in params.steps:
        x = alu_apply(step.op, x, step.imm, params.acc_width)
    return x

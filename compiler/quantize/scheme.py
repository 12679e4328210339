"""Symmetric int8 quantization: scale choice, quantize/dequantize, weights and biases.

Every tensor is quantized per tensor with a zero point of 0: ``real = scale * q``. Weights and
activations use the narrow range ``[-(2**(bits-1) - 1), 2**(bits-1) - 1]`` (``[-127, 127]`` for
int8), so negating a value never overflows. A bias is stored at the accumulator's scale
``input_scale * weight_scale`` as an ``acc_width``-bit integer, so that the GEMM core can start
from it (or the ALU can ADD it) before requantization.

Scales are either arbitrary positive floats (requantized by multiply+shift on configs with the
ALU MUL extension) or powers of two (requantized by a pure shift, which any VTA-compatible
config can do).

Example:
    >>> import numpy as np
    >>> s = choose_scale(1.0, power_of_two=True)
    >>> s == 2.0**-6
    True
    >>> quantize(np.array([0.5, -1.0, 3.0]), s).tolist()
    [32, -64, 127]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def qrange(bits: int = 8, narrow: bool = True) -> tuple[int, int]:
    """The (min, max) integers of a signed ``bits``-bit value (narrow: symmetric about 0)."""
    if bits < 2:
        raise ValueError(f"bits must be >= 2, not {bits!r}")
    top = (1 << (bits - 1)) - 1
    return (-top if narrow else -top - 1), top


def is_power_of_two(scale: float) -> bool:
    """Whether a positive float is exactly 2**k for an integer k."""
    return scale > 0 and math.frexp(scale)[0] == 0.5


def choose_scale(threshold: float, bits: int = 8, power_of_two: bool = False) -> float:
    """The scale that maps ``[-threshold, threshold]`` onto the narrow ``bits``-bit range.

    Args:
        threshold: the largest magnitude to represent (from an observer); 0 gives scale 1.
        bits: the integer width (8 for int8).
        power_of_two: round the scale up to a power of two, so no value within the threshold
            saturates and every requantization between such scales is a pure shift.

    Returns:
        The scale, a positive float (``real = scale * q``).

    Raises:
        ValueError: if the threshold is negative or not finite.
    """
    if not math.isfinite(threshold) or threshold < 0:
        raise ValueError(f"threshold must be a finite number >= 0, not {threshold!r}")
    if threshold == 0:
        return 1.0
    scale = threshold / qrange(bits)[1]
    if power_of_two:
        scale = 2.0 ** math.ceil(math.log2(scale))
    return scale


def quantize(x: np.ndarray, scale: float, bits: int = 8, narrow: bool = True) -> np.ndarray:
    """``clip(round_half_even(x / scale))`` as int8 (bits <= 8) or int32 (wider).

    Raises:
        ValueError: if the scale is not a positive finite number.
    """
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number, not {scale!r}")
    lo, hi = qrange(bits, narrow)
    q = np.clip(np.rint(np.asarray(x, dtype=np.float64) / scale), lo, hi)
    return q.astype(np.int8 if bits <= 8 else np.int32)


def dequantize(q: np.ndarray, scale: float) -> np.ndarray:
    """``q * scale`` as float32."""
    return (np.asarray(q, dtype=np.float64) * scale).astype(np.float32)


class AccumulatorRangeError(ValueError):
    """A layer's integer values cannot fit the accumulators at its calibrated scales (a bias,
    or the accumulator bound times the requantization multiplier): the layer has no int8 form,
    and ``quantize_graph`` leaves it float."""


@dataclass(frozen=True)
class QTensor:
    """An integer tensor and the scale that maps it to real values (``real = scale * values``);
    per-channel weights and their biases carry one scale per output channel (axis 0)."""

    values: np.ndarray
    scale: float | np.ndarray

    def dequantize(self) -> np.ndarray:
        """The real values this tensor stands for, as float32."""
        if np.ndim(self.scale) == 0:
            return dequantize(self.values, float(self.scale))
        per_row = np.asarray(self.scale).reshape((-1,) + (1,) * (self.values.ndim - 1))
        return (np.asarray(self.values, dtype=np.float64) * per_row).astype(np.float32)


def quantize_weight(w: np.ndarray, bits: int = 8, power_of_two: bool = False) -> QTensor:
    """Per-tensor symmetric quantization of a weight tensor from its absolute maximum.

    Example:
        >>> import numpy as np
        >>> qw = quantize_weight(np.array([0.5, -0.25]), power_of_two=True)
        >>> qw.values.tolist(), qw.scale
        ([64, -32], 0.0078125)
    """
    w = np.asarray(w, dtype=np.float64)
    threshold = float(np.max(np.abs(w))) if w.size else 0.0
    scale = choose_scale(threshold, bits, power_of_two)
    return QTensor(quantize(w, scale, bits), scale)


# A channel's weight scale is never finer than this fraction of the layer's largest channel's:
# a near-dead channel (weights 1e-20 in trained models) would otherwise get a scale so fine
# that its bias overflows the accumulator. Per-tensor scales round such a channel to zeros.
MIN_CHANNEL_RANGE = 2.0**-12


def quantize_weight_per_channel(w: np.ndarray, bits: int = 8) -> QTensor:
    """Symmetric quantization with one scale per output channel (axis 0) from each channel's
    absolute maximum, floored at ``MIN_CHANNEL_RANGE`` of the largest; ``scale`` is then a
    float64 array of shape ``(O,)`` (an all-zero layer gets scale 1).

    Example:
        >>> import numpy as np
        >>> qw = quantize_weight_per_channel(np.array([[0.5, -0.25], [2.0, 1.0]]))
        >>> qw.values.tolist()
        [[127, -64], [127, 64]]
    """
    w = np.asarray(w, dtype=np.float64)
    if w.ndim < 1 or w.shape[0] == 0:
        raise ValueError(f"per-channel weights need an output-channel axis, not shape {w.shape}")
    peaks = np.abs(w.reshape(w.shape[0], -1)).max(axis=1, initial=0.0)
    peaks = np.maximum(peaks, peaks.max(initial=0.0) * MIN_CHANNEL_RANGE)
    scales = np.array([choose_scale(float(t), bits) for t in peaks])
    lo, hi = qrange(bits)
    per_row = scales.reshape((-1,) + (1,) * (w.ndim - 1))
    q = np.clip(np.rint(w / per_row), lo, hi).astype(np.int8 if bits <= 8 else np.int32)
    return QTensor(q, scales)


def quantize_bias(b: np.ndarray, acc_scale: float | np.ndarray, acc_width: int = 32) -> QTensor:
    """A bias at the accumulator scale (``input_scale * weight_scale``), as int32; with
    per-channel weight scales ``acc_scale`` is one scale per channel.

    Raises:
        AccumulatorRangeError: if a rounded bias does not fit a signed ``acc_width``-bit
            integer (the accumulator scale is too fine for this bias).
    """
    scales = np.asarray(acc_scale, dtype=np.float64)
    if not (np.all(np.isfinite(scales)) and np.all(scales > 0)):
        raise ValueError(f"acc_scale must be a positive finite number, not {acc_scale!r}")
    q = np.rint(np.asarray(b, dtype=np.float64) / scales)
    lo, hi = qrange(acc_width, narrow=False)
    if q.size and (q.min() < lo or q.max() > hi):
        at = int(np.argmax(np.abs(q)))
        scale = float(np.broadcast_to(scales, q.shape)[at])
        raise AccumulatorRangeError(
            f"quantized bias must fit {acc_width}-bit accumulators [{lo}, {hi}], not "
            f"{float(q[at]):.0f} (bias {float(np.asarray(b).reshape(-1)[at])!r} / acc_scale "
            f"{scale!r}" + (f", channel {at})" if scales.ndim else ")")
        )
    return QTensor(q.astype(np.int64 if acc_width > 32 else np.int32), acc_scale)

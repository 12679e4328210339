"""Calibration observers: a clipping threshold for a tensor from sample activations.

An observer sees one or more batches of float activations (``observe``) and then proposes the
largest magnitude worth representing (``threshold``); ``scheme.choose_scale`` turns that into a
scale. Three rules:

- ``AbsMaxObserver``: the largest magnitude seen (never clips the calibration data).
- ``PercentileObserver``: a percentile of the magnitudes (clips rare outliers).
- ``EntropyObserver``: the threshold whose int8 histogram loses the least information
  (minimum KL divergence between the clipped reference histogram and its quantized version,
  the rule popularized by TensorRT).

Percentile and entropy keep the observed magnitudes (float32) until ``threshold`` is called, so
calibrate them on a sample set of modest size.

Example:
    >>> import numpy as np
    >>> AbsMaxObserver().observe(np.array([0.5, -2.0])).threshold()
    2.0
"""

from __future__ import annotations

import numpy as np


class AbsMaxObserver:
    """The largest magnitude observed."""

    def __init__(self) -> None:
        self._max = 0.0

    def observe(self, x: np.ndarray) -> AbsMaxObserver:
        """Record a batch of activations; returns self so calls chain."""
        x = np.asarray(x)
        if x.size:
            self._max = max(self._max, float(np.max(np.abs(x))))
        return self

    def threshold(self) -> float:
        """The largest magnitude seen (0 before any data)."""
        return self._max


class _MagnitudeStore:
    """Keeps every observed magnitude (float32)."""

    def __init__(self) -> None:
        self._chunks: list[np.ndarray] = []

    def observe(self, x: np.ndarray) -> _MagnitudeStore:
        """Record a batch of activations; returns self so calls chain."""
        self._chunks.append(np.abs(np.asarray(x, dtype=np.float32)).ravel())
        return self

    def _magnitudes(self, who: str) -> np.ndarray:
        values = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)
        if not values.size:
            raise ValueError(f"{who}.threshold() needs observed data, not an empty set")
        return values


class PercentileObserver(_MagnitudeStore):
    """A percentile (default 99.99) of the observed magnitudes."""

    def __init__(self, percentile: float = 99.99) -> None:
        super().__init__()
        if not 0 < percentile <= 100:
            raise ValueError(f"percentile must be in (0, 100], not {percentile!r}")
        self.percentile = percentile

    def threshold(self) -> float:
        """The ``percentile``-th percentile of |x| over all observed batches."""
        return float(np.percentile(self._magnitudes("PercentileObserver"), self.percentile))


class EntropyObserver(_MagnitudeStore):
    """The clipping threshold minimizing KL(reference || quantized) of the magnitude histogram.

    Args:
        bins: histogram bins over ``[0, max|x|]``.
        levels: quantization levels for magnitudes (128 for int8).
    """

    def __init__(self, bins: int = 2048, levels: int = 128) -> None:
        super().__init__()
        if bins < levels or levels < 2:
            raise ValueError(f"bins must be >= levels >= 2, not bins={bins!r} levels={levels!r}")
        self.bins, self.levels = bins, levels

    def threshold(self) -> float:
        """The threshold (a histogram bin edge) with the smallest divergence."""
        values = self._magnitudes("EntropyObserver")
        top = float(values.max())
        if top == 0:
            return 0.0
        hist, edges = np.histogram(values, bins=self.bins, range=(0.0, top))
        hist = hist.astype(np.float64)
        cuts = range(self.levels, self.bins + 1)
        divergences = [_clipped_kl(hist, cut, self.levels) for cut in cuts]
        return float(edges[cuts[int(np.argmin(divergences))]])


def _clipped_kl(hist: np.ndarray, cut: int, levels: int) -> float:
    """KL divergence between hist clipped at ``cut`` bins and its ``levels``-level version."""
    ref = hist[:cut].copy()
    ref[-1] += hist[cut:].sum()
    group = np.minimum((np.arange(cut) * levels) // cut, levels - 1)
    nonzero = hist[:cut] > 0
    totals = np.bincount(group, weights=hist[:cut], minlength=levels)
    counts = np.bincount(group, weights=nonzero, minlength=levels)
    spread = np.where(nonzero, totals[group] / np.maximum(counts[group], 1), 0.0)
    p, q = ref / ref.sum(), spread / max(spread.sum(), 1e-300)
    mask = p > 0
    # A bin the reference has but the quantized histogram lost costs a large finite penalty.
    q_safe = np.where(q[mask] > 0, q[mask], 1e-12)
    return float(np.sum(p[mask] * np.log(p[mask] / q_safe)))

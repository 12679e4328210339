"""Calibration observers on data with known distributions."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.quantize import (
    AbsMaxObserver,
    EntropyObserver,
    PercentileObserver,
    choose_scale,
    dequantize,
    quantize,
)

RNG = np.random.default_rng(0)
GAUSS = RNG.normal(size=200_000)
UNIFORM = RNG.uniform(-1.0, 1.0, size=200_000)


def test_abs_max_spans_every_batch() -> None:
    obs = AbsMaxObserver().observe(np.array([0.5, -3.0])).observe(np.array([[2.0, 1.0]]))
    assert obs.threshold() == 3.0
    assert AbsMaxObserver().threshold() == 0.0


@pytest.mark.parametrize(
    ("data", "percentile", "expected"),
    [
        (GAUSS, 99.0, 2.5758),  # the two-sided 1% point of N(0, 1)
        (GAUSS, 95.0, 1.9600),
        (UNIFORM, 90.0, 0.9000),
    ],
)
def test_percentile_matches_the_distribution_quantile(
    data: np.ndarray, percentile: float, expected: float
) -> None:
    half = len(data) // 2
    obs = PercentileObserver(percentile).observe(data[:half]).observe(data[half:])
    assert obs.threshold() == pytest.approx(expected, abs=0.03)


def _mse(x: np.ndarray, threshold: float) -> float:
    """Quantization error of the Gaussian bulk (the outliers are sacrificed by design)."""
    x = x[5:]
    s = choose_scale(threshold)
    return float(np.mean((dequantize(quantize(x, s), s) - x) ** 2))


def test_entropy_clips_rare_outliers_and_lowers_error() -> None:
    x = GAUSS.copy()
    x[:5] = 50.0
    t = EntropyObserver().observe(x).threshold()
    assert AbsMaxObserver().observe(x).threshold() == 50.0
    assert 3.0 < t < 6.0
    assert _mse(x, t) < _mse(x, 50.0) / 4


def test_entropy_keeps_the_range_of_uniform_data() -> None:
    t = EntropyObserver().observe(UNIFORM).threshold()
    assert 0.95 <= t <= 1.0


def test_observers_reject_misuse_with_named_errors() -> None:
    with pytest.raises(ValueError, match="PercentileObserver.threshold.. needs observed data"):
        PercentileObserver().threshold()
    with pytest.raises(ValueError, match=r"percentile must be in \(0, 100\], not 0"):
        PercentileObserver(0)
    with pytest.raises(ValueError, match="bins must be >= levels >= 2"):
        EntropyObserver(bins=64, levels=128)
    assert EntropyObserver().observe(np.zeros(10)).threshold() == 0.0

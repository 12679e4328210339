"""Calibration data that cannot set int8 scales is refused (NaN, infinities) or warned about
(all zero), naming the input, instead of silently giving a badly quantized model."""

from __future__ import annotations

import numpy as np
import pytest

import tensorforge
from tensorforge.compiler.frontend.onnx_builders import small_cnn

TARGET = "vta -config=pynq"


def _x(value: float | None = None) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    if value is not None:
        x[0, 1, 2, 3] = value
    return x


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_calibration_is_refused_naming_the_input(bad) -> None:
    with pytest.raises(ValueError, match=r"calibration input 'x' \(batch 1\) holds 1 NaN or inf"):
        tensorforge.compile(small_cnn(), TARGET, calibration=[{"x": _x()}, {"x": _x(bad)}])


def test_all_zero_calibration_is_warned_about() -> None:
    with pytest.warns(UserWarning, match="calibration input 'x' is zero everywhere"):
        tensorforge.compile(small_cnn(), TARGET, calibration={"x": np.zeros((1, 3, 32, 32), "f4")})

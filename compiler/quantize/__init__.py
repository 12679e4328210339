"""int8 post-training quantization matched to the accelerator's ALU (see docs/quantization.md).

- ``calibrate``: observers that pick clipping thresholds from sample activations.
- ``scheme``: symmetric scales (arbitrary or power-of-two), quantize/dequantize, weights, biases.
- ``requant``: accumulator -> int8 as exact ALU steps (shift, or multiply+shift with ``alu_mul``).
- ``reference``: the int8 numpy reference of conv2d, dense and max pooling (the oracle).

Example:
    >>> import numpy as np
    >>> from tensorforge.hw.config import HWConfig
    >>> s_x = choose_scale(AbsMaxObserver().observe(np.array([1.0])).threshold(), power_of_two=True)
    >>> w = quantize_weight(np.array([[0.5, -0.25]]), power_of_two=True)
    >>> p = requant_params(s_x * w.scale / s_x, HWConfig.preset("pynq"), relu=True)
    >>> dense_int8(quantize(np.array([[1.0, 1.0]]), s_x), w.values, requant=p).tolist()
    [[16]]
"""

from __future__ import annotations

from .calibrate import AbsMaxObserver, EntropyObserver, PercentileObserver
from .reference import conv2d_int8, conv2d_nchw, dense_int8, max_pool2d_int8
from .requant import AluStep, RequantParams, apply_requant, default_mode, requant_params
from .scheme import (
    AccumulatorRangeError,
    QTensor,
    choose_scale,
    dequantize,
    is_power_of_two,
    qrange,
    quantize,
    quantize_bias,
    quantize_weight,
)

__all__ = [
    "AbsMaxObserver",
    "AccumulatorRangeError",
    "AluStep",
    "EntropyObserver",
    "PercentileObserver",
    "QTensor",
    "RequantParams",
    "apply_requant",
    "choose_scale",
    "conv2d_int8",
    "conv2d_nchw",
    "default_mode",
    "dense_int8",
    "dequantize",
    "is_power_of_two",
    "max_pool2d_int8",
    "qrange",
    "quantize",
    "quantize_bias",
    "quantize_weight",
    "requant_params",
]

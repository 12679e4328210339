"""The operators' int8 oracle (compiler.quantize's, through the shorthand) against naive loops
and numpy formulas."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.vta import (
    conv2d_reference,
    dense_reference,
    pack_nchw,
    pack_oihw,
    requantize,
    unpack_nchw,
)
from tensorforge.hw.config import HWConfig


def _naive_conv(x, w, b, stride, pad):  # type: ignore[no-untyped-def]
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    for ni in range(n):
        for oi in range(o):
            for y in range(oh):
                for z in range(ow):
                    s = int(b[oi])
                    for ci in range(c):
                        for i in range(kh):
                            for j in range(kw):
                                r, q = y * stride + i - pad, z * stride + j - pad
                                if 0 <= r < h and 0 <= q < wd:
                                    s += int(x[ni, ci, r, q]) * int(w[oi, ci, i, j])
                    out[ni, oi, y, z] = s
    return out


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 0), (2, 2)])
def test_conv2d_reference_matches_naive_loops(stride: int, pad: int) -> None:
    rng = np.random.default_rng(stride * 10 + pad)
    x = rng.integers(-128, 128, (2, 3, 6, 5), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 3, 3, 3), dtype=np.int8)
    b = rng.integers(-3000, 3000, 4, dtype=np.int32)
    acc = _naive_conv(x, w, b, stride, pad)
    want = np.clip(acc >> 6, -127, 127).astype(np.int8)  # quantize's symmetric int8 range
    got = conv2d_reference(x, w, b, stride=stride, padding=pad, shift=6)
    assert np.array_equal(got, want)


def test_requantize_floors_the_quotient_then_clips() -> None:
    # The rounding is floor (an arithmetic shift), the range symmetric [-127, 127], or [0, 127]
    # with ReLU: computed here by floor division, not with the ALU's operations.
    acc = np.array([-(2**31), -1000, -999, -1, 0, 1, 999, 2**31 - 1], np.int64)
    for shift in (0, 1, 5, 30, 31):
        for relu in (False, True):
            want = np.clip(acc // 2**shift, 0 if relu else -127, 127).astype(np.int8)
            assert np.array_equal(requantize(acc, shift, relu), want), (shift, relu)


def test_dense_reference_wraps_the_accumulator_to_32_bits() -> None:
    a = np.full((1, 2), -128, np.int8)
    w = np.full((1, 2), -128, np.int8)
    bias = np.array([2**31 - 1], np.int32)  # 32768 + bias wraps to a negative value
    assert dense_reference(a, w, bias, shift=0)[0, 0] == -127


def test_packing_round_trips_and_pads_with_zeros() -> None:
    cfg = HWConfig.preset("tiny").replace(name="tiny_b2", log_batch=1)
    x = np.arange(3 * 5 * 2 * 2, dtype=np.int8).reshape(3, 5, 2, 2)
    p = pack_nchw(cfg, x)
    assert p.shape == (2, 2, 2, 2, 2, 4)
    assert np.array_equal(unpack_nchw(cfg, p, 3, 5), x)
    assert p[1, :, :, :, 1].sum() == 0 and p[:, 1, :, :, :, 1:].sum() == 0  # padded n and c
    w = np.ones((5, 3, 1, 1), np.int8)
    pw = pack_oihw(cfg, w)
    assert pw.shape == (2, 1, 1, 1, 4, 4) and int(pw.sum()) == 15

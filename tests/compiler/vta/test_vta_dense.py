"""Compiled int8 dense on the functional simulator equals the numpy int8 reference, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.schedule.primitives import ScheduleError
from tensorforge.compiler.tir.stmt import LoweringError
from tensorforge.compiler.vta import Conv2dSchedule, Conv2dWorkload, candidate_schedules, dense
from tensorforge.hw.config import HWConfig


def _operands(seed: int, m: int, k: int, n: int):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    b = rng.integers(-(1 << 14), 1 << 14, n, dtype=np.int32)
    return a, w, b


@pytest.mark.parametrize("config", ["pynq", "tiny"])
@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("relu", [False, True])
def test_dense_matches_reference(config: str, vthreads: int, relu: bool) -> None:
    cfg = HWConfig.preset(config)
    m, k, n = 8, 4 * cfg.block_in, 3 * cfg.block_out
    a, w, b = _operands(vthreads + 2 * relu, m, k, n)
    kern = dense(cfg, m, w, b, shift=9, relu=relu, vthreads=vthreads)
    out, result = kern.run(a)
    assert kern.schedule.vthreads == vthreads
    assert np.array_equal(out, kern.reference(a))
    assert result.stats["gemm_counter"] > 0 and np.unique(out).size > 2


@pytest.mark.parametrize("vthreads", [1, 2])
def test_dense_pads_odd_sizes(vthreads: int) -> None:
    cfg = HWConfig.preset("tiny")
    a, w, b = _operands(7, 5, 7, 9)  # k, n not multiples of 4
    kern = dense(cfg, 5, w, b, shift=7, vthreads=vthreads)
    out, _ = kern.run(a)
    assert out.shape == (5, 9) and np.array_equal(out, kern.reference(a))


def test_dense_without_bias_or_shift_saturates_to_the_symmetric_range() -> None:
    cfg = HWConfig.preset("tiny")
    a, w, _ = _operands(3, 4, 8, 8)
    kern = dense(cfg, 4, w)
    out, _ = kern.run(a)
    assert np.array_equal(out, kern.reference(a))
    # Unshifted sums of 8 products saturate, to quantize's symmetric bounds [-127, 127].
    assert set(np.unique(out)) == {-127, 127}
    assert (kern.requant.lo, kern.requant.hi) == (-127, 127)


def test_dense_on_a_batched_config() -> None:
    cfg = HWConfig.preset("tiny").replace(name="tiny_b2", log_batch=1)
    a, w, b = _operands(4, 6, 12, 8)
    for vthreads in (1, 2):
        kern = dense(cfg, 6, w, b, shift=8, vthreads=vthreads)
        out, _ = kern.run(a)
        assert np.array_equal(out, kern.reference(a))


def test_every_fitting_dense_schedule_is_bit_exact() -> None:
    cfg = HWConfig.preset("tiny")
    m, k, n = 4, 16, 8
    a, w, b = _operands(5, m, k, n)
    wl = Conv2dWorkload(m, k, 1, 1, n, 1, 1)
    schedules = candidate_schedules(cfg, wl, 1) + candidate_schedules(cfg, wl, 2)
    assert len(schedules) > 20
    for s in schedules:
        kern = dense(cfg, m, w, b, shift=8, schedule=s)
        out, _ = kern.run(a)
        assert np.array_equal(out, kern.reference(a)), s


def test_dense_rejects_tiles_that_overflow_an_sram() -> None:
    cfg = HWConfig.preset("tiny")
    a, w, b = _operands(6, 256, 32, 4)
    big = Conv2dSchedule(tile_n=256, tile_ic=8, vthreads=1)
    with pytest.raises(
        LoweringError, match=r"INP buffer must hold at most 256 elements .*not 2048"
    ):
        dense(cfg, 256, w, b, schedule=big)


def test_dense_rejects_bad_arguments() -> None:
    cfg = HWConfig.preset("tiny")
    _, w, b = _operands(6, 4, 8, 8)
    with pytest.raises(
        ScheduleError, match=r"tile_oc must be in \[1, 2\] \(the output-channel blocks .*not 3"
    ):
        dense(cfg, 4, w, b, schedule=Conv2dSchedule(tile_oc=3))
    with pytest.raises(ValueError, match=r"bias must be int32 of shape \(8,\)"):
        dense(cfg, 4, w, b.astype(np.int64))
    with pytest.raises(ValueError, match=r"shift must be an int in \[0, 31\], not -1"):
        dense(cfg, 4, w, shift=-1)
    kern = dense(cfg, 4, w)
    with pytest.raises(ValueError, match=r"dense input must be int8 of shape \(4, 8\)"):
        kern.run(np.zeros((4, 9), np.int8))

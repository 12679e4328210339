"""Ragged edge tiles: schedule knobs that do not divide their dimensions compile (through TE: the
split's guards cut the edge tile's loops in vta.lower) to bit-exact programs, so default
schedules exist for awkward shapes (the digits CNN's layers among them)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.quantize import conv2d_int8, dense_int8, max_pool2d_int8
from tensorforge.compiler.schedule.primitives import ScheduleError
from tensorforge.compiler.vta import (
    Conv2dSchedule,
    Conv2dWorkload,
    candidate_schedules,
    conv2d,
    dense,
    max_pool2d,
    tile_sizes,
)
from tensorforge.hw.config import HWConfig


def _operands(seed: int, data: tuple[int, ...], weight: tuple[int, ...]):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, data, dtype=np.int8)
    w = rng.integers(-128, 128, weight, dtype=np.int8)
    b = rng.integers(-4000, 4000, weight[0], dtype=np.int32)
    return x, w, b


def test_tile_sizes_hold_every_divisor_and_even_splits() -> None:
    assert tile_sizes(7) == [1, 2, 3, 4, 7]
    assert tile_sizes(12) == [1, 2, 3, 4, 6, 12]
    assert set(range(1, 31)) & {d for d in range(1, 31) if 30 % d == 0} <= set(tile_sizes(30))


@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize(
    "sched",
    [
        Conv2dSchedule(tile_h=3, tile_oc=2, tile_ic=2),  # 7 rows, 3 oc blocks, 3 ic blocks
        Conv2dSchedule(tile_h=5, tile_oc=2, tile_ic=2, resident_weights=True),
        Conv2dSchedule(tile_h=4, tile_oc=3, tile_ic=1),
    ],
)
def test_ragged_conv2d_schedules_are_bit_exact(sched: Conv2dSchedule, vthreads: int) -> None:
    cfg = HWConfig.preset("tiny")
    x, w, b = _operands(1, (2, 11, 7, 6), (10, 11, 3, 3))
    sched = Conv2dSchedule(sched.tile_n, sched.tile_h, sched.tile_oc, sched.tile_ic, vthreads,
                           sched.resident_weights)  # fmt: skip
    kern = conv2d(cfg, x.shape, w, b, padding=1, shift=9, schedule=sched)
    out, _ = kern.run(x)
    want = conv2d_int8(x, w, b, padding=1, requant=kern.requant)
    assert np.array_equal(out, want) and np.unique(want).size > 20


def test_candidates_include_ragged_schedules_and_all_of_them_are_bit_exact() -> None:
    cfg = HWConfig.preset("tiny")
    x, w, b = _operands(2, (1, 12, 5, 5), (12, 12, 3, 3))
    wl = Conv2dWorkload(1, 12, 5, 5, 12, 3, 3, pad_h=1, pad_w=1)
    schedules = candidate_schedules(cfg, wl, 2)
    ragged = [s for s in schedules if 5 % s.tile_h or 3 % s.tile_oc or 3 % s.tile_ic]
    assert len(ragged) > 20
    want = conv2d_int8(x, w, b, padding=1, requant=conv2d(cfg, x.shape, w, b, shift=9).requant)
    for s in ragged:
        out, _ = conv2d(cfg, x.shape, w, b, padding=1, shift=9, schedule=s).run(x)
        assert np.array_equal(out, want), s


def test_a_tile_made_only_of_padding_is_rejected() -> None:
    cfg = HWConfig.preset("tiny")
    x, w, b = _operands(3, (1, 4, 2, 2), (4, 4, 1, 1))
    with pytest.raises(ScheduleError, match=r"tile_h=2 gives tiles made only of padding \(output "
                                            r"rows 0\.\.1\)"):  # fmt: skip
        conv2d(cfg, x.shape, w, b, padding=3, schedule=Conv2dSchedule(tile_h=2))
    kern = conv2d(cfg, x.shape, w, b, padding=3, shift=6)  # the default avoids such tiles
    out, _ = kern.run(x)
    assert np.array_equal(out, conv2d_int8(x, w, b, padding=3, requant=kern.requant))


# The digits CNN's accelerator layers (docs/quantization.md), 16 images.
DIGITS = {
    "conv2": ((16, 16, 8, 8), (32, 16, 3, 3)),
    "conv3": ((16, 32, 4, 4), (32, 32, 3, 3)),
}


@pytest.mark.parametrize("config", ["pynq", "tiny"])
@pytest.mark.parametrize("vthreads", [1, 2])
def test_digits_layers_have_default_schedules_and_are_bit_exact(config: str, vthreads: int):
    cfg = HWConfig.preset(config)
    y = None
    for i, (name, (data, weight)) in enumerate(DIGITS.items()):
        x, w, b = _operands(i, data, weight)
        if y is not None:
            x = y
        kern = conv2d(cfg, x.shape, w, b, padding=1, shift=10, relu=True, vthreads=vthreads)
        assert kern.schedule.fits(cfg, kern.workload), name
        y, _ = kern.run(x)
        assert np.array_equal(y, conv2d_int8(x, w, b, padding=1, requant=kern.requant)), name
        if name == "conv2":
            pool = max_pool2d(cfg, y.shape, 2, vthreads=vthreads)
            pooled, _ = pool.run(y)
            assert np.array_equal(pooled, max_pool2d_int8(y, 2))
            fused = conv2d(cfg, x.shape, w, b, padding=1, shift=10, relu=True, max_pool=2,
                           vthreads=vthreads)  # fmt: skip
            assert np.array_equal(fused.run(x)[0], pooled)  # the pooling fused after the conv
            y = pooled
    flat = y.reshape(16, -1)
    _, w, b = _operands(9, (1,), (10, 512))
    fc = dense(cfg, 16, w, b, shift=12, vthreads=vthreads)
    out, _ = fc.run(flat)
    assert np.array_equal(out, dense_int8(flat, w, b, requant=fc.requant))


@pytest.mark.parametrize("vthreads", [1, 2])
def test_default_schedule_of_a_prime_sized_image_uses_ragged_tiles(vthreads: int) -> None:
    cfg = HWConfig.preset("tiny")  # 13 padded rows of 15 columns x 3 blocks overflow INP
    x, w, b = _operands(5, (1, 12, 13, 13), (12, 12, 3, 3))
    kern = conv2d(cfg, x.shape, w, b, padding=1, shift=10, vthreads=vthreads)
    assert 13 % kern.schedule.tile_h != 0, kern.schedule
    out, _ = kern.run(x)
    assert np.array_equal(out, conv2d_int8(x, w, b, padding=1, requant=kern.requant))

"""Max pooling on the accelerator's ALU, on the functional simulator, equals
compiler.quantize.max_pool2d_int8 bit for bit; its errors name what does not fit."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.quantize import max_pool2d_int8
from tensorforge.compiler.schedule.primitives import ScheduleError
from tensorforge.compiler.tir.stmt import LoweringError
from tensorforge.compiler.vta import PoolSchedule, max_pool2d
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import AluOp


def _data(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int8)


@pytest.mark.parametrize("config", ["pynq", "tiny"])
@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize(
    "shape,kernel,stride",
    [((2, 32, 8, 8), 2, None), ((3, 5, 7, 9), 3, 2), ((1, 20, 6, 7), (2, 3), (1, 2))],
)
def test_max_pool2d_matches_the_oracle(config, vthreads, shape, kernel, stride) -> None:  # type: ignore[no-untyped-def]
    cfg = HWConfig.preset(config)
    x = _data(sum(shape), shape)
    kern = max_pool2d(cfg, shape, kernel, stride, vthreads=vthreads)
    out, result = kern.run(x)
    want = max_pool2d_int8(x, kernel, stride)
    assert out.shape == want.shape and np.array_equal(out, want)
    assert result.stats["alu_counter"] > 0 and result.stats["gemm_counter"] == 0  # ALU only
    # The window's MAX stages merged into one instruction per tile, a micro-op per element.
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    maxes = [s for s in kern.tile_program.stmts if getattr(s, "op", None) is AluOp.MAX]
    assert maxes and all(len(s.uops) == kh * kw - 1 for s in maxes)


def test_every_pool_schedule_including_ragged_ones_is_bit_exact() -> None:
    cfg = HWConfig.preset("tiny")
    x = _data(3, (2, 12, 7, 7))  # 3 channel blocks, 3 output rows with a 3x3/2 window
    want = max_pool2d_int8(x, 3, 2)
    kern = max_pool2d(cfg, x.shape, 3, 2)
    fitting = 0
    for tile_c in (1, 2, 3):
        for tile_h in (1, 2, 3):
            for vthreads in (1, 2):
                sched = PoolSchedule(tile_c, tile_h, vthreads)
                if not sched.fits(cfg, kern.workload):
                    continue
                fitting += 1
                out, _ = max_pool2d(cfg, x.shape, 3, 2, schedule=sched).run(x)
                assert np.array_equal(out, want), sched
    assert fitting >= 10
    # Threads over the two row tiles, with a ragged channel tile (3 blocks in tiles of 2).
    x = _data(7, (1, 12, 9, 9))
    out, _ = max_pool2d(cfg, x.shape, 2, schedule=PoolSchedule(2, 2, 2)).run(x)
    assert np.array_equal(out, max_pool2d_int8(x, 2))


def test_max_pool2d_on_a_batched_config() -> None:
    cfg = HWConfig.preset("tiny").replace(name="tiny_b2", log_batch=1)
    x = _data(4, (3, 6, 4, 4))
    out, _ = max_pool2d(cfg, x.shape, 2, vthreads=2).run(x)
    assert np.array_equal(out, max_pool2d_int8(x, 2))


def test_pool_window_that_does_not_fit_is_rejected() -> None:
    cfg = HWConfig.preset("tiny")
    with pytest.raises(ValueError, match=r"max_pool2d window 3x3 must fit the 2x2 input"):
        max_pool2d(cfg, (1, 4, 2, 2), 3)
    with pytest.raises(ScheduleError, match=r"tile_h must be in \[1, 2\] .*not 3"):
        max_pool2d(cfg, (1, 4, 4, 4), 2, schedule=PoolSchedule(tile_h=3))
    # Two input rows of 200 and one output row of 100 overflow the ACC buffer (256 on tiny).
    with pytest.raises(ScheduleError) as e:
        max_pool2d(cfg, (1, 4, 200, 200), 2)
    assert "one output row needs 500 ACC elements, the ACC buffer holds 256" in str(e.value)
    msg = r"ACC .* at most 256 .*not 320 \(X.acc@0: 128, pool@0: 32"
    with pytest.raises(LoweringError, match=msg):
        max_pool2d(cfg, (2, 8, 8, 8), 2, schedule=PoolSchedule(tile_c=2, tile_h=4, vthreads=2))
    # Two virtual threads split a dimension with an even number of whole tiles (3 and 4/3 here).
    msg = r"2 virtual threads need a dimension with an even number of whole tiles \(tile_c=2 of 3"
    with pytest.raises(ScheduleError, match=msg):
        max_pool2d(cfg, (1, 12, 8, 8), 2, schedule=PoolSchedule(tile_c=2, tile_h=3, vthreads=2))


@pytest.mark.parametrize("config", ["pynq", "tiny"])
@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("window", [2, (2, 3), 3])
def test_max_pool_fused_after_conv2d_matches_the_oracle(config, vthreads, window) -> None:  # type: ignore[no-untyped-def]
    from tensorforge.compiler.quantize import conv2d_int8
    from tensorforge.compiler.quantize.residual import add_int8, add_params
    from tensorforge.compiler.vta import conv2d

    cfg = HWConfig.preset(config)
    rng = np.random.default_rng(vthreads)
    x = rng.integers(-128, 128, (2, cfg.block_in + 3, 9, 7), dtype=np.int8)
    w = rng.integers(-128, 128, (2 * cfg.block_out + 1, x.shape[1], 3, 3), dtype=np.int8)
    b = rng.integers(-3000, 3000, len(w), dtype=np.int32)
    add = add_params(0.5, 1.0, cfg, relu=True)
    kern = conv2d(cfg, x.shape, w, b, padding=1, shift=9, residual=add, max_pool=window,
                  vthreads=vthreads)  # fmt: skip
    r = rng.integers(-127, 128, kern.residual_shape, dtype=np.int8)
    out, _ = kern.run(x, residual=r)
    conv = add_int8(conv2d_int8(x, w, b, padding=1, requant=kern.requant), r, add)
    want = max_pool2d_int8(conv, window)
    assert out.shape == want.shape and np.array_equal(out, want)
    assert np.unique(want).size > 20


def test_fused_max_pool_on_ragged_row_tiles_and_its_errors() -> None:
    from tensorforge.compiler.quantize import conv2d_int8
    from tensorforge.compiler.vta import Conv2dSchedule, conv2d

    cfg = HWConfig.preset("tiny")
    x = _data(5, (1, 4, 9, 8))
    w = _data(6, (8, 4, 3, 3))
    want = max_pool2d_int8(conv2d_int8(x, w, padding=1, requant=conv2d(cfg, x.shape, w,
                                       shift=8).requant), 2)  # fmt: skip
    for tile_h in (2, 4, 6, 8, 9):  # 9 rows: the last tile holds 1, 1, 3, 1 or 0 spare rows
        sched = Conv2dSchedule(tile_h=tile_h, tile_oc=1, vthreads=2)
        out, _ = conv2d(cfg, x.shape, w, padding=1, shift=8, max_pool=2, schedule=sched).run(x)
        assert np.array_equal(out, want), tile_h
    msg = r"tile_h must be a multiple of the fused pooling window's 2 rows \(or all 9 .*not 3"
    with pytest.raises(ScheduleError, match=msg):
        conv2d(cfg, x.shape, w, padding=1, max_pool=2, schedule=Conv2dSchedule(tile_h=3))
    with pytest.raises(ValueError, match="conv2d max_pool window 3x3 must fit the 2x2 conv output"):
        conv2d(cfg, (1, 4, 2, 2), w, padding=1, max_pool=3)

"""Grouped and depthwise conv2d on the accelerator equal the numpy int8 reference, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.quantize.reference import conv2d_int8
from tensorforge.compiler.quantize.requant import requant_params_per_channel
from tensorforge.compiler.schedule.primitives import ScheduleError
from tensorforge.compiler.vta import Conv2dSchedule, Conv2dWorkload, conv2d
from tensorforge.compiler.vta.layout import group_blocks
from tensorforge.hw.config import HWConfig


def _operands(seed: int, c: int, o: int, groups: int, k: int, hw: int = 6):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    x = rng.integers(-127, 128, (1, c, hw, hw), dtype=np.int8)
    w = rng.integers(-127, 128, (o, c // groups, k, k), dtype=np.int8)
    b = rng.integers(-(1 << 12), 1 << 12, o, dtype=np.int32)
    return x, w, b


def _direct(x: np.ndarray, w: np.ndarray, groups: int, pad: int, stride: int) -> np.ndarray:
    """Grouped conv accumulators by explicit sums over each output channel's own inputs."""
    o, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (xp.shape[2] - kh) // stride + 1, (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], o, oh, ow), np.int64)
    for oc in range(o):
        first = oc // (o // groups) * cg
        for y in range(oh):
            for xx in range(ow):
                win = xp[:, first : first + cg, y * stride : y * stride + kh,
                         xx * stride : xx * stride + kw]  # fmt: skip
                out[:, oc, y, xx] = (win * w[oc].astype(np.int64)).sum(axis=(1, 2, 3))
    return out


@pytest.mark.parametrize("groups,stride", [(8, 1), (8, 2), (2, 1), (4, 1)])
def test_grouped_int8_reference_equals_direct_sums(groups: int, stride: int) -> None:
    x, w, _ = _operands(1, 8, 8, groups, 3)
    acc = conv2d_int8(x, w, stride=stride, padding=1, groups=groups)
    assert np.array_equal(acc, _direct(x, w, groups, 1, stride))


# (config, C, O, groups, kernel, stride): depthwise (block-diagonal weight tiles), narrow groups
# sharing a block, wide groups of whole blocks (each output block over its group's blocks).
CASES = [
    ("tiny", 8, 8, 8, 3, 1),
    ("tiny", 8, 8, 8, 3, 2),
    ("tiny", 8, 8, 4, 3, 1),
    ("tiny", 8, 16, 8, 3, 1),  # depthwise with a channel multiplier of 2: (q, r) = (2, 1)
    ("tiny", 8, 16, 2, 1, 1),  # 4 -> 8 channels per group: 2 output blocks over 1 input block
    ("tiny", 16, 16, 2, 3, 1),
    ("tiny", 16, 32, 2, 1, 1),
    ("pynq", 32, 32, 32, 3, 1),
    ("pynq", 48, 48, 6, 3, 2),
    ("pynq", 64, 64, 2, 3, 1),
]


@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("config,c,o,groups,k,stride", CASES)
def test_grouped_conv2d_matches_reference_on_sim(
    config: str, c: int, o: int, groups: int, k: int, stride: int, vthreads: int
) -> None:
    cfg = HWConfig.preset(config)
    x, w, b = _operands(2, c, o, groups, k)
    kern = conv2d(cfg, x.shape, w, b, stride=stride, padding=k // 2, shift=9, groups=groups,
                  vthreads=vthreads)  # fmt: skip
    out, _ = kern.run(x, "sim")
    ref = kern.reference(x)
    assert np.unique(ref).size > 2  # not all clipped
    assert np.array_equal(out, ref), f"{np.count_nonzero(out != ref)} of {ref.size} differ"


@pytest.mark.parametrize("groups", [16, 2])
def test_grouped_conv2d_per_channel_requant_on_cyclesim(groups: int) -> None:
    """Per-channel multipliers (the default requantization) with the conv's groups, on the
    cycle-accurate model, equal the int8 reference."""
    cfg = HWConfig.preset("tiny")
    x, w, b = _operands(3, 16, 16, groups, 3)
    ratios = np.linspace(1 / 900, 1 / 300, 16)
    bounds = np.abs(w.astype(np.int64)).reshape(16, -1).sum(1) * 127 + np.abs(b)
    rq = requant_params_per_channel(ratios, cfg, acc_bounds=bounds, relu=True)
    kern = conv2d(cfg, x.shape, w, b, padding=1, requant=rq, groups=groups, vthreads=2)
    out, result = kern.run(x, "cyclesim")
    ref = kern.reference(x)
    assert np.unique(ref).size > 2
    assert np.array_equal(out, ref)
    assert result.cycles and result.cycles > 0


def test_depthwise_gemm_work_grows_with_channels_not_their_square() -> None:
    """Each output block reduces over one input block: twice the channels, twice the GEMMs (an
    ungrouped conv: four times)."""
    cfg = HWConfig.preset("tiny")
    gemms = {}
    for c, groups in ((8, 8), (16, 16), (8, 1), (16, 1)):
        x, w, _ = _operands(4, c, c, groups, 3)
        kern = conv2d(cfg, x.shape, w, padding=1, shift=8, groups=groups)
        gemms[c, groups] = kern.run(x, "sim")[1].stats["gemm_counter"]
    assert gemms[16, 16] == 2 * gemms[8, 8] == 36 * 9 * 4  # blocks x pixels x kernel taps
    assert gemms[16, 1] == 4 * gemms[8, 1]


def test_groups_that_do_not_fit_the_blocks_are_refused() -> None:
    cfg = HWConfig.preset("pynq")
    with pytest.raises(ValueError, match="groups of 24 input -> 24 output channels must fit"):
        group_blocks(cfg, 48, 48, 2)
    with pytest.raises(ValueError, match="groups of 3 input -> 3 output channels must fit"):
        conv2d(cfg, (1, 48, 6, 6), np.zeros((48, 3, 3, 3), np.int8), groups=16)  # 16 % 3
    with pytest.raises(ValueError, match="groups must be an int >= 1 dividing C=32, not 3"):
        conv2d(cfg, (1, 32, 6, 6), np.zeros((32, 1, 3, 3), np.int8), groups=3)
    with pytest.raises(ValueError, match=r"weights must be \(O, 1, KH, KW\)"):
        conv2d(cfg, (1, 32, 6, 6), np.zeros((32, 2, 3, 3), np.int8), groups=32)


def test_wide_group_tile_must_stay_within_one_group() -> None:
    cfg = HWConfig.preset("tiny")
    wl = Conv2dWorkload(1, 16, 6, 6, 24, 3, 3, groups=2)  # 3 output blocks per group
    with pytest.raises(ScheduleError, match="tile_oc must divide the 3 output-channel blocks th"):
        Conv2dSchedule(tile_oc=2).check(cfg, wl)
    Conv2dSchedule(tile_oc=3).check(cfg, wl)
    with pytest.raises(ScheduleError, match=r"tile_ic must be in \[1, 2\]"):
        Conv2dSchedule(tile_ic=4).check(cfg, wl)


def test_depthwise_conv2d_with_fused_residual_add_and_max_pool() -> None:
    from tensorforge.compiler.quantize.residual import add_params

    cfg = HWConfig.preset("tiny")
    x, w, b = _operands(5, 8, 8, 8, 3, hw=8)
    add = add_params(0.5, 0.75, cfg, mode="mul", relu=True)
    kern = conv2d(cfg, x.shape, w, b, padding=1, shift=7, groups=8, residual=add, max_pool=2,
                  vthreads=2)  # fmt: skip
    r = np.random.default_rng(6).integers(-127, 128, kern.residual_shape, dtype=np.int8)
    out, _ = kern.run(x, "sim", residual=r)
    ref = kern.reference(x, r)
    assert ref.shape == (1, 8, 4, 4) and np.unique(ref).size > 2
    assert np.array_equal(out, ref)


@pytest.mark.parametrize("c,o,groups,want", [(8, 8, 8, (1, 2)), (8, 16, 8, (1, 1)),
                                             (16, 16, 2, (1, 2))])  # fmt: skip
def test_grouped_conv2d_on_blocks_wider_out_than_in(c: int, o: int, groups: int, want) -> None:  # type: ignore[no-untyped-def]
    """BLOCK_OUT 8 over BLOCK_IN 4: a depthwise output block reads two input blocks."""
    cfg = HWConfig.preset("tiny").replace(log_block_out=3, name="tiny-4x8")
    assert group_blocks(cfg, c, o, groups) == want
    x, w, b = _operands(8, c, o, groups, 3)
    kern = conv2d(cfg, x.shape, w, b, padding=1, shift=8, groups=groups, vthreads=2)
    out, _ = kern.run(x, "sim")
    ref = kern.reference(x)
    assert np.unique(ref).size > 2
    assert np.array_equal(out, ref)


@pytest.mark.parametrize("vthreads", [1, 2])
def test_a_tile_of_part_of_a_wide_group_loads_only_that_groups_input_blocks(vthreads: int) -> None:
    """3 groups of 16 channels on tiny (4 output blocks each) in tiles of 2 output blocks: the
    input block (o // 4) * 4 + ic of a tile is one group's, and the INP buffer holds that
    group's rows only (the bound inference once took the tile across two groups: 9 blocks of
    input rows, 189 of 256 entries per thread for a one-row tile, an INP overflow the
    schedule's footprint did not predict)."""
    cfg = HWConfig.preset("tiny")
    x, w, b = _operands(5, 48, 48, 3, 3, hw=5)
    wl = Conv2dWorkload(1, 48, 5, 5, 48, 3, 3, pad_h=1, pad_w=1, groups=3)
    for tile_h in (1, 5):
        sched = Conv2dSchedule(tile_h=tile_h, tile_oc=2, tile_ic=2, vthreads=vthreads)
        assert sched.fits(cfg, wl)
        kern = conv2d(cfg, x.shape, w, b, padding=1, shift=10, groups=3, schedule=sched)
        out, _ = kern.run(x, "sim")
        ref = kern.reference(x)
        assert np.unique(ref).size > 2 and np.array_equal(out, ref)


def test_groups_that_leave_the_last_output_block_short_are_refused_or_exact() -> None:
    """Whole groups per output block: a block's input span is that of a full block's groups, so
    where the last block holds fewer groups it read input blocks past the input (an IndexError
    in the weight packing, for every tuning config): refused like any groups that fit no
    block. A short last block whose span stays in the input is exact."""
    with pytest.raises(ValueError, match="must fill the last output block of 4: its input span"):
        group_blocks(HWConfig.preset("tiny"), 12, 3, 3)  # 3 groups, a block holds 4
    with pytest.raises(ValueError, match=r"end at block 24, past the input.s 12 blocks \(192"):
        conv2d(HWConfig.preset("pynq"), (1, 192, 4, 4), np.zeros((8, 48, 3, 3), np.int8),
               groups=4)  # fmt: skip
    cfg = HWConfig.preset("pynq")
    assert group_blocks(cfg, 56, 14, 7) == (1, 4)  # 7 groups of 8 -> 2: 4 input blocks, all real
    x, w, b = _operands(9, 56, 14, 7, 3)
    kern = conv2d(cfg, x.shape, w, b, padding=1, shift=9, groups=7, vthreads=2)
    out, _ = kern.run(x, "sim")
    ref = kern.reference(x)
    assert np.unique(ref).size > 2
    assert np.array_equal(out, ref)


def test_a_tile_across_groups_of_several_input_blocks_fits_what_it_loads() -> None:
    """Each output block its own groups, spanning several input blocks (q = 1, r = 5: 4 groups
    of 10 -> 2 channels on tiny): a tile of 2 output blocks over a chunk of the reduction loads
    the interval from the first block's chunk to the last's, the other groups' blocks between
    included; the footprint once counted only the chunks (2 of 6 blocks), so a schedule it
    passed overflowed INP in the lowering, a LoweringError from `tensorforge.compile` instead
    of a fallback (benchmarks/vta_fuzz.py 2:157 and 2:288). Every schedule that fits compiles
    and is exact."""
    cfg = HWConfig.preset("tiny")
    rng = np.random.default_rng(10)
    x = rng.integers(-127, 128, (1, 40, 6, 6), dtype=np.int8)
    w = rng.integers(-127, 128, (8, 10, 3, 3), dtype=np.int8)
    wl = Conv2dWorkload(1, 40, 6, 6, 8, 3, 3, pad_h=1, pad_w=1, groups=4)
    assert wl.group_blocks(cfg) == (1, 5)
    fitting = 0
    for tile_h, tile_oc, tile_ic in ((6, 2, 1), (6, 2, 5), (3, 2, 2), (1, 2, 1), (6, 1, 1)):
        sched = Conv2dSchedule(tile_h=tile_h, tile_oc=tile_oc, tile_ic=tile_ic)
        if not sched.fits(cfg, wl):
            continue
        fitting += 1
        kern = conv2d(cfg, x.shape, w, padding=1, shift=10, groups=4, schedule=sched)
        out, _ = kern.run(x, "sim")
        ref = kern.reference(x)
        assert np.unique(ref).size > 2 and np.array_equal(out, ref), sched
    assert fitting >= 2
    # the fuzzer's layer: 40 -> 8 channels, a 5x2 kernel over 11x3, the default schedule
    x = rng.integers(-127, 128, (1, 40, 11, 3), dtype=np.int8)
    w = rng.integers(-127, 128, (8, 10, 5, 2), dtype=np.int8)
    kern = conv2d(cfg, x.shape, w, padding=(1, 0), shift=10, groups=4)
    assert np.array_equal(kern.run(x, "sim")[0], kern.reference(x))

"""Compiled int8 conv2d on the simulators equals the numpy int8 reference, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tensorforge.compiler.schedule.primitives import ScheduleError
from tensorforge.compiler.tir.stmt import LoweringError
from tensorforge.compiler.vta import (
    Conv2dSchedule,
    Conv2dWorkload,
    candidate_schedules,
    conv2d,
    default_schedule,
    max_pool2d,
)
from tensorforge.compiler.vta.schedule import fit_problem
from tensorforge.hw.config import HWConfig
from tensorforge.runtime.device.vta import LoadedProgram, open_device
from tensorforge.runtime.program import ProgramImage

# ResNet-18 conv layers (vta_facts.md §6.1; benchmarks/sim.py): H=W, IC, OC, kernel, stride.
RESNET = {
    "C2": (56, 64, 64, 3, 1),
    "C3": (56, 64, 64, 1, 1),
    "C4": (56, 64, 128, 3, 2),
    "C5": (56, 64, 128, 1, 2),
    "C6": (28, 128, 128, 3, 1),
    "C7": (28, 128, 256, 3, 2),
    "C8": (28, 128, 256, 1, 2),
    "C9": (14, 256, 256, 3, 1),
    "C10": (14, 256, 512, 3, 2),
    "C11": (14, 256, 512, 1, 2),
    "C12": (7, 512, 512, 3, 1),
}
FAST_LAYERS = ("C9", "C12")


def _operands(seed: int, data: tuple[int, ...], weight: tuple[int, ...]):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, data, dtype=np.int8)
    w = rng.integers(-128, 128, weight, dtype=np.int8)
    b = rng.integers(-(1 << 13), 1 << 13, weight[0], dtype=np.int32)
    return x, w, b


def _check(kern, x: np.ndarray, backend: str = "sim"):  # type: ignore[no-untyped-def]
    out, result = kern.run(x, backend)
    ref = kern.reference(x)
    assert out.shape == ref.shape
    assert np.array_equal(out, ref), f"{np.count_nonzero(out != ref)} of {ref.size} differ"
    assert np.unique(ref).size > 2  # the check is not vacuous (not all clipped)
    return result


@pytest.mark.parametrize("config", ["pynq", "tiny"])
@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 1), (1, 0), (2, 2)])
def test_conv2d_matches_reference(config: str, vthreads: int, stride: int, padding: int) -> None:
    cfg = HWConfig.preset(config)
    ic, oc = 2 * cfg.block_in, 2 * cfg.block_out
    x, w, b = _operands(stride + padding, (1, ic, 9, 8), (oc, ic, 3, 3))
    kern = conv2d(cfg, x.shape, w, b, stride=stride, padding=padding, shift=10, relu=stride == 2,
                  vthreads=vthreads)  # fmt: skip
    assert kern.schedule.vthreads == vthreads
    _check(kern, x)


@pytest.mark.parametrize("vthreads", [1, 2])
def test_conv2d_pads_odd_channels_and_batch(vthreads: int) -> None:
    cfg = HWConfig.preset("tiny")
    x, w, b = _operands(11, (2, 5, 7, 6), (7, 5, 3, 2))  # channels not multiples of 4
    kern = conv2d(cfg, x.shape, w, b, stride=(2, 1), padding=(1, 0), shift=9, vthreads=vthreads)
    _check(kern, x)


def test_every_fitting_conv2d_schedule_is_bit_exact() -> None:
    cfg = HWConfig.preset("tiny")
    x, w, b = _operands(12, (2, 8, 6, 6), (8, 8, 3, 3))
    wl = Conv2dWorkload(2, 8, 6, 6, 8, 3, 3, pad_h=1, pad_w=1)
    schedules = candidate_schedules(cfg, wl, 1) + candidate_schedules(cfg, wl, 2)
    assert {s.resident_weights for s in schedules} == {True, False}
    assert {s.tile_ic for s in schedules} == {1, 2} and len(schedules) > 40
    for s in schedules:
        kern = conv2d(cfg, x.shape, w, b, padding=1, shift=10, relu=True, schedule=s)
        out, _ = kern.run(x)
        assert np.array_equal(out, kern.reference(x)), s


def _resnet_layer(name: str, cfg: HWConfig, vthreads: int):  # type: ignore[no-untyped-def]
    h, ic, oc, k, s = RESNET[name]
    x, w, b = _operands(int(name[1:]), (1, ic, h, h), (oc, ic, k, k))
    kern = conv2d(cfg, x.shape, w, b // 16, stride=s, padding=k // 2, shift=11, relu=True,
                  vthreads=vthreads)  # fmt: skip
    return kern, x


@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("layer", FAST_LAYERS)
def test_resnet18_layer_on_pynq(layer: str, vthreads: int) -> None:
    kern, x = _resnet_layer(layer, HWConfig.preset("pynq"), vthreads)
    _check(kern, x)


@pytest.mark.slow
@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("layer", [n for n in RESNET if n not in FAST_LAYERS])
def test_resnet18_layer_on_pynq_all(layer: str, vthreads: int) -> None:
    kern, x = _resnet_layer(layer, HWConfig.preset("pynq"), vthreads)
    _check(kern, x)


@pytest.mark.parametrize("vthreads", [1, 2])
def test_resnet18_shaped_layer_on_tiny(vthreads: int) -> None:
    # C9's structure (3x3, pad 1, stride 1) scaled to tiny's buffers.
    cfg = HWConfig.preset("tiny")
    x, w, b = _operands(9, (1, 16, 14, 14), (16, 16, 3, 3))
    kern = conv2d(cfg, x.shape, w, b, padding=1, shift=11, vthreads=vthreads)
    _check(kern, x)


def test_two_virtual_threads_take_fewer_cycles_on_cyclesim() -> None:
    cycles = {}
    for vthreads in (1, 2):
        kern, x = _resnet_layer("C9", HWConfig.preset("pynq"), vthreads)
        cycles[vthreads] = _check(kern, x, "cyclesim").cycles
    assert cycles[2] < 0.85 * cycles[1], cycles  # measured: 489k vs 682k


def test_conv2d_rejects_a_schedule_that_overflows_an_sram() -> None:
    cfg = HWConfig.preset("tiny")
    x, w, b = _operands(1, (1, 4, 16, 16), (8, 4, 3, 3))
    big = Conv2dSchedule(tile_h=8, tile_oc=2, tile_ic=1, vthreads=2)
    with pytest.raises(LoweringError) as e:
        conv2d(cfg, x.shape, w, b, padding=1, schedule=big)
    assert str(e.value).startswith(
        "the INP buffer must hold at most 256 elements on HWConfig 'tiny', not 360 "
        "(pad.inp@0: 180, pad.inp@1: 180)"
    )
    x, w, b = _operands(1, (1, 4, 16, 16), (8, 4, 1, 1))
    with pytest.raises(LoweringError, match=r"ACC buffer .* not 514 \(bias.acc: 2, C: 512\)"):
        conv2d(cfg, x.shape, w, b, schedule=Conv2dSchedule(tile_h=16, tile_oc=2))


def test_default_schedule_fits_where_the_largest_tiles_do_not() -> None:
    cfg = HWConfig.preset("tiny")
    wl = Conv2dWorkload(1, 4, 16, 16, 8, 3, 3, pad_h=1, pad_w=1)
    assert not Conv2dSchedule(tile_h=16, tile_oc=2, tile_ic=1, vthreads=2).fits(cfg, wl)
    s = default_schedule(cfg, wl, 2)
    assert s.fits(cfg, wl) and s.vthreads == 2
    x, w, b = _operands(3, (1, 4, 16, 16), (8, 4, 3, 3))
    _check(conv2d(cfg, x.shape, w, b, padding=1, shift=10, schedule=s), x)


@pytest.mark.parametrize("vthreads", [1])  # 2 threads: see docs/vta_compiler.md, Limitations
def test_default_schedule_is_near_the_fastest_on_cyclesim(vthreads: int) -> None:
    """`estimated_cycles` ranks schedules: the default is within 5% of the fastest of every
    fitting schedule on the cycle model (a 1x1 stride-2 layer, where row tiles matter)."""
    from tensorforge.runtime.device.vta import run_image

    cfg = HWConfig.preset("tiny")
    wl = Conv2dWorkload(1, 16, 12, 12, 16, 1, 1, stride_h=2, stride_w=2)
    w = np.ones((16, 16, 1, 1), np.int8)
    cycles = {}
    for s in candidate_schedules(cfg, wl, vthreads):
        kern = conv2d(cfg, (1, 16, 12, 12), w, stride=2, shift=4, schedule=s)
        cycles[s] = run_image(kern.image, backend="cyclesim")[1].cycles
    best = default_schedule(cfg, wl, vthreads)
    assert len(cycles) > 20 and cycles[best] <= 1.05 * min(cycles.values()), (best, cycles[best])


def test_conv2d_rejects_knobs_out_of_range() -> None:
    cfg = HWConfig.preset("tiny")
    x, w, b = _operands(1, (1, 4, 6, 6), (4, 4, 3, 3))
    with pytest.raises(
        ScheduleError, match=r"tile_h must be in \[1, 6\] \(the output rows .*not 7"
    ):
        conv2d(cfg, x.shape, w, b, padding=1, schedule=Conv2dSchedule(tile_h=7))
    with pytest.raises(ScheduleError, match=r"tile_ic must be in \[1, 1\] .*not 0"):
        conv2d(cfg, x.shape, w, b, padding=1, schedule=Conv2dSchedule(tile_ic=0))
    with pytest.raises(ScheduleError, match="vthreads must be 1 or 2, not 3"):
        conv2d(cfg, x.shape, w, b, padding=1, vthreads=3)
    with pytest.raises(ValueError, match=r"pad_h must be in \[0, 15\]"):
        conv2d(cfg, x.shape, w, b, padding=16)


def test_compiled_image_round_trips_through_a_file(tmp_path: Path) -> None:
    cfg = HWConfig.preset("tiny")
    x, w, b = _operands(2, (1, 8, 5, 5), (4, 8, 3, 3))
    kern = conv2d(cfg, x.shape, w, b, padding=1, shift=10, vthreads=2)
    path = tmp_path / "conv.tfprog"
    kern.image.save(path)
    image = ProgramImage.load(path)
    device = open_device("sim", cfg)
    try:
        outputs, _ = LoadedProgram.load(device, image).run({"X": kern.pack(x)})
    finally:
        device.close()
    assert np.array_equal(kern.unpack(outputs["Y"]), kern.reference(x))


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 2),
    ic=st.integers(1, 9),
    oc=st.integers(1, 9),
    hw=st.tuples(st.integers(1, 7), st.integers(1, 7)),
    k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pad=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    pick=st.integers(0, 10_000),
    vthreads=st.sampled_from([1, 2]),
    relu=st.booleans(),
)
def test_random_conv2d_with_a_random_fitting_schedule_is_bit_exact(  # type: ignore[no-untyped-def]
    n, ic, oc, hw, k, stride, pad, pick, vthreads, relu
) -> None:
    cfg = HWConfig.preset("tiny")
    h, w = hw
    assume(h + 2 * pad[0] >= k[0] and w + 2 * pad[1] >= k[1])
    wl = Conv2dWorkload(n, ic, h, w, oc, *k, *stride, *pad)
    schedules = candidate_schedules(cfg, wl, vthreads)
    assume(schedules)
    s = schedules[pick % len(schedules)]
    x, wt, b = _operands(pick, (n, ic, h, w), (oc, ic, *k))
    kern = conv2d(cfg, x.shape, wt, b, stride=stride, padding=pad, shift=pick % 12, relu=relu,
                  schedule=s)  # fmt: skip
    out, _ = kern.run(x)
    assert np.array_equal(out, kern.reference(x)), s


def test_default_schedule_falls_back_to_one_thread_where_two_do_not_fit() -> None:
    # A 7x7 conv on tiny: one thread's input rows (7 x 21 of 256) fit INP, two threads' do not.
    cfg = HWConfig.preset("tiny")
    wl = Conv2dWorkload(1, 16, 15, 15, 12, 7, 7, 2, 2, 3, 3)
    assert not candidate_schedules(cfg, wl, 2) and fit_problem(cfg, wl) is None
    assert default_schedule(cfg, wl, 2).vthreads == 1
    x, w, b = _operands(4, (1, 16, 15, 15), (12, 16, 7, 7))
    _check(conv2d(cfg, x.shape, w, b, stride=2, padding=3, shift=12, vthreads=2), x)


def test_fit_problem_names_the_sram_that_no_tiling_fits() -> None:
    cfg = HWConfig.preset("tiny")
    wide = Conv2dWorkload(1, 16, 2, 600, 16, 1, 1)  # one output row: 600 of 256 INP entries
    assert fit_problem(cfg, wide) == (
        "the smallest tile (1 output row(s), one channel block each way) needs more SRAM "
        "entries than HWConfig 'tiny' has: inp 600 > 256, acc 604 > 256"
    )
    with pytest.raises(ScheduleError, match="fits the SRAMs of HWConfig 'tiny': the smallest"):
        default_schedule(cfg, wide, 2)
    assert fit_problem(HWConfig.preset("pynq"), Conv2dWorkload(1, 16, 260, 260, 16, 1, 1)) == (
        "an instruction field overflows: 67600 output pixels (a store's row stride) > 65535 "
        "elements a transfer"
    )
    # 1x1 with 200 columns fits alone (acc 200 + bias) but not with a residual tile beside it
    assert fit_problem(cfg, Conv2dWorkload(1, 16, 1, 200, 16, 1, 1)) is None
    assert "acc 404 > 256" in fit_problem(cfg, Conv2dWorkload(1, 16, 1, 200, 16, 1, 1), True)


def test_one_token_queues_take_one_virtual_thread() -> None:
    # With dep_queue_depth=1 (and a short command queue) two threads' streams deadlock: the
    # compiler's token check rejected every default 2-thread conv2d on such a config.
    cfg = HWConfig.preset("tiny").replace(name="tiny_q1", insn_queue_depth=4, dep_queue_depth=1)
    wl = Conv2dWorkload(1, 16, 9, 9, 16, 3, 3, 2, 2, 1, 1)
    with pytest.raises(ScheduleError, match="dep_queue_depth=1"):
        Conv2dSchedule(tile_h=1, vthreads=2).check(cfg, wl)
    assert default_schedule(cfg, wl, 2).vthreads == 1
    x, w, b = _operands(5, (1, 16, 9, 9), (16, 16, 3, 3))
    for kern in (
        conv2d(cfg, x.shape, w, b, stride=2, padding=1, shift=12, vthreads=2),
        max_pool2d(cfg, (1, 16, 9, 9), 3, 2, vthreads=2),
    ):
        out, _ = kern.run(x, "sim")
        assert np.array_equal(out, kern.reference(x))


def test_kernels_give_the_input_slots_their_images_take() -> None:
    """`inputs()` packs a kernel's operands into its image's slots, so a program can run on a
    device of one's own (a cocotb `Testbench`, `LoadedProgram`) without knowing slot names or
    layouts: the residual operand is packed in blocks of BLOCK_OUT, not BLOCK_IN, which on a
    config where they differ (here 4 and 8) a hand-made `pack_nchw(cfg, r)` gets wrong.
    Oracle: the int8 reference, through the functional simulator."""
    from tensorforge.compiler.quantize.residual import add_params
    from tensorforge.compiler.vta import max_pool2d
    from tensorforge.demo import build_matmul, unpack_out
    from tensorforge.runtime.device.vta import run_image

    cfg = HWConfig.preset("tiny").replace(name="tiny_wide", log_block_out=3, log_acc_buff_size=13)
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 4, 4, 4), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 4, 3, 3), dtype=np.int8)
    add = add_params(0.5, 1.3, cfg, mode="mul", relu=True)
    conv = conv2d(cfg, x.shape, w, None, padding=1, shift=8, residual=add)
    r = rng.integers(-127, 128, conv.residual_shape, dtype=np.int8)
    out, _ = run_image(conv.image, conv.inputs(x, r), "sim")
    y = conv.unpack(out["Y"])
    assert np.array_equal(y, conv.reference(x, r))
    pool = max_pool2d(cfg, y.shape, 2)
    out, _ = run_image(pool.image, pool.inputs(y), "sim")
    assert np.array_equal(pool.unpack(out["Y"]), pool.reference(y))
    mm = build_matmul(cfg, 4, 8, 8)
    out, _ = run_image(mm.image, mm.inputs(), "sim")
    assert np.array_equal(unpack_out(cfg, out["C"])[:, :8], mm.reference())


ASYMMETRIC = {  # (top, left, bottom, right), stride, kernel: the "same" paddings users meet
    "tf_same_stride2": ((0, 0, 1, 1), 2, 3),  # TensorFlow's SAME of a strided 3x3 (tf2onnx)
    "torch_same_even": ((1, 1, 2, 2), 1, 4),  # torch's padding="same" with a 4x4 kernel
    "one_side_each": ((0, 1, 1, 0), (1, 2), 2),
    "uneven_rows": ((2, 0, 1, 3), 1, 3),
}


@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("case", list(ASYMMETRIC))
def test_asymmetric_padding_is_bit_exact(case: str, vthreads: int) -> None:
    """Different zero padding before and after each axis (the LOAD's four pad fields), over
    every fitting schedule of one thread count, on the behavioural and cycle-accurate
    simulators; the oracle pads the input with numpy first (0 is the zero point)."""
    from tensorforge.compiler.quantize import conv2d_int8

    cfg = HWConfig.preset("tiny")
    (top, left, bottom, right), stride, k = ASYMMETRIC[case]
    x, w, b = _operands(21, (1, 8, 9, 7), (8, 8, k, k))
    first = conv2d(cfg, x.shape, w, b, stride=stride, padding=(top, left, bottom, right), shift=10,
                   vthreads=vthreads)  # fmt: skip
    wl = first.workload
    assert wl.pads == (top, left, bottom, right) and not wl.symmetric
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    want = conv2d_int8(padded, w, b, stride=stride, requant=first.requant)
    assert np.unique(want).size > 2
    schedules = [s for s in candidate_schedules(cfg, wl, vthreads) if s.vthreads == vthreads]
    assert len(schedules) > 3
    for s in schedules[:: max(1, len(schedules) // 6)]:
        kern = conv2d(cfg, x.shape, w, b, stride=stride, padding=(top, left, bottom, right),
                      shift=10, schedule=s)  # fmt: skip
        out, _ = kern.run(x)
        assert np.array_equal(out, want), s
    out, _ = first.run(x, "cyclesim")
    assert np.array_equal(out, want)


def test_asymmetric_padding_out_of_the_pad_fields_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="pad_bottom must be in"):
        Conv2dWorkload(1, 8, 6, 6, 8, 3, 3, pad_h=0, pad_w=0, pad_bottom=99)
    symmetric = Conv2dWorkload(1, 8, 6, 6, 8, 3, 3, pad_h=1, pad_w=1)
    assert symmetric.symmetric and symmetric.pads == (1, 1, 1, 1)
    assert (
        Conv2dWorkload(1, 8, 6, 6, 8, 3, 3, pad_h=1, pad_w=1, pad_bottom=1, pad_right=1)
        == symmetric
    )

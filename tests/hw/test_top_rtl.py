"""The hand-written program with every instruction type (programs.py) on the ``rtl`` device
backend: the exported tiny top under Icarus and Verilator through cocotb, its output bit-exact
against the ``sim`` backend (sim/functional.py) and its cycles equal to ``cyclesim``'s
(sim/timing.py with the RAM model's latencies, ``matched_timing``)."""

from __future__ import annotations

import numpy as np
import pytest
from programs import hand_inputs, hand_program

from tensorforge.hw.config import HWConfig
from tensorforge.runtime.device.vta import LoadedProgram, open_device
from tensorforge.runtime.device.vta.rtl import matched_timing

TINY = HWConfig.preset("tiny")


def run(image, inputs: dict, backend: str, **options):  # type: ignore[no-untyped-def]
    device = open_device(backend, image.config, **options)
    try:
        return LoadedProgram.load(device, image).run(inputs)
    finally:
        device.close()


def _check_on_the_ladder(kern, x, cfg, rtl_simulator) -> None:
    """The RTL's output equals the behavioural simulator's and the kernel's reference, and its
    cycles the cycle-accurate simulator's."""
    inputs = {"X": kern.pack(x)}
    want, _ = run(kern.image, inputs, "sim")
    _, timed = run(kern.image, inputs, "cyclesim", timing=matched_timing(cfg))
    got, result = run(kern.image, inputs, "rtl", simulator=rtl_simulator)
    assert np.array_equal(kern.unpack(got["Y"]), kern.reference(x))
    assert np.array_equal(got["Y"], want["Y"])
    assert result.cycles == timed.cycles, f"RTL {result.cycles} != sim/timing {timed.cycles}"


@pytest.mark.rtl
def test_every_instruction_type_on_rtl_equals_sim_and_cyclesim(rtl_simulator):
    rng = np.random.default_rng(5)
    image = hand_program(TINY, rng)
    inputs = hand_inputs(TINY, rng)
    want, _ = run(image, inputs, "sim")
    _, timed = run(image, inputs, "cyclesim", timing=matched_timing(TINY))
    got, result = run(image, inputs, "rtl", simulator=rtl_simulator)
    assert set(got) == set(want) == {"O"}
    assert np.array_equal(got["O"], want["O"])
    assert np.any(want["O"]), "the program must store something"
    assert result.cycles == timed.cycles, f"RTL {result.cycles} != sim/timing {timed.cycles}"


@pytest.mark.rtl
def test_a_per_channel_requantized_conv_on_rtl_equals_sim_and_cyclesim(rtl_simulator):
    # the compiler's tensor-tensor ALU MUL by per-channel multipliers (loaded like the bias)
    from tensorforge.compiler.quantize.requant import requant_params_per_channel
    from tensorforge.compiler.vta import conv2d

    cfg = TINY.replace(alu_mul=True)
    rng = np.random.default_rng(9)
    x = rng.integers(-127, 128, (1, 9, 5, 5), dtype=np.int8)
    w = rng.integers(-127, 128, (9, 9, 3, 3), dtype=np.int8)
    b = rng.integers(-3000, 3000, 9, dtype=np.int32)
    bounds = 127 * np.abs(w.astype(np.int64)).reshape(9, -1).sum(1) + np.abs(b)
    p = requant_params_per_channel(
        rng.uniform(0.5, 2, 9) * 2**-11, cfg, acc_bounds=bounds, pre_shift=2
    )
    kern = conv2d(cfg, x.shape, w, b, padding=1, requant=p, vthreads=2)
    _check_on_the_ladder(kern, x, cfg, rtl_simulator)


@pytest.mark.rtl
def test_read_bursts_in_flight_on_rtl_equal_sim_and_cyclesim(rtl_simulator):
    """A matmul whose weight LOADs are 8 bursts each, on tops built with 1 and 4 read bursts in
    flight (``max_outstanding_reads``) behind cocotbext-axi's RAM: output bit-exact with
    sim/functional.py, cycles equal to cyclesim's for both, and fewer with 4."""
    from tensorforge.demo import build_matmul, pack_inp

    cycles = {}
    for outstanding in (1, 4):
        cfg = TINY.replace(max_outstanding_reads=outstanding)
        kernel = build_matmul(cfg, 4, 32, 32, shift=4, tile_rows=1, seed=3)
        inputs = {"A": pack_inp(cfg, kernel.a)}
        want, _ = run(kernel.image, inputs, "sim")
        _, timed = run(kernel.image, inputs, "cyclesim", timing=matched_timing(cfg))
        got, result = run(kernel.image, inputs, "rtl", simulator=rtl_simulator)
        assert np.array_equal(got["C"], want["C"])
        assert result.cycles == timed.cycles, (
            f"{outstanding} in flight: RTL {result.cycles} != sim/timing {timed.cycles}"
        )
        cycles[outstanding] = result.cycles
    assert cycles[4] < cycles[1]


@pytest.mark.rtl
def test_a_conv_with_requantizing_gemms_on_rtl_equals_sim_and_cyclesim(rtl_simulator):
    """HWConfig ``gemm_requant``: the compiler's requantizing bias GEMMs (no ALU passes, resets
    dropped) on the exported top: output equal to the int8 reference and the ``sim`` backend,
    cycles equal to cyclesim's."""
    from tensorforge.compiler.quantize import requant_params
    from tensorforge.compiler.vta import Conv2dSchedule, conv2d
    from tensorforge.hw.isa import AluInsn, GemmInsn

    cfg = TINY.replace(gemm_requant=True, alu_mul=False)
    rng = np.random.default_rng(12)
    x = rng.integers(-127, 128, (1, 8, 4, 5), dtype=np.int8)
    w = rng.integers(-127, 128, (9, 8, 1, 1), dtype=np.int8)
    b = rng.integers(-3000, 3000, 9, dtype=np.int32)
    p = requant_params(2.0**-7, cfg, mode="shift", relu=True)
    sched = Conv2dSchedule(tile_n=1, tile_h=2, tile_oc=1, tile_ic=2, vthreads=2)
    kern = conv2d(cfg, x.shape, w, b, requant=p, schedule=sched)
    insns = kern.image.instructions()
    assert any(isinstance(i, GemmInsn) and i.requant for i in insns)
    assert not any(isinstance(i, AluInsn) for i in insns)
    _check_on_the_ladder(kern, x, cfg, rtl_simulator)

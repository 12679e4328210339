"""The ``rtl`` device backend: programs on the exported top under Icarus/Verilator (cocotb),
bit-exact against the ``sim`` backend (sim/functional.py) and cycle-exact against ``cyclesim``
(sim/timing.py with the RAM model's latencies)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.vta import conv2d
from tensorforge.demo import build_matmul
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import (
    AluInsn,
    AluOp,
    FinishInsn,
    GemmInsn,
    MemInsn,
    MemType,
    Opcode,
    Stage,
    Uop,
    encode_program,
    encode_uops,
    stage_of,
)
from tensorforge.runtime.device.vta import DeviceError, open_device
from tensorforge.runtime.device.vta.rtl import matched_timing
from tensorforge.sim.functional import SramRangeError

TINY = HWConfig.preset("tiny")


def _assert_rtl_equals_sim_and_cyclesim(kern, x, rtl_simulator) -> None:  # type: ignore[no-untyped-def]
    """`kern` on `x`: sim equals the numpy reference, the RTL equals sim bit for bit, and its
    cycles equal cyclesim's with the testbench's RAM timing."""
    want, _ = kern.run(x, "sim")
    _, timed = kern.run(x, "cyclesim", timing=matched_timing(TINY))
    got, result = kern.run(x, "rtl", simulator=rtl_simulator)
    assert np.array_equal(want, kern.reference(x))
    assert np.array_equal(got, want)
    assert result.cycles == timed.cycles, f"RTL {result.cycles} != sim/timing {timed.cycles}"


@pytest.mark.rtl
def test_demo_matmul_on_rtl_equals_sim_and_cyclesim(rtl_simulator):
    kernel = build_matmul(TINY, 4, 16, 12, shift=5, tile_rows=2, seed=3)
    insns = kernel.image.instructions()
    tiles = [i for i in insns if stage_of(i) == Stage.LOAD and i.memory_type == MemType.INP]
    assert len(tiles) == 2, "two row tiles (and 3 x 4 blocks of C and K per tile)"
    want, _ = kernel.run_on("sim")
    _, timed = kernel.run_on("cyclesim", timing=matched_timing(TINY))
    got, result = kernel.run_on("rtl", simulator=rtl_simulator)
    assert np.array_equal(want, kernel.reference())  # the oracle agrees with the functional sim
    assert np.array_equal(got, want)
    assert result.backend == "rtl" and result.stats["cycles"] == result.cycles
    assert result.cycles == timed.cycles, f"RTL {result.cycles} != sim/timing {timed.cycles}"


@pytest.mark.rtl
def test_compiled_conv_on_rtl_equals_sim_and_cyclesim(rtl_simulator):
    rng = np.random.default_rng(5)
    weight = rng.integers(-128, 128, (8, 4, 3, 3), dtype=np.int8)
    bias = rng.integers(-2000, 2000, 8, dtype=np.int32)
    kern = conv2d(TINY, (1, 4, 6, 6), weight, bias, padding=1, shift=7, relu=True, vthreads=2)
    x = rng.integers(-128, 128, (1, 4, 6, 6), dtype=np.int8)
    _assert_rtl_equals_sim_and_cyclesim(kern, x, rtl_simulator)


@pytest.mark.rtl
def test_compiled_depthwise_conv_on_rtl_equals_sim_and_cyclesim(rtl_simulator):
    """Depthwise: block-diagonal weight tiles, each output block's GEMMs over its own input
    block (micro-ops whose input offset follows the output block)."""
    rng = np.random.default_rng(6)
    weight = rng.integers(-128, 128, (8, 1, 3, 3), dtype=np.int8)
    bias = rng.integers(-500, 500, 8, dtype=np.int32)
    kern = conv2d(TINY, (1, 8, 5, 5), weight, bias, padding=1, shift=5, groups=8, vthreads=2)
    x = rng.integers(-128, 128, (1, 8, 5, 5), dtype=np.int8)
    _assert_rtl_equals_sim_and_cyclesim(kern, x, rtl_simulator)


@pytest.mark.rtl
def test_streamed_resident_weights_on_rtl_equal_sim_and_cyclesim(rtl_simulator):
    """Resident weights loaded in parts by first use, the bias added on the GEMM core
    (compiler/vta/passes.py), on the exported top: bit-exact and cycle-exact."""
    from tensorforge.compiler.vta import Conv2dSchedule

    rng = np.random.default_rng(9)
    weight = rng.integers(-128, 128, (8, 8, 1, 1), dtype=np.int8)
    bias = rng.integers(-2000, 2000, 8, dtype=np.int32)
    sched = Conv2dSchedule(tile_h=2, tile_oc=1, tile_ic=1, vthreads=2, resident_weights=True)
    kern = conv2d(TINY, (1, 8, 4, 4), weight, bias, shift=7, relu=True, schedule=sched)
    insns = kern.image.instructions()
    wgt_loads = [i for i in insns if isinstance(i, MemInsn) and i.memory_type == MemType.WGT]
    adds = [i for i in insns if isinstance(i, AluInsn) and i.alu_opcode == AluOp.ADD]
    assert len(wgt_loads) > 2 and all(i.use_imm for i in adds)  # parts; the bias on the GEMM
    x = rng.integers(-128, 128, (1, 8, 4, 4), dtype=np.int8)
    _assert_rtl_equals_sim_and_cyclesim(kern, x, rtl_simulator)


def _raw_program(device, program: bytes):  # type: ignore[no-untyped-def]
    block = device.alloc(len(program), 16)
    device.write(block, program)
    return block


@pytest.mark.rtl
def test_a_deadlocked_program_ends_with_the_state_named(icarus):
    device = open_device("rtl", TINY, max_cycles=2000)
    # GEMM pops a token LOAD never pushes: the core waits forever.
    program = encode_program([GemmInsn(pop_prev=True), FinishInsn()], TINY)
    block = _raw_program(device, program)
    with pytest.raises(DeviceError, match=r"hung: no DONE after \d+ clock cycles \(limit 2000\)"
                       r"; state: CTRL=BUSY, STATUS=OK, CYCLES=\d+"):  # fmt: skip
        device.run(block, 2)


@pytest.mark.rtl
def test_the_wall_clock_limit_ends_a_hung_run_too(icarus):
    device = open_device("rtl", TINY, timeout_s=1.0)  # max_cycles stays at its large default
    block = _raw_program(device, encode_program([GemmInsn(pop_prev=True), FinishInsn()], TINY))
    with pytest.raises(DeviceError, match=r"hung: the accelerator did not finish within 1\.0 s"
                       r".*state: CTRL=BUSY"):  # fmt: skip
        device.run(block, 2)


@pytest.mark.rtl
def test_a_bad_opcode_stops_with_status(icarus):
    device = open_device("rtl", TINY, max_cycles=2000)
    block = _raw_program(device, bytes([0x07]) + bytes(15))  # opcode 7 is not defined
    with pytest.raises(DeviceError, match="stopped on an error: .*STATUS BAD_OPCODE.*CTRL=ERROR"):
        device.run(block, 1)


#: how each backend reports the out-of-range index below
RANGE_ERRORS = {
    "sim": (SramRangeError, r"GEMM\): ACC index 256 is out of range \[0, 256\)"),
    "rtl": (DeviceError, r"stopped on an error: .*STATUS=SRAM_RANGE, CYCLES=0"),
}


@pytest.mark.parametrize("backend", ["sim", pytest.param("rtl", marks=pytest.mark.rtl)])
def test_an_index_beyond_a_buffer_stops_with_sram_range(backend, request):
    if backend == "rtl":
        request.getfixturevalue("icarus")
    device = open_device(backend, TINY, **({"max_cycles": 2000} if backend == "rtl" else {}))
    uops = _raw_program(device, encode_uops([Uop(250, 0, 0)], TINY))
    # The GEMM's second step adds into ACC[250 + 6]; tiny's ACC has 256 entries.
    program = [
        MemInsn(Opcode.LOAD, MemType.UOP, 0, uops.addr // 4, 1, 1, 1),
        GemmInsn(uop_end=1, iter_out=2, dst_factor_out=6),
        FinishInsn(),
    ]
    block = _raw_program(device, encode_program(program, TINY))
    error, message = RANGE_ERRORS[backend]
    with pytest.raises(error, match=message):
        device.run(block, len(program))


def test_unknown_simulator_is_named():
    with pytest.raises(DeviceError, match=r"simulator must be one of \['icarus', 'verilator'\], "
                       "not 'vcs'"):  # fmt: skip
        open_device("rtl", TINY, simulator="vcs")

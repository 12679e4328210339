"""The register map and launch protocol, against the register-block model running the simulator."""

import numpy as np
import pytest

from tensorforge.demo import build_matmul, pack_inp, unpack_out
from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import FinishInsn, GemmInsn, MemInsn, MemType, Opcode, encode_program
from tensorforge.hw.regmap import (
    REGISTERS,
    Ctrl,
    LaunchError,
    Status,
    config_hash,
    launch,
    register_table,
)
from tensorforge.runtime.device.vta import LoadedProgram, open_device
from tensorforge.sim.regblock import RegisterBlockModel

TINY = HWConfig.preset("tiny")


def model_for(device, cfg=TINY):
    return RegisterBlockModel(cfg, lambda addr, n: device.sim.run(addr, n).insn_count)


def test_registers_are_word_aligned_and_distinct():
    offsets = [r.offset for r in REGISTERS.values()]
    assert len(set(offsets)) == len(offsets)
    assert all(o % 4 == 0 and o < 0x40 for o in offsets)
    assert "| 0x10 | INSN_COUNT | rw |" in register_table()


def test_config_hash_separates_hardware_changes_only():
    pynq = HWConfig.preset("pynq")
    assert config_hash(pynq) == config_hash(pynq.replace(name="other", clock_mhz=200.0))
    assert config_hash(pynq) != config_hash(pynq.replace(alu_mul=False))
    assert config_hash(pynq) != config_hash(TINY)


@pytest.mark.parametrize("knob", [{"gemm_requant": True}, {"max_outstanding_reads": 4}])
def test_a_top_built_without_a_later_knob_refuses_its_programs(knob):
    """gemm_requant (what a GEMM computes) and max_outstanding_reads (every CYCLES count) were
    not hashed: a plain tiny top passed the identity check for a tiny+gemm_requant program,
    whose requantizing GEMMs it then ran as plain accumulations, and a bitstream manifest
    handed out the plain build for either."""
    other = TINY.replace(**knob)
    assert config_hash(other) != config_hash(TINY)
    regs = model_for(open_device("sim", TINY))
    with pytest.raises(LaunchError, match="built for another HWConfig"):
        launch(regs.read32, regs.write32, other, 0, 1)


def test_the_presets_keep_the_config_hash_their_bitstreams_record():
    """The later knobs are hashed only away from their defaults (values from earlier runs)."""
    assert config_hash(TINY) == 0x6F5A4B76
    assert config_hash(HWConfig.preset("pynq")) == 0x0C9F0BC0


def test_launch_runs_a_kernel_through_the_registers():
    device = open_device("sim", TINY)
    kernel = build_matmul(TINY, 16, 8, 8, seed=7)
    prog = LoadedProgram.load(device, kernel.image)
    prog.write("A", pack_inp(TINY, kernel.a))
    regs = model_for(device)
    result = launch(regs.read32, regs.write32, TINY, prog.insn_block.addr, kernel.image.insn_count)
    assert result.cycles == kernel.image.insn_count  # this model reports instructions as cycles
    assert regs.read32(REGISTERS["CTRL"].offset) == Ctrl.DONE
    assert np.array_equal(unpack_out(TINY, prog.read("C")), kernel.reference())


def _program_at(device, insns):
    raw = encode_program(insns, TINY)
    block = device.alloc(len(raw), 16)
    device.write(block, raw)
    return block.addr, len(insns)


def test_launch_refuses_a_bitstream_for_another_config():
    device = open_device("sim", TINY)
    regs = model_for(device, TINY.replace(alu_mul=False))
    with pytest.raises(LaunchError, match="built for another HWConfig .* for 'tiny'"):
        launch(regs.read32, regs.write32, TINY, *_program_at(device, [FinishInsn()]))
    regs.regs["HW_ID"] = 0
    with pytest.raises(LaunchError, match="not a TensorForge accelerator"):
        launch(regs.read32, regs.write32, TINY, 0, 1)


def test_sram_overflow_stops_with_a_status():
    device = open_device("sim", TINY)
    bad = GemmInsn(uop_bgn=0, uop_end=1, iter_out=3, dst_factor_out=200)
    regs = model_for(device)
    with pytest.raises(LaunchError, match="STATUS SRAM_RANGE"):
        launch(regs.read32, regs.write32, TINY, *_program_at(device, [bad, FinishInsn()]))
    assert regs.read32(REGISTERS["STATUS"].offset) == Status.SRAM_RANGE


def test_a_deadlocked_program_times_out_instead_of_hanging():
    device = open_device("sim", TINY)
    waits = MemInsn(Opcode.LOAD, MemType.INP, pop_next=True, push_next=True)  # no token comes
    regs = model_for(device)
    with pytest.raises(LaunchError, match="did not finish within 0.05 s"):
        where = _program_at(device, [waits, FinishInsn(pop_prev=True)])
        launch(regs.read32, regs.write32, TINY, *where, timeout_s=0.05)
    assert regs.read32(REGISTERS["CTRL"].offset) == Ctrl.BUSY


@pytest.mark.parametrize(
    ("addr", "count", "message"),
    [
        (0x1000, 0, r"insn_count must be an int from 1 to 2\*\*32 - 1 .*never sets DONE\), not 0"),
        (0x1000, 1 << 32, "insn_count must be .*, not 4294967296"),
        (0x1000, -1, "insn_count must be .*, not -1"),
        (0x1008, 1, "insn_addr must be a 16-byte aligned address .*, not 4104"),
        (-16, 1, "insn_addr must be .*, not -16"),
        (1 << 64, 1, "insn_addr must be .*, not 18446744073709551616"),
    ],
)
def test_launch_refuses_a_stream_the_registers_cannot_run(addr, count, message):
    """Checked before any register access: a count of 0 used to poll until the time-out (the
    core fetches nothing and never sets DONE; under cocotb 200,000 clock cycles), a negative
    value reached the AXI-Lite master as an OverflowError."""
    regs = model_for(open_device("sim", TINY))
    touched = []
    with pytest.raises(ValueError, match=message):
        launch(lambda o: touched.append(o), lambda o, v: touched.append(o), TINY, addr, count,
               timeout_s=0.05)  # fmt: skip
    assert touched == [] and regs.read32(REGISTERS["CTRL"].offset) == 0

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

"""cocotb bench for the exported register block: hw.regmap.launch itself, over cocotbext-axi's
AxiLiteMaster, against a scripted core; registers compared with sim/regblock.py's model.

Run by test_regblock_cocotb.py; TF_REGBLOCK_CASE names a JSON file with the config preset and
the script: per launch, ``[cycles, status]`` (status 0: DONE after ``cycles``; else ERROR).
"""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.task import bridge, resume
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from tensorforge.hw.config import HWConfig
from tensorforge.hw.regmap import REGISTERS, LaunchError, Status, launch
from tensorforge.sim.functional import SramRangeError
from tensorforge.sim.regblock import RegisterBlockModel


async def scripted_core(dut, script: list[list[int]], seen: list[tuple[int, int]]) -> None:
    """Answer each ``start`` pulse: ``done`` (or ``error``) ``cycles`` cycles later."""
    for cycles, status in script:
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            if int(dut.start.value):
                break
        seen.append((int(dut.insn_addr.value), int(dut.insn_count.value)))
        await ClockCycles(dut.clk, cycles)  # to the edge that ends cycle start + cycles - 1
        pulse = dut.error if status else dut.done
        pulse.value = 1
        dut.error_status.value = status
        await RisingEdge(dut.clk)
        pulse.value = 0


@cocotb.test()
async def launch_protocol_matches_model(dut):
    with open(os.environ["TF_REGBLOCK_CASE"]) as f:
        case = json.load(f)
    cfg = HWConfig.preset(case["preset"])
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.done.value = 0
    dut.error.value = 0
    dut.error_status.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"), dut.clk)
    seen: list[tuple[int, int]] = []
    cocotb.start_soon(scripted_core(dut, case["script"], seen))

    @resume
    async def read32(offset: int) -> int:
        return await master.read_dword(offset)

    @resume
    async def write32(offset: int, value: int) -> None:
        await master.write_dword(offset, value)

    calls = iter(case["script"])

    def execute(addr: int, count: int) -> int:
        cycles, status = next(calls)
        if status:
            raise SramRangeError("scripted")  # the one error status the cases use
        return cycles

    model = RegisterBlockModel(cfg, execute)
    for i, (cycles, status) in enumerate(case["script"]):
        addr, count = 0x1_0000_0000 * (i % 2) + 0x4000 * (i + 1), 3 * i + 1
        try:
            result = await bridge(launch)(read32, write32, cfg, addr, count, timeout_s=20.0)
            assert not status and result.cycles == cycles, f"launch {i}: {result}"
        except LaunchError as e:
            assert status, f"launch {i} failed: {e}"
            assert Status(status).name in str(e), str(e)
        model.write32(REGISTERS["INSN_ADDR_LO"].offset, addr & 0xFFFF_FFFF)
        model.write32(REGISTERS["INSN_ADDR_HI"].offset, addr >> 32)
        model.write32(REGISTERS["INSN_COUNT"].offset, count)
        model.write32(REGISTERS["CTRL"].offset, 1)
        assert seen[-1] == (addr, count), f"launch {i}: the core saw {seen[-1]}"
        for name, reg in REGISTERS.items():
            got = await master.read_dword(reg.offset)
            assert got == model.read32(reg.offset), f"launch {i}: {name} = {got:#x}"

    other = HWConfig.preset("pynq" if cfg.name != "pynq" else "tiny")
    try:
        await bridge(launch)(read32, write32, other, 0, 1)
        raise AssertionError("launch must refuse a bitstream built for another config")
    except LaunchError as e:
        assert "CONFIG_HASH" in str(e), str(e)

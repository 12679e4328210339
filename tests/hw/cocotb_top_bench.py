"""cocotb bench for the exported accelerator: cocotbext-axi AXI RAMs (one shared memory behind
the four masters) holding a program image placed by the runtime, and hw.regmap.launch itself
over an AxiLiteMaster.

Run by test_top_cocotb.py. TF_TOP_CASE names a JSON file: preset, DRAM base, the image file
(bytes from base), insn_addr, insn_count and the output file, where the bench writes the DRAM
bytes after the run and, in a side file ``<output>.json``, the cycles launch() read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.task import bridge, resume
from cocotb.triggers import ClockCycles
from cocotbext.axi import (
    AxiLiteBus,
    AxiLiteMaster,
    AxiRamRead,
    AxiRamWrite,
    AxiReadBus,
    AxiWriteBus,
)
from cocotbext.axi.sparse_memory import SparseMemory

from tensorforge.hw.config import HWConfig
from tensorforge.hw.regmap import launch


@cocotb.test()
async def program_runs(dut):
    with open(os.environ["TF_TOP_CASE"]) as f:
        case = json.load(f)
    cfg = HWConfig.preset(case["preset"])
    base = case["base"]
    image = Path(case["image"]).read_bytes()
    mem = SparseMemory(1 << 32)
    mem[base : base + len(image)] = image
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for port in ("fetch", "load", "compute"):
        AxiRamRead(AxiReadBus.from_prefix(dut, f"m_axi_{port}", bus_separator="__"), dut.clk,
                   dut.rst, mem=mem)  # fmt: skip
    AxiRamWrite(AxiWriteBus.from_prefix(dut, "m_axi_store", bus_separator="__"), dut.clk,
                dut.rst, mem=mem)  # fmt: skip
    master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"), dut.clk,
                           dut.rst)  # fmt: skip
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)

    @resume
    async def read32(offset: int) -> int:
        return await master.read_dword(offset)

    @resume
    async def write32(offset: int, value: int) -> None:
        await master.write_dword(offset, value)

    result = await bridge(launch)(read32, write32, cfg, case["insn_addr"], case["insn_count"],
                                  timeout_s=120.0)  # fmt: skip
    out = Path(case["output"])
    out.write_bytes(bytes(mem[base : base + len(image)]))
    Path(f"{out}.json").write_text(json.dumps({"cycles": result.cycles}))

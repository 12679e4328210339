"""cocotb bench for an exported compute core (GEMM or ALU) with Python SRAM models.

Run by test_export.py through cocotb_tools.runner; the case file (TF_CORE_CASE) names the read
ports and holds the SRAM images, the 128-bit instructions, the expected cycles of each and the
expected ACC/OUT images.
"""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

WRITES = ("acc", "out")


async def serve_srams(dut, mem: dict[str, list[int]], reads: list[str]) -> None:
    """Synchronous SRAMs: an address presented in a cycle gives its data in the next cycle;
    a read and a write of one row in the same cycle return the old row (read-first)."""
    while True:
        await FallingEdge(dut.clk)  # this cycle's addresses and write requests are settled
        data = {b: mem[b][int(getattr(dut, f"{b}_rd__addr").value)] for b in reads}
        for b in WRITES:
            if int(getattr(dut, f"{b}_wr__en").value):
                mem[b][int(getattr(dut, f"{b}_wr__addr").value)] = int(
                    getattr(dut, f"{b}_wr__data").value
                )
        await RisingEdge(dut.clk)
        for b, value in data.items():
            getattr(dut, f"{b}_rd__data").value = value


@cocotb.test()
async def program_matches_model(dut):
    with open(os.environ["TF_CORE_CASE"]) as f:
        case = json.load(f)
    mem = {b: [int(w) for w in words] for b, words in case["srams"].items()}
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    cocotb.start_soon(serve_srams(dut, mem, case["reads"]))
    dut.insn__valid.value = 0
    dut.rst.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0

    await FallingEdge(dut.clk)
    for i, (word, expected) in enumerate(zip(case["insns"], case["cycles"], strict=True)):
        assert int(dut.insn__ready.value) == 1, f"instruction {i}: core not idle"
        dut.insn__payload.value = int(word)
        dut.insn__valid.value = 1
        await RisingEdge(dut.clk)  # accepted at this edge
        cycles = 1
        await FallingEdge(dut.clk)
        dut.insn__valid.value = 0
        while not int(dut.insn__ready.value):
            await FallingEdge(dut.clk)
            cycles += 1
        assert cycles == expected, f"instruction {i}: {cycles} cycles, expected {expected}"
    for _ in range(2):
        await RisingEdge(dut.clk)
    for b in WRITES:
        want = [int(w) for w in case["expected"][b]]
        bad = [r for r, (g, w) in enumerate(zip(mem[b], want, strict=True)) if g != w]
        assert not bad, f"{b.upper()} rows differ from the numpy model: {bad[:10]}"

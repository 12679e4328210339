"""Amaranth-simulator harness for the compute blocks: SRAMs around a core, issuing insns."""

from __future__ import annotations

import numpy as np
from amaranth.hdl import Elaboratable, MemoryData, Module, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator
from core_models import Srams, pack, unpack

from tensorforge.hw.config import HWConfig
from tensorforge.hw.isa import encode_word


class SramHarness(Elaboratable):
    """A core with each of its ``<buf>_rd`` / ``<buf>_wr`` ports wired to an SRAM.

    Read ports return the old row on a same-cycle write (read-first), or the new row
    (write-first) with ``write_first``.
    """

    def __init__(self, dut: wiring.Component, srams: Srams, write_first: bool = False) -> None:
        self.dut = dut
        self.write_first = write_first
        self.bufs = sorted({name.split("_")[0] for name in dut.signature.members
                            if name.endswith(("_rd", "_wr"))})  # fmt: skip
        self.mems = {}
        for buf in self.bufs:
            port = getattr(dut, f"{buf}_rd", None) or getattr(dut, f"{buf}_wr")
            width = len(port.data)
            arr = srams.arrays[buf]
            init = [int(w) for w in arr] if buf == "uop" else [pack(r, buf) for r in arr]
            self.mems[buf] = MemoryData(shape=unsigned(width), depth=len(arr), init=init)

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.dut = self.dut
        for buf in self.bufs:
            mem = m.submodules[f"{buf}_mem"] = Memory(self.mems[buf])
            members = self.dut.signature.members
            wr = mem.write_port() if f"{buf}_wr" in members else None
            if wr is not None:
                wiring.connect(m, getattr(self.dut, f"{buf}_wr"), wr)
            if f"{buf}_rd" in members:
                transparent = (wr,) if self.write_first and wr is not None else ()
                rd = mem.read_port(transparent_for=transparent)
                wiring.connect(m, getattr(self.dut, f"{buf}_rd"), rd)
        return m


def read_back(ctx, harness: SramHarness, cfg: HWConfig, buf: str) -> np.ndarray:
    mem = harness.mems[buf]
    return np.stack([unpack(ctx.get(mem[i]), cfg, buf) for i in range(mem.depth)])


async def run_insn(ctx, dut: wiring.Component, insn, cfg: HWConfig,
                   errors: list[int] | None = None) -> int:  # fmt: skip
    """Issue one instruction; return the cycles from its acceptance until ``ready`` again.
    With ``errors``, append the cycle (counted the same way) of each ``range_error`` pulse."""
    assert ctx.get(dut.insn.ready), "the core must be idle before an instruction is issued"
    ctx.set(dut.insn.payload.as_value(), encode_word(insn, cfg))
    ctx.set(dut.insn.valid, 1)
    await ctx.tick()
    ctx.set(dut.insn.valid, 0)
    cycles = 1
    while True:
        if errors is not None and ctx.get(dut.range_error):
            errors.append(cycles)
        if ctx.get(dut.insn.ready):
            return cycles
        await ctx.tick()
        cycles += 1
        assert cycles < 100_000, "the core did not finish"


def simulate(harness: SramHarness, testbench, vcd: str | None = None) -> None:
    sim = Simulator(harness)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()

"""RegBlock in the Amaranth simulator against sim/regblock.py's RegisterBlockModel, register by
register, with a scripted core answering ``start`` with ``done`` or ``error``."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator
from axi_models import axil_read, axil_write

from tensorforge.hw.config import HWConfig
from tensorforge.hw.core.regblock import RegBlock
from tensorforge.hw.isa import IsaError
from tensorforge.hw.regmap import REGISTERS, Ctrl, Status
from tensorforge.sim.functional import DeadlockError, DepFlagError, DramRangeError, SramRangeError
from tensorforge.sim.regblock import RegisterBlockModel

# What the scripted core does on its n-th start: ("done", cycles) or ("error", Status).
_ERRORS = {
    Status.BAD_OPCODE: IsaError("bad opcode"),
    Status.SRAM_RANGE: SramRangeError("sram range"),
    Status.BAD_FLAGS: DepFlagError("bad flags"),
    Status.AXI_ERROR: DramRangeError("dram range"),
}


class ScriptedCore:
    """Plays the core for both sides: ``execute`` for the model, ``run`` for the RTL."""

    def __init__(self, script: list[tuple[str, object]]) -> None:
        self.script = script
        self.model_calls: list[tuple[int, int]] = []

    def execute(self, addr: int, count: int) -> int:
        kind, arg = self.script[len(self.model_calls)]
        self.model_calls.append((addr, count))
        if kind == "error":
            raise _ERRORS[arg]
        if kind == "hang":
            raise DeadlockError("deadlock")
        return arg

    async def run(self, ctx, dut: RegBlock, rtl_calls: list[tuple[int, int]]) -> None:
        while True:
            _, _, start, addr, count = await ctx.tick().sample(
                dut.start, dut.insn_addr, dut.insn_count
            )
            if not start:
                continue
            kind, arg = self.script[len(rtl_calls)]
            rtl_calls.append((int(addr), int(count)))
            if kind == "hang":
                continue
            # start was high in the cycle just sampled (s); answer in cycle s + cycles.
            cycles = arg if kind == "done" else 3
            if cycles > 1:
                await ctx.tick().repeat(cycles - 1)
            ctx.set(dut.error if kind == "error" else dut.done, 1)
            if kind == "error":
                ctx.set(dut.error_status, arg)
            await ctx.tick()
            ctx.set(dut.done, 0)
            ctx.set(dut.error, 0)


def run_session(cfg: HWConfig, ops: list[tuple], script: list[tuple[str, object]]) -> list:
    """Apply ``ops`` (("w", offset, value) or ("settle",)) to the RTL and the model; after each,
    read every register from both. Returns the mismatches."""
    dut = RegBlock(cfg)
    core = ScriptedCore(script)
    model = RegisterBlockModel(cfg, core.execute)
    rtl_calls: list[tuple[int, int]] = []
    mismatches = []

    async def bench(ctx):
        for i, op in enumerate(ops):
            if op[0] == "w":
                await axil_write(ctx, dut.s_axil, op[1], op[2])
                model.write32(op[1], op[2])
            await ctx.tick().repeat(op[3] if len(op) > 3 else 40)  # let the core answer
            for name, reg in REGISTERS.items():
                got, want = await axil_read(ctx, dut.s_axil, reg.offset), model.read32(reg.offset)
                if got != want:
                    mismatches.append((i, op, name, hex(got), hex(want)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)

    async def core_process(ctx):
        await core.run(ctx, dut, rtl_calls)

    sim.add_testbench(core_process, background=True)
    sim.run()
    assert rtl_calls == core.model_calls, "the RTL and the model launched different programs"
    return mismatches


def off(name: str) -> int:
    return REGISTERS[name].offset


def test_identity_registers_read_the_regmap_constants():
    for preset in ("tiny", "pynq"):
        assert run_session(HWConfig.preset(preset), [("settle",)], []) == []


def test_launch_sequences_match_the_model():
    cfg = HWConfig.preset("tiny")
    start = ("w", off("CTRL"), int(Ctrl.START))
    ops = [
        ("w", off("INSN_ADDR_LO"), 0x1234_5670),
        ("w", off("INSN_ADDR_HI"), 0x1),
        ("w", off("INSN_COUNT"), 7),
        start,  # done after 17 cycles
        ("w", off("INSN_COUNT"), 9),
        start,  # error SRAM_RANGE
        start,  # done after 1 cycle (DONE and ERROR cleared)
        ("w", off("CTRL"), 0),  # a CTRL write without START does nothing
        ("w", off("HW_ID"), 0),  # read-only registers ignore writes
        ("w", off("CYCLES_LO"), 5),
        ("w", off("STATUS"), 2),
        start,  # error BAD_OPCODE
        ("w", off("INSN_ADDR_LO"), 0xFFFF_FFF0),
        start,  # done after 300 cycles
        start,  # hang: BUSY forever
        ("w", off("INSN_COUNT"), 3),
        start,  # ignored while BUSY
    ]
    script = [("done", 17), ("error", Status.SRAM_RANGE), ("done", 1),
              ("error", Status.BAD_OPCODE), ("done", 300), ("hang", None)]  # fmt: skip
    ops[13] = (*start, 320)
    assert run_session(cfg, ops, script) == []


@pytest.mark.parametrize("seed", [1, 2])
def test_random_register_traffic_matches_the_model(seed):
    rng = np.random.default_rng(seed)
    cfg = HWConfig.preset("tiny")
    names = list(REGISTERS)
    ops, script = [], []
    for _ in range(25):
        name = names[rng.integers(len(names))] if rng.random() < 0.7 else "CTRL"
        value = int(rng.integers(0, 2**32))
        if name == "CTRL" and rng.random() < 0.7:
            value |= int(Ctrl.START)
        if name == "CTRL" and value & Ctrl.START:
            errors = list(_ERRORS)
            script.append(("done", int(rng.integers(1, 30))) if rng.random() < 0.6
                          else ("error", errors[rng.integers(len(errors))]))  # fmt: skip
        ops.append(("w", off(name), value))
    assert run_session(cfg, ops, script) == []


def test_write_strobes_select_bytes():
    cfg = HWConfig.preset("tiny")
    dut = RegBlock(cfg)

    async def bench(ctx):
        await axil_write(ctx, dut.s_axil, off("INSN_COUNT"), 0x1122_3344)
        await axil_write(ctx, dut.s_axil, off("INSN_COUNT"), 0xAABB_CCDD, strb=0b0101)
        assert await axil_read(ctx, dut.s_axil, off("INSN_COUNT")) == 0x11BB_33DD
        await axil_write(ctx, dut.s_axil, off("CTRL"), int(Ctrl.START), strb=0b0010)
        assert await axil_read(ctx, dut.s_axil, off("CTRL")) == 0  # START's byte not strobed
        assert await axil_read(ctx, dut.s_axil, 0x3C) == 0  # unmapped offset

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()

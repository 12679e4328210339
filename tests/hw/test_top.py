"""The whole accelerator (hw/core/top.py) in the Amaranth simulator: programs placed by the
runtime, launched through the AXI-Lite registers; DRAM bit-exact against sim/functional.py and
CYCLES equal to sim/timing.py's total for the same placement and DRAM latencies."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator
from axi_models import AxiMemory, axil_read, axil_write

from tensorforge.demo import build_matmul, pack_inp, unpack_out
from tensorforge.hw.config import HWConfig
from tensorforge.hw.core.top import Top
from tensorforge.hw.isa import (
    AluInsn,
    AluOp,
    FinishInsn,
    GemmInsn,
    MemInsn,
    MemType,
    Opcode,
    Uop,
    encode_word,
)
from tensorforge.hw.regmap import REGISTERS, Ctrl, Status
from tensorforge.runtime.device.vta.base import LoadedProgram
from tensorforge.runtime.device.vta.cyclesim import CycleSimDevice
from tensorforge.runtime.program import UOP_BLOB, ProgramBuilder
from tensorforge.sim.functional import FunctionalSim
from tensorforge.sim.latency import TimingParams
from tensorforge.sim.memory import DeviceMemory
from tensorforge.sim.regblock import RegisterBlockModel
from tensorforge.sim.timing import simulate_timing

MEMORY_BYTES = 1 << 20
PORTS = ("fetch", "load", "compute", "store")


def reg(name: str) -> int:
    return REGISTERS[name].offset


def run_top(cfg: HWConfig, dram: np.ndarray, base: int, insn_addr: int, count: int,
            p: TimingParams, launches: int = 1, limit: int = 200_000) -> list[dict]:  # fmt: skip
    """Launch a program ``launches`` times on the RTL through the register block; DRAM is
    ``dram`` (modified in place). Returns CTRL, STATUS and CYCLES of each launch."""
    top = Top(cfg, burst_beats=p.burst_beats)
    mems = {
        port: AxiMemory(dram, p.dram_read_latency, p.dram_write_latency, p.bus_bytes, base)
        for port in PORTS
    }
    outs: list[dict[str, int]] = []

    async def bench(ctx):
        bus = top.s_axil
        for _ in range(launches):
            await axil_write(ctx, bus, reg("INSN_ADDR_LO"), insn_addr & 0xFFFF_FFFF)
            await axil_write(ctx, bus, reg("INSN_ADDR_HI"), insn_addr >> 32)
            await axil_write(ctx, bus, reg("INSN_COUNT"), count)
            await axil_write(ctx, bus, reg("CTRL"), int(Ctrl.START))
            for _ in range(limit // 50):
                ctrl = await axil_read(ctx, bus, reg("CTRL"))
                if ctrl & (Ctrl.DONE | Ctrl.ERROR):
                    break
                await ctx.tick().repeat(50)
            out = {"ctrl": ctrl}
            for name in ("STATUS", "CYCLES_LO", "CYCLES_HI"):
                out[name.lower()] = await axil_read(ctx, bus, reg(name))
            out["cycles"] = out.pop("cycles_hi") << 32 | out.pop("cycles_lo")
            outs.append(out)

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    for port, mem in mems.items():
        axi = getattr(top, f"m_axi_{port}")
        serve = mem.serve_writes if port == "store" else mem.serve_reads

        async def process(ctx, serve=serve, axi=axi):
            await serve(ctx, axi)

        sim.add_testbench(process, background=True)
    sim.run()
    return outs


def check_image(image, inputs: dict, p: TimingParams, launches: int = 1) -> dict:
    """Place ``image`` with the runtime, run it on cyclesim and on the RTL, compare DRAM (every
    byte) and cycles. Output slots start with garbage, so every output byte must be written.
    With ``launches`` > 1 the RTL runs the program again on its own state (the image must be
    idempotent). Returns the RTL's output slots."""
    cfg = image.config
    device = CycleSimDevice(cfg, MEMORY_BYTES, timing=p)
    prog = LoadedProgram.load(device, image)
    rng = np.random.default_rng(0)
    for slot in image.slots:
        if slot.kind == "output":
            info = np.iinfo(slot.dtype)
            prog.write(slot.name, rng.integers(info.min, info.max, slot.shape, slot.dtype))
    for name, array in inputs.items():
        prog.write(name, array)
    base = device.memory.base
    before = device.memory.view(base, MEMORY_BYTES).copy()
    result = device.run(prog.insn_block, image.insn_count)
    after = device.memory.view(base, MEMORY_BYTES)

    rtl = before.copy()
    runs = run_top(cfg, rtl, base, prog.insn_block.addr, image.insn_count, p, launches)
    for got in runs:
        assert got["ctrl"] == Ctrl.DONE and got["status"] == 0, got
        assert got["cycles"] == result.cycles, (
            f"CYCLES {got['cycles']} != sim/timing.py's {result.cycles}"
        )
    diff = np.flatnonzero(rtl != after)
    assert not diff.size, f"DRAM differs from sim/functional.py at {base + diff[:8]}"
    outputs = {}
    for slot in image.slots:
        if slot.kind == "output":
            lo = prog.buffers[slot.name].addr - base
            raw = rtl[lo : lo + slot.nbytes]
            outputs[slot.name] = raw.view(slot.dtype).reshape(slot.shape)
    return outputs


@pytest.mark.parametrize(
    ("preset", "m", "k", "n", "tile_rows", "latency"),
    [("tiny", 2, 8, 8, None, 6), ("tiny", 4, 8, 12, 1, 6), ("pynq", 3, 32, 32, 1, 24)],
)
def test_matmul_is_bit_exact_and_cycle_exact(preset, m, k, n, tile_rows, latency):
    cfg = HWConfig.preset(preset)
    kernel = build_matmul(cfg, m, k, n, shift=4, tile_rows=tile_rows, seed=m + n)
    p = TimingParams.for_config(cfg, dram_read_latency=latency, dram_write_latency=latency // 2)
    outputs = check_image(kernel.image, {"A": pack_inp(cfg, kernel.a)}, p, launches=2)
    np.testing.assert_array_equal(unpack_out(cfg, outputs["C"]), kernel.reference())


def hand_program(cfg: HWConfig, rng: np.random.Generator):
    """Every instruction type: padded INP loads, WGT, UOP, ACC and ACC_8BIT loads, GEMM with
    reset, every ALU op (immediate and ACC operands, chained hazards), STORE, and the four token
    queues (l2g, g2l, g2s, s2g)."""
    bi, bo, bt = cfg.block_in, cfg.block_out, cfg.batch
    b = ProgramBuilder(cfg, name="every_insn")
    b.slot("X", "input", (2, 3, bt, bi))
    b.slot("O", "output", (12, bt, bo))
    b.blob("W", rng.integers(-128, 128, (3, bo, bi), dtype=np.int8))
    b.blob("A8", rng.integers(-128, 128, (4, bt, bo), dtype=np.int8))
    b.blob("A32", rng.integers(-(1 << 20), 1 << 20, (4, bt, bo), dtype=np.int32))
    every = b.add_uops([Uop(i, 0, 0) for i in range(12)])
    pairs = b.add_uops([Uop(i, 11 - i, 0) for i in range(12)])
    gemm = b.add_uops([Uop(i, 6 + i, i % 3) for i in range(4)])  # padded tile rows 1..2
    late = b.add_uops([Uop(i, 20 + i % 2, (i + 1) % 3) for i in range(4)])
    n = len(b.uops)
    L, S = Opcode.LOAD, Opcode.STORE
    b.emit(MemInsn(L, MemType.UOP, 0, 0, 1, n, n), reloc=UOP_BLOB)
    b.emit(MemInsn(L, MemType.ACC_8BIT, 4, 0, 1, 4, 4), reloc="A8")
    b.emit(MemInsn(L, MemType.ACC, 8, 0, 2, 2, 2), reloc="A32")
    b.emit(MemInsn(L, MemType.WGT, 0, 0, 1, 3, 3), reloc="W")
    b.emit(MemInsn(L, MemType.INP, 0, 0, 2, 3, 3, 1, 1, 1, 1, push_next=True), reloc="X")
    b.emit(GemmInsn(reset_reg=True, uop_bgn=every, uop_end=every + 4, pop_prev=True))
    b.emit(GemmInsn(uop_bgn=gemm, uop_end=gemm + 4, iter_out=2, src_factor_out=1,
                    push_prev=True))  # fmt: skip
    b.emit(MemInsn(L, MemType.INP, 20, 4, 1, 2, 2, pop_next=True, push_next=True), reloc="X")
    b.emit(GemmInsn(uop_bgn=late, uop_end=late + 4, pop_prev=True))
    ops = [(AluOp.ADD, False, 0), (AluOp.MUL, True, -3), (AluOp.SHR, True, 3),
           (AluOp.SHR, True, -2), (AluOp.MAX, False, 0), (AluOp.MIN, True, 20000),
           (AluOp.MAX, True, -20000), (AluOp.MIN, False, 0), (AluOp.ADD, True, 77),
           (AluOp.SHR, True, 6)]  # fmt: skip
    for op, use_imm, imm in ops:
        uop = pairs if not use_imm else every
        b.emit(AluInsn(uop_bgn=uop, uop_end=uop + 12, alu_opcode=op, use_imm=use_imm, imm=imm))
    b.emit(AluInsn(reset_reg=True, uop_bgn=every + 10, uop_end=every + 12, push_next=True))
    b.emit(MemInsn(S, MemType.OUT, 0, 0, 2, 6, 6, pop_prev=True, push_prev=True), reloc="O")
    b.emit(FinishInsn(pop_next=True))
    return b.build()


@pytest.mark.parametrize("preset", ["tiny", "pynq"])
def test_every_instruction_type_is_bit_exact_and_cycle_exact(preset):
    cfg = HWConfig.preset(preset)
    rng = np.random.default_rng(5)
    image = hand_program(cfg, rng)
    x = rng.integers(-128, 128, (2, 3, cfg.batch, cfg.block_in), dtype=np.int8)
    p = TimingParams.for_config(cfg, dram_read_latency=9, dram_write_latency=4)
    check_image(image, {"X": x}, p)


def test_undefined_opcode_stops_with_bad_opcode_like_the_model():
    cfg = HWConfig.preset("tiny")
    words = [encode_word(GemmInsn(uop_end=0), cfg), 7, encode_word(FinishInsn(), cfg)]
    dram = np.zeros(4096, dtype=np.uint8)
    for i, w in enumerate(words):
        dram[256 + 16 * i : 256 + 16 * (i + 1)] = list(w.to_bytes(16, "little"))
    memory = DeviceMemory(4096, base=0)
    memory.write(0, dram)
    model = RegisterBlockModel(cfg, FunctionalSim(cfg, memory).run)
    model.write32(reg("INSN_ADDR_LO"), 256)
    model.write32(reg("INSN_COUNT"), 3)
    model.write32(reg("CTRL"), int(Ctrl.START))
    (got,) = run_top(cfg, dram, 0, 256, 3, TimingParams.for_config(cfg))
    assert got["ctrl"] == model.read32(reg("CTRL")) == Ctrl.ERROR
    assert got["status"] == model.read32(reg("STATUS")) == Status.BAD_OPCODE
    assert got["cycles"] == model.read32(reg("CYCLES_LO")) == 0


def test_full_token_queues_stall_pushes_as_in_the_model():
    """dep_queue_depth = 1: each LOAD's push waits for compute's previous pop; a slow GEMM
    first makes every push stall (load_stall_push > 0 in the model)."""
    cfg = HWConfig.preset("tiny").replace(dep_queue_depth=1, insn_queue_depth=4)
    b = ProgramBuilder(cfg, name="token_stall")
    b.slot("X", "input", (3, cfg.batch, cfg.block_in))
    one = b.add_uops([Uop(0, 0, 0)])
    b.emit(MemInsn(Opcode.LOAD, MemType.UOP, 0, 0, 1, 1, 1), reloc=UOP_BLOB)
    b.emit(GemmInsn(uop_bgn=one, uop_end=one + 1, iter_out=40))
    for i in range(3):
        b.emit(MemInsn(Opcode.LOAD, MemType.INP, i, i, 1, 1, 1, push_next=True), reloc="X")
        b.emit(GemmInsn(uop_bgn=one, uop_end=one + 1, iter_in=3, src_factor_in=1, pop_prev=True))
    b.emit(FinishInsn())
    image = b.build()
    p = TimingParams.for_config(cfg, dram_read_latency=5)
    counters = simulate_timing(image.instructions(), cfg, p).counters()
    assert counters["load_stall_push"] > 0, "the program must make pushes wait"
    x = np.random.default_rng(1).integers(-128, 128, (3, cfg.batch, cfg.block_in), np.int8)
    check_image(image, {"X": x}, p)

# amaranth: UnusedElaboratable=no
"""LoadDma and StoreDma in the Amaranth simulator against sim/functional.py (bit-exact SRAM and
DRAM images) and sim/latency.py (cycles per instruction, bursts), behind an AXI memory model
with sim/latency.py's DRAM latencies."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, MemoryData, Module, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator
from axi_models import AxiMemory
from core_models import pack, unpack

from tensorforge.hw.config import HWConfig
from tensorforge.hw.core.load import LoadDma
from tensorforge.hw.core.store import StoreDma
from tensorforge.hw.isa import MemInsn, MemType, Opcode, elem_bytes, encode_word
from tensorforge.sim.functional import FunctionalSim, SimStats, SramRangeError
from tensorforge.sim.latency import TimingParams, dma_bursts, load_cycles, store_cycles
from tensorforge.sim.memory import DeviceMemory

DRAM_BYTES = 1 << 16
# memory type -> the functional simulator's SRAM attribute (and core_models' buffer name)
BUF = {MemType.UOP: "uop", MemType.INP: "inp", MemType.WGT: "wgt", MemType.ACC: "acc",
       MemType.ACC_8BIT: "acc", MemType.OUT: "out"}  # fmt: skip


class DmaHarness(Elaboratable):
    """A DMA engine with its SRAM port wired to an SRAM holding ``words``."""

    def __init__(self, dut: wiring.Component, port: str, words: list[int]) -> None:
        self.dut, self.port = dut, port
        width = len(getattr(dut, port).data)
        self.mem = MemoryData(shape=unsigned(width), depth=len(words), init=words)

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.dut = self.dut
        mem = m.submodules.mem = Memory(self.mem)
        port = mem.write_port() if self.port.endswith("_wr") else mem.read_port()
        wiring.connect(m, getattr(self.dut, self.port), port)
        return m


def sram_words(fsim: FunctionalSim, buf: str) -> list[int]:
    arr = getattr(fsim, buf)
    return [int(w) for w in arr] if buf == "uop" else [pack(r, buf) for r in arr]


def new_fsim(cfg: HWConfig, rng: np.random.Generator) -> FunctionalSim:
    """A functional simulator with random DRAM and random SRAMs."""
    dram = DeviceMemory(DRAM_BYTES, base=0)
    dram.write(0, rng.integers(0, 256, DRAM_BYTES, dtype=np.uint8))
    fsim = FunctionalSim(cfg, dram)
    for buf in ("inp", "wgt", "acc", "out"):
        arr = getattr(fsim, buf)
        info = np.iinfo(arr.dtype)
        arr[...] = rng.integers(info.min, info.max, arr.shape, endpoint=True)
    fsim.uop[...] = rng.integers(0, 2**32, fsim.uop.shape)
    return fsim


def random_transfer(rng, cfg: HWConfig, mt: MemType, opcode: Opcode, depth: int) -> MemInsn:
    """A random LOAD/STORE that fits SRAM and DRAM, often crossing burst boundaries."""
    eb = elem_bytes(cfg, mt)
    pad = opcode == Opcode.LOAD and rng.random() < 0.7
    y_pad_0, y_pad_1, x_pad_0, x_pad_1 = (int(rng.integers(0, 3)) if pad else 0 for _ in "abcd")
    y_size, x_size = int(rng.integers(1, 5)), int(rng.integers(1, 7))
    x_stride = x_size if rng.random() < 0.3 else x_size + int(rng.integers(0, 40))
    tile = (y_pad_0 + y_size + y_pad_1) * (x_pad_0 + x_size + x_pad_1)
    span = (y_size - 1) * x_stride + x_size
    return MemInsn(
        opcode=opcode, memory_type=mt, sram_base=int(rng.integers(0, depth - tile + 1)),
        dram_base=int(rng.integers(0, DRAM_BYTES // eb - span + 1)), y_size=y_size,
        x_size=x_size, x_stride=x_stride, y_pad_0=y_pad_0, y_pad_1=y_pad_1, x_pad_0=x_pad_0,
        x_pad_1=x_pad_1,
    )  # fmt: skip


def run_dma(cfg, mt, insns, fsim, params: TimingParams, store: bool = False, errors=None):
    """Run ``insns`` back to back on the RTL (SRAM and DRAM from ``fsim``) and, unless
    ``errors`` is a list, the functional simulator; return (RTL cycles per insn, RTL SRAM words,
    memory model). A list ``errors`` gets the index of each insn that pulsed ``range_error``."""
    buf = BUF[mt]
    bursts = params.burst_beats
    dut = StoreDma(cfg, burst_beats=bursts) if store else LoadDma(cfg, mt, burst_beats=bursts)
    harness = DmaHarness(dut, "sram_rd" if store else "sram_wr", sram_words(fsim, buf))
    memory = AxiMemory(fsim.memory.view(0, DRAM_BYTES).copy(), params.dram_read_latency,
                       params.dram_write_latency, params.bus_bytes,
                       max_reads=params.max_outstanding_reads)  # fmt: skip
    cycles: list[int] = []

    async def bench(ctx):
        for insn in insns:
            assert ctx.get(dut.cmd.ready), "the engine must be idle between instructions"
            ctx.set(dut.cmd.payload.as_value(), encode_word(insn, cfg))
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick()
            ctx.set(dut.cmd.valid, 0)
            n = 1
            while True:
                if errors is not None and ctx.get(dut.range_error):
                    errors.append(len(cycles))
                if ctx.get(dut.cmd.ready):
                    break
                await ctx.tick()
                n += 1
                assert n < 20_000, f"{insn} did not finish"
            cycles.append(n)
        await ctx.tick()
        words.extend(ctx.get(harness.mem[i]) for i in range(harness.mem.depth))

    async def axi(ctx):
        if store:
            await memory.serve_writes(ctx, dut.axi)
        else:
            await memory.serve_reads(ctx, dut.axi)

    words: list[int] = []
    sim = Simulator(harness)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(axi, background=True)
    sim.run()
    for i, insn in enumerate(insns):
        if errors is None:
            fsim.exec_insn(insn, i, SimStats())
    return cycles, words, memory


def expected_cycles(insn: MemInsn, cfg: HWConfig, p: TimingParams) -> int:
    if insn.opcode == Opcode.STORE:
        return store_cycles(insn, cfg, p)
    return load_cycles(insn, cfg, p)


def check_against_models(cfg, mt, insns, fsim, p, store=False):
    cycles, words, memory = run_dma(cfg, mt, insns, fsim, p, store)
    buf = BUF[mt]
    want = sram_words(fsim, buf)
    bad = [i for i, (g, w) in enumerate(zip(words, want, strict=True)) if g != w]
    assert not bad, f"{buf.upper()} rows differ from sim/functional.py: {bad[:8]}" + (
        f" row {bad[0]}: {unpack(words[bad[0]], cfg, buf)} != {unpack(want[bad[0]], cfg, buf)}"
        if buf != "uop"
        else ""
    )
    dram = fsim.memory.view(0, DRAM_BYTES)
    diff = np.flatnonzero(memory.data != dram)
    assert not diff.size, f"DRAM bytes differ from sim/functional.py at {diff[:8]}"
    want_cycles = [expected_cycles(insn, cfg, p) for insn in insns]
    assert cycles == want_cycles, "cycles differ from sim/latency.py"
    transfers = memory.writes if store else memory.reads
    eb = elem_bytes(cfg, mt)
    assert len(transfers) == sum(dma_bursts(insn, eb, p) for insn in insns)
    return memory


LOAD_TYPES = [MemType.INP, MemType.WGT, MemType.UOP, MemType.ACC, MemType.ACC_8BIT]


@pytest.mark.parametrize("mt", LOAD_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("preset", ["tiny", "pynq"])
def test_load_matches_functional_and_timing(preset, mt):
    cfg = HWConfig.preset(preset)
    rng = np.random.default_rng([int(mt), len(preset)])
    fsim = new_fsim(cfg, rng)
    depth = len(getattr(fsim, BUF[mt]))
    insns = [random_transfer(rng, cfg, mt, Opcode.LOAD, min(depth, 256)) for _ in range(6)]
    p = TimingParams.for_config(cfg, dram_read_latency=int(rng.integers(1, 12)))
    check_against_models(cfg, mt, insns, fsim, p)


@pytest.mark.parametrize("preset", ["tiny", "pynq"])
def test_store_matches_functional_and_timing(preset):
    cfg = HWConfig.preset(preset)
    rng = np.random.default_rng(7 + len(preset))
    fsim = new_fsim(cfg, rng)
    insns = [random_transfer(rng, cfg, MemType.OUT, Opcode.STORE, 256) for _ in range(8)]
    p = TimingParams.for_config(cfg, dram_write_latency=int(rng.integers(1, 12)))
    check_against_models(cfg, MemType.OUT, insns, fsim, p, store=True)


def test_engine_parameters_are_checked():
    cfg = HWConfig.preset("tiny")
    with pytest.raises(ValueError, match=r"memory_type must be UOP, INP, WGT, ACC or ACC_8BIT"):
        LoadDma(cfg, MemType.OUT)
    with pytest.raises(ValueError, match=r"burst_beats must be an int in \[1, 256\], not 0"):
        StoreDma(cfg, burst_beats=0)
    with pytest.raises(TypeError, match=r"cfg must be a HWConfig, not 'tiny'"):
        LoadDma("tiny", MemType.INP)


def test_short_bursts_still_match_the_models():
    """burst_beats = 2: many bursts per row, each paying the DRAM latency."""
    cfg = HWConfig.preset("tiny")
    rng = np.random.default_rng(3)
    fsim = new_fsim(cfg, rng)
    insns = [random_transfer(rng, cfg, MemType.WGT, Opcode.LOAD, 256) for _ in range(4)]
    p = TimingParams.for_config(cfg, burst_beats=2, dram_read_latency=3)
    check_against_models(cfg, MemType.WGT, insns, fsim, p)
    insns = [random_transfer(rng, cfg, MemType.OUT, Opcode.STORE, 256) for _ in range(4)]
    p = TimingParams.for_config(cfg, burst_beats=2, dram_write_latency=2)
    check_against_models(cfg, MemType.OUT, insns, fsim, p, store=True)


@pytest.mark.parametrize("outstanding", [2, 4])
@pytest.mark.parametrize("mt", LOAD_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("preset", ["tiny", "pynq"])
def test_loads_with_bursts_in_flight_match_the_models(preset, mt, outstanding):
    """Several read bursts in flight: short bursts (many per transfer) and random latencies;
    SRAM bit-exact with sim/functional.py, cycles equal to sim/latency.py's, and the engine
    really overlaps (an AR before the previous burst's data is all in) and never has more than
    ``outstanding`` bursts out (the memory model would stall it: the cycles would differ)."""
    cfg = HWConfig.preset(preset).replace(max_outstanding_reads=outstanding)
    rng = np.random.default_rng([int(mt), len(preset), outstanding])
    fsim = new_fsim(cfg, rng)
    depth = len(getattr(fsim, BUF[mt]))
    insns = [random_transfer(rng, cfg, mt, Opcode.LOAD, min(depth, 256)) for _ in range(5)]
    beats = 2 if mt == MemType.WGT and preset == "pynq" else 4
    p = TimingParams.for_config(cfg, burst_beats=beats, dram_read_latency=int(rng.integers(1, 9)))
    memory = check_against_models(cfg, mt, insns, fsim, p)
    ars = [cycle for cycle, _, _ in memory.reads]
    assert any(b - a == 1 for a, b in zip(ars, ars[1:], strict=False)), "no AR back to back"
    one = TimingParams.for_config(cfg.replace(max_outstanding_reads=1), burst_beats=beats,
                                  dram_read_latency=p.dram_read_latency)  # fmt: skip
    assert sum(load_cycles(i, cfg, p) for i in insns) < sum(load_cycles(i, cfg, one) for i in insns)


@pytest.mark.parametrize("mt", [MemType.INP, MemType.ACC_8BIT, MemType.OUT], ids=lambda t: t.name)
def test_transfers_beyond_the_sram_are_skipped_with_range_error(mt):
    """sim/functional.py's check: ``sram_base + (y_pad_0 + y_size + y_pad_1) * (x_pad_0 +
    x_size + x_pad_1)`` (a STORE: ``sram_base + y_size * x_size``) must not pass the depth. Such
    a transfer takes one cycle, moves nothing and pulses ``range_error`` the cycle after."""
    cfg = HWConfig.preset("tiny")
    fsim = new_fsim(cfg, np.random.default_rng(int(mt)))
    depth, store = len(getattr(fsim, BUF[mt])), mt == MemType.OUT
    pads = () if store else (0, 1)  # a LOAD's padding counts: here one row below the data
    opcode = Opcode.STORE if store else Opcode.LOAD
    end = depth + 1
    insn = MemInsn(opcode, mt, end - (4 if store else 6), 0, 2, 2, 2, *pads)
    with pytest.raises(SramRangeError, match=rf"indices \[{insn.sram_base}, {end}\) exceed"):
        fsim.exec_insn(insn, 0, SimStats())
    before = sram_words(fsim, BUF[mt])
    errors: list[int] = []
    cycles, words, memory = run_dma(cfg, mt, [insn], fsim, TimingParams.for_config(cfg), store,
                                    errors)  # fmt: skip
    assert (errors, cycles) == ([0], [1])
    assert not memory.reads and not memory.writes and words == before
    assert np.array_equal(memory.data, fsim.memory.view(0, DRAM_BYTES))

"""The whole accelerator (hw/core/top.py) in the Amaranth simulator: programs placed by the
runtime, launched through the AXI-Lite registers; DRAM bit-exact against sim/functional.py and
CYCLES equal to sim/timing.py's total for the same placement and DRAM latencies."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, ResetInserter, Signal
from amaranth.sim import Simulator
from axi_models import AxiMemory, axil_read, axil_write
from programs import hand_inputs, hand_program

from tensorforge.demo import build_matmul, pack_inp, unpack_out
from tensorforge.hw.config import HWConfig
from tensorforge.hw.core.top import Top
from tensorforge.hw.isa import (
    AluInsn,
    FinishInsn,
    GemmInsn,
    Insn,
    MemInsn,
    MemType,
    Opcode,
    Stage,
    Uop,
    encode_uops,
    encode_word,
    layouts,
    stage_of,
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
TINY = HWConfig.preset("tiny")
PORTS = ("fetch", "load", "compute", "store")


def reg(name: str) -> int:
    return REGISTERS[name].offset


class ResettableTop(Elaboratable):
    """``Top`` with a synchronous reset the testbench drives (``rst``); the AXI models are left
    alone (a reset of the ``sync`` domain would interrupt their waits)."""

    def __init__(self, top: Top) -> None:
        self.top = top
        self.rst = Signal()

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.top = ResetInserter(self.rst)(self.top)
        return m


def run_top(cfg: HWConfig, dram: np.ndarray, base: int, insn_addr: int, count: int,
            p: TimingParams, launches: int = 1, limit: int = 200_000,
            images: list[tuple[np.ndarray, int]] | None = None) -> list[dict]:  # fmt: skip
    """Launch a program ``launches`` times on the RTL through the register block; DRAM is
    ``dram`` (modified in place). With ``images`` (DRAM contents and instruction count), launch
    once per image instead: ``dram`` becomes the image and the core is reset first. Returns
    CTRL, STATUS and CYCLES of each launch."""
    top = Top(cfg, burst_beats=p.burst_beats)
    harness = ResettableTop(top)
    mems = {
        port: AxiMemory(
            dram,
            p.dram_read_latency,
            p.dram_write_latency,
            p.bus_bytes,
            base,
            max_reads=1 if port == "fetch" else p.max_outstanding_reads,  # fetch: one at a time
        )
        for port in PORTS
    }
    outs: list[dict[str, int]] = []

    async def bench(ctx):
        bus = top.s_axil
        n = count
        for i in range(launches if images is None else len(images)):
            if images is not None:
                await ctx.tick().repeat(100)  # the rest of the last program drains
                dram[:], n = images[i]
                ctx.set(harness.rst, 1)
                await ctx.tick().repeat(2)
                ctx.set(harness.rst, 0)
            await axil_write(ctx, bus, reg("INSN_ADDR_LO"), insn_addr & 0xFFFF_FFFF)
            await axil_write(ctx, bus, reg("INSN_ADDR_HI"), insn_addr >> 32)
            await axil_write(ctx, bus, reg("INSN_COUNT"), n)
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

    sim = Simulator(harness)
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
    ("preset", "m", "k", "n", "tile_rows", "latency", "outstanding"),
    [
        ("tiny", 2, 8, 8, None, 6, 1),
        ("tiny", 4, 8, 12, 1, 6, 1),
        ("pynq", 3, 32, 32, 1, 24, 1),
        ("tiny", 4, 8, 12, 1, 6, 4),
        ("pynq", 3, 32, 32, 1, 24, 4),
    ],
)
def test_matmul_is_bit_exact_and_cycle_exact(preset, m, k, n, tile_rows, latency, outstanding):
    """Read bursts in flight (``outstanding``) go to every LOAD engine of the load and compute
    stages; fetch reads one burst at a time."""
    cfg = HWConfig.preset(preset).replace(max_outstanding_reads=outstanding)
    kernel = build_matmul(cfg, m, k, n, shift=4, tile_rows=tile_rows, seed=m + n)
    p = TimingParams.for_config(cfg, dram_read_latency=latency, dram_write_latency=latency // 2)
    outputs = check_image(kernel.image, {"A": pack_inp(cfg, kernel.a)}, p, launches=2)
    np.testing.assert_array_equal(unpack_out(cfg, outputs["C"]), kernel.reference())


@pytest.mark.parametrize("outstanding", [1, 3])
@pytest.mark.parametrize("preset", ["tiny", "pynq"])
def test_every_instruction_type_is_bit_exact_and_cycle_exact(preset, outstanding):
    cfg = HWConfig.preset(preset).replace(max_outstanding_reads=outstanding)
    rng = np.random.default_rng(5)
    image = hand_program(cfg, rng)
    p = TimingParams.for_config(cfg, dram_read_latency=9, dram_write_latency=4)
    check_image(image, hand_inputs(cfg, rng), p)


INSN_AT, UOP_AT = 256, 1024  # byte addresses of a raw program and its micro-ops in 4 KiB DRAM


def raw_dram(cfg: HWConfig, words: list[int], uops: tuple[Uop, ...]) -> np.ndarray:
    """4 KiB of DRAM holding instruction words at INSN_AT and micro-ops at UOP_AT."""
    dram = np.zeros(4096, dtype=np.uint8)
    program = b"".join(w.to_bytes(16, "little") for w in words)
    dram[INSN_AT : INSN_AT + len(program)] = np.frombuffer(program, np.uint8)
    packed = encode_uops(list(uops), cfg)
    dram[UOP_AT : UOP_AT + len(packed)] = np.frombuffer(packed, np.uint8)
    return dram


def launch_model(cfg: HWConfig, dram: np.ndarray, count: int, p: TimingParams) -> dict:
    """CTRL, STATUS and CYCLES of sim/regblock.py's model after a launch of the program at
    INSN_AT (sim/functional.py runs it, sim/timing.py counts its cycles)."""
    memory = DeviceMemory(len(dram), base=0)
    memory.write(0, dram)
    sim = FunctionalSim(cfg, memory)

    def execute(addr: int, count: int) -> int:
        insns = sim.fetch(addr, count)
        sim.execute(insns)
        return simulate_timing(insns, cfg, p, insn_addr=addr).cycles

    model = RegisterBlockModel(cfg, execute)
    model.write32(reg("INSN_ADDR_LO"), INSN_AT)
    model.write32(reg("INSN_COUNT"), count)
    model.write32(reg("CTRL"), int(Ctrl.START))
    want = {"ctrl": model.read32(reg("CTRL")), "status": model.read32(reg("STATUS"))}
    want["cycles"] = model.read32(reg("CYCLES_HI")) << 32 | model.read32(reg("CYCLES_LO"))
    want["error"] = str(model.last_error)
    return want


L, S = Opcode.LOAD, Opcode.STORE
ALU_OPCODE_LSB = layouts(TINY).alu.field("alu_opcode").lsb
UOPS = MemInsn(L, MemType.UOP, 0, UOP_AT // 4, 1, 4, 4)  # loads the case's (up to 4) micro-ops
OK, RANGE, FLAGS = Status.OK, Status.SRAM_RANGE, Status.BAD_FLAGS
# On tiny, INP, WGT and ACC (= OUT) have 256 entries and UOP 1024. name -> (program without
# FINISH, its micro-ops, the STATUS both must end with). Load and store stages hand a token to
# FINISH, which must not overtake them.
ERROR_CASES: dict[str, tuple[list[Insn | int], tuple[Uop, ...], Status]] = {
    "undefined_opcode": ([GemmInsn(uop_end=0), 7], (), Status.BAD_OPCODE),
    "undefined_alu_opcode": ([int(Opcode.ALU) | 6 << ALU_OPCODE_LSB], (), Status.BAD_OPCODE),
    # LOAD: sram_base + (y_pad_0 + y_size + y_pad_1) * (x_pad_0 + x_size + x_pad_1) <= depth
    "load_inp_tile_ends_at_depth": (
        [MemInsn(L, MemType.INP, 248, 0, 1, 2, 2, 1, 0, 1, 1, push_next=True)], (), OK),
    "load_inp_tile_passes_depth": (
        [MemInsn(L, MemType.INP, 249, 0, 1, 2, 2, 1, 0, 1, 1, push_next=True)], (), RANGE),
    "load_wgt": ([MemInsn(L, MemType.WGT, 255, 0, 1, 2, 2, push_next=True)], (), RANGE),
    "load_uop": ([MemInsn(L, MemType.UOP, 1020, 0, 1, 5, 5)], (), RANGE),
    "load_acc": ([MemInsn(L, MemType.ACC, 250, 0, 2, 4, 4)], (), RANGE),
    "load_acc_8bit_pad": ([MemInsn(L, MemType.ACC_8BIT, 255, 0, 1, 1, 1, 0, 1)], (), RANGE),
    "empty_load_is_not_checked": ([MemInsn(L, MemType.ACC, 300, 0, 1, 0, 0)], (), OK),
    # STORE: sram_base + y_size * x_size <= OUT depth
    "store": ([MemInsn(S, MemType.OUT, 250, 0, 2, 4, 4, push_prev=True)], (), RANGE),
    # GEMM/ALU micro-ops: uop_end <= UOP depth, however many steps the loop has
    "gemm_uop_end_without_steps": ([GemmInsn(uop_bgn=1000, uop_end=1025, iter_out=0)], (), RANGE),
    "alu_uop_end_at_depth": ([AluInsn(uop_bgn=1023, uop_end=1024)], (), OK),
    # GEMM: every step's dst < ACC depth and, without reset_reg, src < INP, wgt < WGT depth
    "gemm_dst_second_step": (
        [UOPS, GemmInsn(uop_end=1, iter_out=2, dst_factor_out=6)], (Uop(250, 0, 0),), RANGE),
    "gemm_dst_offset_wraps": (
        [UOPS, GemmInsn(uop_end=1, iter_out=3, dst_factor_out=200)], (Uop(0, 0, 0),), RANGE),
    "gemm_src": ([UOPS, GemmInsn(uop_end=2, iter_in=3, src_factor_in=100)],
                 (Uop(0, 0, 0), Uop(1, 60, 0)), RANGE),
    "gemm_wgt": ([UOPS, GemmInsn(uop_end=1, iter_in=2, wgt_factor_in=1)], (Uop(0, 0, 255),),
                 RANGE),
    "gemm_reset_checks_only_dst": (
        [UOPS, GemmInsn(reset_reg=True, uop_end=1, iter_in=3, src_factor_in=100,
                        wgt_factor_in=1)], (Uop(0, 60, 255),), OK),
    # ALU: every step's dst < ACC depth and, with an ACC operand, src < ACC depth
    "alu_dst": ([UOPS, AluInsn(uop_end=1, iter_in=2, dst_factor_in=1)], (Uop(255, 0, 0),), RANGE),
    "alu_src": ([UOPS, AluInsn(uop_end=1, iter_out=2, src_factor_out=1)], (Uop(0, 255, 0),),
                RANGE),
    "alu_imm_checks_only_dst": (
        [UOPS, AluInsn(uop_end=1, iter_out=2, src_factor_out=1, use_imm=True, imm=3)],
        (Uop(0, 255, 0),), OK),
    # Dependency flags: only those naming a token queue of the instruction's stage
    "load_inp_pop_prev": ([MemInsn(L, MemType.INP, pop_prev=True, push_next=True)], (), FLAGS),
    "load_wgt_push_prev": ([MemInsn(L, MemType.WGT, push_prev=True, push_next=True)], (), FLAGS),
    "store_push_next": ([MemInsn(S, MemType.OUT, push_prev=True, push_next=True)], (), FLAGS),
}  # fmt: skip


@pytest.fixture(scope="module")
def error_launches() -> dict[str, tuple[dict, dict]]:
    """Every ERROR_CASES program, each with a FINISH that waits for it, on the model and on one
    simulated Top (reset before each launch): case -> (RTL's registers, model's registers)."""
    cfg, p = TINY, TimingParams.for_config(TINY)
    images, wants = [], []
    for insns, uops, _ in ERROR_CASES.values():
        last = insns[-1]
        finish = FinishInsn(
            pop_prev=isinstance(last, MemInsn) and stage_of(last) == Stage.LOAD,
            pop_next=isinstance(last, MemInsn) and stage_of(last) == Stage.STORE,
        )
        words = [i if isinstance(i, int) else encode_word(i, cfg) for i in [*insns, finish]]
        images.append((raw_dram(cfg, words, uops), len(words)))
        wants.append(launch_model(cfg, images[-1][0], len(words), p))
    gots = run_top(cfg, images[0][0].copy(), 0, INSN_AT, 0, p, images=images)
    return dict(zip(ERROR_CASES, zip(gots, wants, strict=True), strict=True))


@pytest.mark.parametrize("case", ERROR_CASES)
def test_index_and_flag_errors_stop_like_the_model(error_launches, case):
    got, want = error_launches[case]
    status = ERROR_CASES[case][2]
    assert got == {k: want[k] for k in got}, f"RTL {got} != model {want}"
    assert (got["status"], got["ctrl"]) == (status, Ctrl.DONE if status == OK else Ctrl.ERROR)
    if status != OK:
        assert got["cycles"] == 0, "CYCLES stays 0 after an error"


def test_undefined_opcode_stops_with_bad_opcode_like_the_model(error_launches):
    got, want = error_launches["undefined_opcode"]
    assert got == {k: want[k] for k in got}, f"RTL {got} != model {want}"
    assert (got["ctrl"], got["status"], got["cycles"]) == (Ctrl.ERROR, Status.BAD_OPCODE, 0)
    assert "opcode must be one of" in want["error"]


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


def test_a_stage_pops_before_it_pushes_as_in_the_model():
    """dep_queue_depth = 1 and both l2g and g2l full while GEMM 2 and LOAD 3 wait to pop one
    and push the other: it runs because a stage pops first (the stream of
    tests/compiler/vta/test_vta_passes.py's pop-before-push test, which verify_tokens accepts)."""
    cfg = HWConfig.preset("tiny").replace(dep_queue_depth=1)
    b = ProgramBuilder(cfg, name="pop_first")
    b.slot("X", "input", (3, cfg.batch, cfg.block_in))

    def ld(i: int, **flags: bool) -> None:
        b.emit(MemInsn(Opcode.LOAD, MemType.INP, i, i, 1, 1, 1, **flags), reloc="X")

    def gemm(**flags: bool) -> None:
        b.emit(GemmInsn(uop_bgn=0, uop_end=0, **flags))

    ld(0, push_next=True)
    gemm(push_prev=True)
    gemm(pop_prev=True, push_prev=True)
    ld(1, pop_next=True, push_next=True)
    gemm(pop_prev=True)
    ld(2, pop_next=True, push_next=True)
    gemm()
    b.emit(FinishInsn(pop_prev=True))
    image = b.build()
    x = np.random.default_rng(2).integers(-128, 128, (3, cfg.batch, cfg.block_in), np.int8)
    check_image(image, {"X": x}, TimingParams.for_config(cfg, dram_read_latency=5))

# amaranth: UnusedElaboratable=no
"""Fetch (with the three CommandQueues) in the Amaranth simulator against sim/timing.py: every
instruction reaches its stage's queue in order, at the cycle the timing model dispatches it,
while a scripted back end pops each queue at the model's start cycles."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator
from axi_models import AxiMemory

from tensorforge.hw.config import HWConfig
from tensorforge.hw.core.fetch import Fetch, routing_table
from tensorforge.hw.core.queues import CommandQueue
from tensorforge.hw.isa import (
    INSN_BYTES,
    AluInsn,
    AluOp,
    FinishInsn,
    GemmInsn,
    MemInsn,
    MemType,
    Opcode,
    Stage,
    encode_word,
    stage_of,
)
from tensorforge.sim.latency import TimingParams
from tensorforge.sim.timing import simulate_timing

STAGES = (Stage.LOAD, Stage.COMPUTE, Stage.STORE)


class FetchHarness(Elaboratable):
    def __init__(self, cfg: HWConfig) -> None:
        self.fetch = Fetch(cfg)
        self.queues = {s: CommandQueue(cfg) for s in STAGES}

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.fetch = self.fetch
        for s, q in self.queues.items():
            m.submodules[f"q_{s.name.lower()}"] = q
            wiring.connect(m, getattr(self.fetch, s.name.lower()), q.w)
        return m


def random_program(rng, n: int, iter_out: int = 2) -> list:
    """About ``n`` instructions for all three stages: blocks of LOAD -> GEMM -> STORE chained by
    tokens (with unflagged extras), then FINISH waiting for the last STORE. A large ``iter_out``
    makes compute the bottleneck, so fetch's buffer fills and its burst rule decides."""
    insns: list = []
    while len(insns) < n - 4:
        first = not insns
        for _ in range(int(rng.integers(0, 3))):
            mt = (MemType.WGT, MemType.INP)[int(rng.integers(2))]
            insns.append(MemInsn(memory_type=mt, y_size=1, x_size=int(rng.integers(1, 9))))
        insns.append(MemInsn(memory_type=MemType.INP, y_size=2, x_size=3, push_next=True))
        if rng.random() < 0.5:
            insns.append(MemInsn(memory_type=MemType.UOP, y_size=1, x_size=4))
        if rng.random() < 0.5:
            insns.append(AluInsn(alu_opcode=AluOp.ADD, uop_end=int(rng.integers(1, 4)),
                                 use_imm=True))  # fmt: skip
        insns.append(GemmInsn(uop_end=int(rng.integers(0, 6)), iter_out=iter_out, pop_prev=True,
                              pop_next=not first, push_next=True))  # fmt: skip
        if rng.random() < 0.5:
            insns.append(MemInsn(opcode=Opcode.STORE, memory_type=MemType.OUT, y_size=1,
                                 x_size=2))  # fmt: skip
        x_size = int(rng.integers(1, 5))
        insns.append(MemInsn(opcode=Opcode.STORE, memory_type=MemType.OUT, y_size=1,
                             x_size=x_size, pop_prev=True, push_prev=True))  # fmt: skip
    return insns + [FinishInsn(pop_next=True)]


def run_fetch(cfg: HWConfig, insns: list, insn_addr: int, p: TimingParams) -> list[int]:
    """Returns the RTL's dispatch cycle per instruction (model cycle 0 = the cycle after start);
    asserts every pop at the model's start cycle finds the right word."""
    res = simulate_timing(insns, cfg, p, insn_addr=insn_addr)
    words = [encode_word(insn, cfg) for insn in insns]
    image = np.zeros(insn_addr + INSN_BYTES * len(insns) + 4096, dtype=np.uint8)
    for i, w in enumerate(words):
        image[insn_addr + INSN_BYTES * i : insn_addr + INSN_BYTES * (i + 1)] = list(
            w.to_bytes(INSN_BYTES, "little")
        )
    memory = AxiMemory(image, p.dram_read_latency, p.dram_write_latency, p.bus_bytes)
    harness = FetchHarness(cfg)
    fetch, queues = harness.fetch, harness.queues
    order = {s: [i for i, insn in enumerate(insns) if stage_of(insn) == s] for s in STAGES}
    dispatch: list[int] = []

    async def bench(ctx):
        ctx.set(fetch.insn_addr, insn_addr)
        ctx.set(fetch.insn_count, len(insns))
        ctx.set(fetch.start, 1)
        await ctx.tick()
        ctx.set(fetch.start, 0)
        nxt = dict.fromkeys(STAGES, 0)
        outs = [getattr(fetch, s.name.lower()) for s in STAGES]
        for t in range(max(res.start) + 2):
            popping = {}
            for s in STAGES:
                k = nxt[s]
                popping[s] = k < len(order[s]) and res.start[order[s][k]] == t
                ctx.set(queues[s].r.ready, popping[s])
            sampled = [x for o in outs for x in (o.valid, o.ready)]
            sampled += [x for s in STAGES for x in (queues[s].r.valid, queues[s].r.payload)]
            _, _, *vals = await ctx.tick().sample(*sampled)
            for j in range(3):
                if vals[2 * j] and vals[2 * j + 1]:
                    dispatch.append(t)
            for j, s in enumerate(STAGES):
                if popping[s]:
                    i = order[s][nxt[s]]
                    valid, payload = vals[6 + 2 * j], vals[7 + 2 * j]
                    assert valid, f"instruction {i} is not at its queue's output at cycle {t}"
                    assert payload == words[i], f"instruction {i}: wrong word in {s.name} queue"
                    nxt[s] += 1
        assert not ctx.get(fetch.busy)

    async def axi(ctx):
        await memory.serve_reads(ctx, fetch.axi)

    sim = Simulator(harness)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(axi, background=True)
    sim.run()
    assert [r[0] - 1 for r in memory.reads] == [b[0] for b in res.fetch_bursts], "AR cycles"
    return dispatch, res.dispatch


@pytest.mark.parametrize(
    ("depth", "n", "insn_addr", "latency", "iter_out"),
    [(32, 40, 0x40, 24, 2), (4, 30, 0x1F0, 5, 2), (2, 25, 0x0, 1, 2), (2, 40, 0x60, 2, 30)],
)
def test_fetch_dispatches_when_the_timing_model_does(depth, n, insn_addr, latency, iter_out):
    cfg = HWConfig.preset("tiny").replace(insn_queue_depth=depth)
    p = TimingParams.for_config(cfg, dram_read_latency=latency)
    insns = random_program(np.random.default_rng(n), n, iter_out)
    got, want = run_fetch(cfg, insns, insn_addr, p)
    assert got == want


def test_routing_table_is_stage_of():
    table = routing_table()
    assert table[Opcode.LOAD, MemType.INP] == Stage.LOAD
    assert table[Opcode.LOAD, MemType.UOP] == Stage.COMPUTE
    assert table[Opcode.STORE, MemType.OUT] == Stage.STORE
    assert table[Opcode.ALU, 0] == Stage.COMPUTE


def test_fetch_refuses_buses_wider_than_an_instruction():
    cfg = HWConfig.preset("tiny").replace(axi_data_width=256)
    with pytest.raises(ValueError, match=r"axi_data_width must be at most 128 .* not 256"):
        Fetch(cfg)

"""Fetch: reads the instruction stream over AXI4 and routes each word to its stage's queue."""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import HWConfig
from ..isa import (
    DEP_FLAGS,
    INSN_BYTES,
    AluInsn,
    FinishInsn,
    GemmInsn,
    MemInsn,
    MemType,
    Opcode,
    Stage,
    stage_of,
)
from ..timing import BURST_BEATS, FETCH_BUFFER_BURSTS
from ..tokens import STAGE_FLAGS
from .axi import BURST_INCR, axi_read_signature
from .common import check_config
from .decode import INSN_BITS, mem_layout
from .dma import AXI_ADDR_WIDTH, BurstPlanner


def routing_table() -> dict[tuple[int, int], Stage]:
    """(opcode, memory_type) -> stage, evaluated from ``hw.isa.stage_of`` (the one definition).

    Opcodes without a meaning go to compute, whose decoder reports them.
    """
    table = {}
    for op in range(8):
        for mt in range(8):
            if op in (Opcode.LOAD, Opcode.STORE) and mt in iter(MemType):
                insn = MemInsn(opcode=Opcode(op), memory_type=MemType(mt))
            elif op == Opcode.GEMM:
                insn = GemmInsn()
            elif op == Opcode.ALU:
                insn = AluInsn()
            else:
                insn = FinishInsn()
            table[op, mt] = stage_of(insn)
    return table


class Fetch(wiring.Component):
    """Reads ``insn_count`` 128-bit instructions from byte address ``insn_addr`` and writes each
    into the command queue of ``hw.isa.stage_of``'s stage, in program order.

    Timing (sim/timing.py's fetch model): the stream is read in bursts cut at every
    ``burst_beats * bus_bytes`` boundary (at most 4 KiB), one burst at a time. Fetch buffers
    ``FETCH_BUFFER_BURSTS`` bursts: burst b is requested once burst b-1's data has arrived and
    burst b-2's last instruction has been dispatched (from the next cycle). An instruction can
    be dispatched from the cycle after its last beat, one per cycle, when its queue has room.
    The cycle after ``start`` is the model's cycle 0. Byte addresses wrap at 32 bits.

    Fetch also checks the dependency flags (sim/functional.py ``check_dep_flags``): dispatching
    an instruction that sets a flag its stage has no token queue for (hw/tokens.py
    ``STAGE_FLAGS``) pulses ``flag_error`` (STATUS BAD_FLAGS); the instruction is dispatched all
    the same, and its stage ignores the flag.

    Args:
        cfg: the HWConfig (``axi_data_width`` up to 128 bits: at most one instruction per beat).
        burst_beats: longest burst (power of two, at most 256).

    Ports:
        start: one-cycle pulse: fetch ``insn_count`` instructions from ``insn_addr`` (only while
            not ``busy``).
        insn_addr, insn_count: the stream (``insn_addr`` 16-byte aligned).
        busy: instructions are left to read or dispatch.
        axi: AXI4 read master.
        load, compute, store: the command-queue write streams.
        axi_error: pulses on each beat answered with SLVERR or DECERR.
        flag_error: pulses when an instruction with a flag its stage lacks is dispatched.
    """

    def __init__(self, cfg: HWConfig, burst_beats: int = BURST_BEATS) -> None:
        self.cfg = check_config(cfg)
        if cfg.axi_data_width > INSN_BITS:
            raise ValueError(
                f"Fetch: HWConfig.axi_data_width must be at most {INSN_BITS} (one instruction "
                f"per beat) for now, not {cfg.axi_data_width!r}"
            )
        if not isinstance(burst_beats, int) or not 1 <= burst_beats <= 256:
            raise ValueError(f"burst_beats must be an int in [1, 256], not {burst_beats!r}")
        self.burst_beats = burst_beats
        bus_bytes = cfg.axi_data_width // 8
        self.per_burst = max(1, min(4096, burst_beats * bus_bytes) // INSN_BYTES)
        super().__init__(
            {
                "start": In(1),
                "insn_addr": In(64),
                "insn_count": In(32),
                "busy": Out(1),
                "axi": Out(axi_read_signature(cfg.axi_data_width)),
                "load": Out(stream.Signature(INSN_BITS)),
                "compute": Out(stream.Signature(INSN_BITS)),
                "store": Out(stream.Signature(INSN_BITS)),
                "axi_error": Out(1),
                "flag_error": Out(1),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        cfg, axi = self.cfg, self.axi
        bus = cfg.axi_data_width // 8
        ratio = INSN_BYTES // bus  # beats per instruction
        plan = m.submodules.plan = BurstPlanner(INSN_BYTES, bus, self.burst_beats)

        # The instruction buffer: a ring of FETCH_BUFFER_BURSTS bursts' worth of words.
        depth = FETCH_BUFFER_BURSTS * self.per_burst
        ring = Array(Signal(INSN_BITS, name=f"buf{i}") for i in range(depth))
        wp, rp = Signal(range(depth)), Signal(range(depth))
        level = Signal(range(depth + 1))
        # Bursts holding buffer space: their instruction counts, oldest first.
        held = Signal(range(FETCH_BUFFER_BURSTS + 1))
        sizes = Array(Signal(range(self.per_burst + 1), name=f"size{i}")
                      for i in range(FETCH_BUFFER_BURSTS))  # fmt: skip
        oldest_sent = Signal(range(self.per_burst + 1))
        to_dispatch = Signal(32)  # instructions not yet dispatched

        word, beat_k = Signal(INSN_BITS), Signal(range(max(2, ratio)))
        partial = Signal(max(1, (ratio - 1) * bus * 8))
        if ratio > 1:
            m.d.comb += word.eq(Cat(partial, axi.rdata))
        else:
            m.d.comb += word.eq(axi.rdata)
        units_left = Signal.like(plan.units)
        take = Signal()
        push = Signal()
        m.d.comb += [
            axi.arid.eq(0),
            axi.arsize.eq(bus.bit_length() - 1),
            axi.arburst.eq(BURST_INCR),
            axi.araddr.eq(plan.addr),
            axi.arlen.eq(plan.beats - 1),
            self.axi_error.eq(take & axi.rresp[1]),
            push.eq(take & (beat_k == ratio - 1)),
        ]
        pop = self._dispatch(m, ring[rp], level != 0)

        # Buffer bookkeeping: one push (last beat of an instruction) and one pop per cycle.
        with m.If(push):
            m.d.sync += [ring[wp].eq(word), wp.eq(_inc(wp, depth))]
        with m.If(pop):
            m.d.sync += [rp.eq(_inc(rp, depth)), to_dispatch.eq(to_dispatch - 1)]
        m.d.sync += level.eq(level + push - pop)
        if ratio > 1:
            with m.If(take):
                m.d.sync += [beat_k.eq(_inc(beat_k, ratio)), partial.eq(Cat(partial[bus * 8 :],
                                                                          axi.rdata))]  # fmt: skip
        claim = Signal()
        freed = Signal()
        m.d.comb += freed.eq(pop & (oldest_sent + 1 == sizes[0]))
        assert FETCH_BUFFER_BURSTS == 2, "the size queue below shifts one entry"
        with m.If(freed):
            m.d.sync += [oldest_sent.eq(0), sizes[0].eq(sizes[1])]
        with m.Elif(pop):
            m.d.sync += oldest_sent.eq(oldest_sent + 1)
        with m.If(claim):
            slot = held - freed
            m.d.sync += sizes[slot].eq(plan.nbytes >> (INSN_BYTES.bit_length() - 1))
        m.d.sync += held.eq(held + claim - freed)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    addr = self.insn_addr[:AXI_ADDR_WIDTH]
                    m.d.comb += [
                        plan.start_span.eq(1),
                        plan.span_base.eq(addr),
                        plan.span_bytes.eq((self.insn_count * INSN_BYTES)[: AXI_ADDR_WIDTH + 1]),
                    ]
                    m.d.sync += [to_dispatch.eq(self.insn_count), beat_k.eq(0)]
                    with m.If(self.insn_count != 0):
                        m.next = "AR"
            with m.State("AR"):
                m.d.comb += axi.arvalid.eq(held < FETCH_BUFFER_BURSTS)
                with m.If(axi.arvalid & axi.arready):
                    m.d.comb += claim.eq(1)
                    m.d.sync += units_left.eq(plan.units)
                    m.d.comb += plan.advance.eq(1)
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += [axi.rready.eq(1), take.eq(axi.rvalid)]
                with m.If(take):
                    m.d.sync += units_left.eq(units_left - 1)
                    with m.If(units_left == 1):
                        with m.If(plan.more):
                            m.next = "AR"
                        with m.Else():
                            m.next = "DRAIN"
            with m.State("DRAIN"):
                with m.If((to_dispatch == 0) | ((to_dispatch == 1) & pop)):
                    m.next = "IDLE"
        m.d.comb += self.busy.eq(to_dispatch != 0)
        return m

    def _dispatch(self, m: Module, head, valid) -> Signal:
        """Route the buffer's head to its stage's stream; return "popped this cycle"."""
        lay = mem_layout(self.cfg)
        opcode = head[lay["opcode"].offset : lay["opcode"].offset + lay["opcode"].width]
        mt_f = lay["memory_type"]
        memory_type = head[mt_f.offset : mt_f.offset + mt_f.width]
        stage = Signal(2)
        with m.Switch(Cat(memory_type, opcode)):
            for (op, mt), s in routing_table().items():
                with m.Case(mt | op << mt_f.width):
                    m.d.comb += stage.eq(s)
        outs = {Stage.LOAD: self.load, Stage.COMPUTE: self.compute, Stage.STORE: self.store}
        pop = Signal()
        for s, out in outs.items():
            m.d.comb += [out.payload.eq(head), out.valid.eq(valid & (stage == s))]
            stray = 0  # flags set on the head that stage s has no token queue for
            for f in DEP_FLAGS:
                if f not in STAGE_FLAGS[s]:
                    stray = stray | head[lay[f].offset]
            with m.If(out.valid & out.ready):
                m.d.comb += [pop.eq(1), self.flag_error.eq(stray)]
        return pop


def _inc(value: Signal, modulo: int):
    return Mux(value == modulo - 1, 0, value + 1)

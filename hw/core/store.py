"""The STORE DMA engine: OUT SRAM -> DRAM, 2-D strided, over an AXI4 write master."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import HWConfig
from ..timing import BURST_BEATS
from .axi import BURST_INCR, axi_write_signature
from .common import check_config, out_bits, read_port
from .decode import mem_layout
from .dma import BurstPlanner, plan_transfer


class StoreDma(wiring.Component):
    """Executes STORE instructions: ``y_size x x_size`` OUT elements from ``sram_base`` (dense)
    to DRAM rows at ``dram_base + y * x_stride`` (sim/functional.py ``_store``).

    Timing (the accept cycle is the issue cycle and reads the first element): per burst, AW
    with the first W beat, one unit (dma.py) per cycle, then the write response; the next burst
    starts in the cycle after the response. An empty transfer takes one cycle. Narrow elements
    are gathered into beats with ``wstrb`` marking only their bytes. A transfer beyond the OUT
    SRAM, ``sram_base + y_size * x_size`` more than its depth (sim/functional.py's check), is
    not executed: it takes one cycle and pulses ``range_error`` in the next.

    Args:
        cfg: the HWConfig (bus width ``axi_data_width``).
        burst_beats: longest burst (power of two, at most 256).

    Ports:
        cmd: STORE instructions (the 128-bit memory layout); ``ready`` = idle. Pad fields are
            ignored (the issuing stage rejects them, as the simulators do).
        busy: a transfer is in progress.
        axi: AXI4 write master (AW, W, B; one burst outstanding).
        sram_rd: read port of the OUT SRAM (synchronous, ``en`` unused).
        axi_error: pulses on a write response SLVERR or DECERR.
        range_error: pulses the cycle after accepting a transfer beyond the OUT SRAM.
    """

    def __init__(self, cfg: HWConfig, burst_beats: int = BURST_BEATS) -> None:
        self.cfg = check_config(cfg)
        if not isinstance(burst_beats, int) or not 1 <= burst_beats <= 256:
            raise ValueError(f"burst_beats must be an int in [1, 256], not {burst_beats!r}")
        self.burst_beats = burst_beats
        super().__init__(
            {
                "cmd": In(stream.Signature(mem_layout(cfg))),
                "busy": Out(1),
                "axi": Out(axi_write_signature(cfg.axi_data_width)),
                "sram_rd": In(read_port(cfg.log_acc_depth, out_bits(cfg))),
                "axi_error": Out(1),
                "range_error": Out(1),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        cfg, insn, axi, rd = self.cfg, self.cmd.payload, self.axi, self.sram_rd
        eb, bus = cfg.out_elem_bytes, cfg.axi_data_width // 8
        plan = m.submodules.plan = BurstPlanner(eb, bus, self.burst_beats)
        plan_transfer(m, plan, insn)
        ptr = Signal(len(rd.addr))  # OUT index of the element at rd.data
        fresh = Signal()  # first cycle of a burst: its parameters come from the planner
        units_left, u_eff = Signal.like(plan.units), Signal.like(plan.units)
        aw_pending, aw_addr, aw_beats = Signal(), Signal.like(plan.addr), Signal.like(plan.beats)
        consume, elem_next = Signal(), Signal()
        m.d.comb += [
            u_eff.eq(Mux(fresh, plan.units, units_left)),
            axi.awid.eq(0),
            axi.awsize.eq(bus.bit_length() - 1),
            axi.awburst.eq(BURST_INCR),
            axi.awvalid.eq(fresh | aw_pending),
            axi.awaddr.eq(Mux(fresh, plan.addr, aw_addr)),
            axi.awlen.eq(Mux(fresh, plan.beats, aw_beats) - 1),
            axi.wlast.eq(u_eff == 1),
            rd.addr.eq(Mux(elem_next, ptr + 1, ptr)),
            self.busy.eq(~self.cmd.ready),
        ]
        with m.If(fresh):
            m.d.sync += [aw_pending.eq(~axi.awready), aw_addr.eq(plan.addr),
                         aw_beats.eq(plan.beats)]  # fmt: skip
        with m.Elif(axi.awready):
            m.d.sync += aw_pending.eq(0)
        m.d.sync += [fresh.eq(0), self.range_error.eq(0)]
        outside = insn.sram_base + insn.x_size * insn.y_size > 1 << len(rd.addr)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [self.cmd.ready.eq(1), rd.addr.eq(insn.sram_base)]
                with m.If(self.cmd.valid):
                    m.d.comb += plan.start.eq(1)
                    m.d.sync += ptr.eq(insn.sram_base)
                    moves = (insn.x_size != 0) & (insn.y_size != 0)  # else a token-only NOP
                    with m.If(moves & outside):
                        m.d.sync += self.range_error.eq(1)
                    with m.Elif(moves):
                        m.d.sync += fresh.eq(1)
                        m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += plan.advance.eq(fresh)
                self._send(m, plan, fresh, u_eff, consume, elem_next)
                with m.If(elem_next):
                    m.d.sync += ptr.eq(ptr + 1)
                m.d.sync += units_left.eq(u_eff - consume)
                with m.If(consume & (u_eff == 1)):
                    m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [axi.bready.eq(1), self.axi_error.eq(axi.bvalid & axi.bresp[1])]
                with m.If(axi.bvalid):
                    with m.If(plan.more):
                        m.d.sync += fresh.eq(1)
                        m.next = "DATA"
                    with m.Else():
                        m.next = "IDLE"
        return m

    def _send(self, m: Module, plan: BurstPlanner, fresh, u_eff, consume, elem_next) -> None:
        """W beats from ``rd.data``: drive wdata/wstrb/wvalid, ``consume`` and ``elem_next``."""
        axi, rd = self.axi, self.sram_rd
        eb, bus = self.cfg.out_elem_bytes, self.cfg.axi_data_width // 8
        if eb >= bus:  # one beat per cycle, ``ratio`` beats per element
            ratio = eb // bus
            k = Signal(range(max(2, ratio)))
            m.d.comb += [
                axi.wvalid.eq(1),
                axi.wdata.eq(rd.data.word_select(k, bus * 8) if ratio > 1 else rd.data),
                axi.wstrb.eq(-1),
                consume.eq(axi.wready),
                elem_next.eq(consume & (k == ratio - 1)),
            ]
            if ratio > 1:
                with m.If(consume):
                    m.d.sync += k.eq(Mux(k == ratio - 1, 0, k + 1))
            return
        per_beat = bus // eb  # several elements per beat: gather them, one per cycle
        lane, lane_eff = Signal(range(per_beat)), Signal(range(per_beat))
        held, held_strb = Signal(bus * 8), Signal(bus)
        final = (lane_eff == per_beat - 1) | (u_eff == 1)
        data = Signal(bus * 8)
        strb = Signal(bus)
        m.d.comb += [
            lane_eff.eq(Mux(fresh, plan.cursor >> plan.log_eb, lane)),
            data.eq(held),
            data.word_select(lane_eff, eb * 8).eq(rd.data),
            strb.eq(held_strb | (((1 << eb) - 1) << (lane_eff * eb))),
            axi.wvalid.eq(final),
            axi.wdata.eq(data),
            axi.wstrb.eq(strb),
            consume.eq(~final | axi.wready),
            elem_next.eq(consume),
        ]
        with m.If(consume):
            m.d.sync += [
                lane.eq(lane_eff + 1),
                held.eq(Mux(final, 0, data)),
                held_strb.eq(Mux(final, 0, strb)),
            ]
        with m.Else():
            m.d.sync += lane.eq(lane_eff)

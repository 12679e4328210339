"""Stage control shared by load, compute and store (pop, tokens, push), and the two DMA stages.

Cycle conventions (sim/timing.py): a stage pops an instruction (and its tokens) in cycle S; its
unit is ready again in cycle E = S + duration; it pushes its tokens in cycle E (later while a
token queue is full) and pops the next instruction in the cycle of its last push.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import HWConfig
from ..isa import DEP_FLAGS, MemType, Stage
from ..regmap import Status
from ..timing import BURST_BEATS
from ..tokens import POP_QUEUES, PUSH_QUEUES
from .axi import axi_read_signature, axi_write_signature
from .common import check_config, inp_bits, out_bits, wgt_bits, write_port
from .common import read_port as sram_read_port
from .decode import INSN_BITS, mem_layout
from .load import LoadDma
from .regblock import STATUS_WIDTH
from .store import StoreDma

#: A token queue's pop side as a stage sees it, and its push side.
TOKEN_POP = wiring.Signature({"valid": In(1), "ready": Out(1)})
TOKEN_PUSH = wiring.Signature({"valid": Out(1), "ready": In(1)})


def token_ports(stage: Stage) -> dict:
    """A stage's token-queue ports (hw/tokens.py): one per pop flag and one per push flag."""
    pops = {f: Out(TOKEN_POP) for f in POP_QUEUES[stage]}
    return pops | {f: Out(TOKEN_PUSH) for f in PUSH_QUEUES[stage]}


def stage_signature(stage: Stage) -> dict:
    """Ports every stage has: the command stream, its token queues, ``busy``, ``axi_error`` and
    ``error``/``error_status`` (an error the stage detected: a pulse and its STATUS)."""
    return {
        "cmd": In(stream.Signature(INSN_BITS)),
        "busy": Out(1),
        "axi_error": Out(1),
        "error": Out(1),
        "error_status": Out(STATUS_WIDTH),
        **token_ports(stage),
    }


class StageCtl(wiring.Component):
    """Pops instructions with their tokens and pushes tokens after them, for one stage.

    ``add_stage_ctl`` adds it to a stage and connects its ``cmd``, token ports and ``busy``.
    The stage drives ``unit_done`` (comb) while the in-flight instruction's unit is finished;
    ``pop`` says that the head instruction and its tokens are taken this cycle (the stage's unit
    accepts it then).
    """

    def __init__(self, cfg: HWConfig, stage: Stage) -> None:
        self.cfg = cfg
        super().__init__(
            {
                "cmd": In(stream.Signature(INSN_BITS)),
                "busy": Out(1),
                "unit_done": In(1),
                "pop": Out(1),
                **token_ports(stage),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        cmd, inflight = self.cmd, self.busy
        lay = mem_layout(self.cfg)
        flag = {f: cmd.payload[lay[f].offset] for f in DEP_FLAGS}
        ports = {f: getattr(self, f) for f in DEP_FLAGS if f in self.signature.members}
        pend = {f: Signal(name=f"pend_{f}") for f in ports if f.startswith("push")}
        finishing = inflight & self.unit_done
        pushed_all = Signal()
        m.d.comb += pushed_all.eq(1)
        for f, pending in pend.items():
            port = ports[f]
            m.d.comb += port.valid.eq(finishing & pending)
            with m.If(port.valid & ~port.ready):
                m.d.comb += pushed_all.eq(0)
            with m.If(port.valid & port.ready):
                m.d.sync += pending.eq(0)
        free = ~inflight | (finishing & pushed_all)
        tokens_ok = Signal()
        m.d.comb += tokens_ok.eq(1)
        for f, port in ports.items():
            if f.startswith("pop"):
                with m.If(flag[f] & ~port.valid):
                    m.d.comb += tokens_ok.eq(0)
                m.d.comb += port.ready.eq(self.pop & flag[f])
        m.d.comb += [self.pop.eq(free & cmd.valid & tokens_ok), cmd.ready.eq(self.pop)]
        with m.If(self.pop):
            m.d.sync += inflight.eq(1)
            m.d.sync += [pending.eq(flag[f]) for f, pending in pend.items()]
        with m.Elif(free):
            m.d.sync += inflight.eq(0)
        return m


def add_stage_ctl(m: Module, stage: wiring.Component, which: Stage) -> StageCtl:
    """Add a ``StageCtl`` to stage component ``stage``'s module ``m``, wired to its ports."""
    ctl = m.submodules.ctl = StageCtl(stage.cfg, which)
    for name in ("cmd", *token_ports(which)):
        wiring.connect(m, wiring.flipped(getattr(stage, name)), getattr(ctl, name))
    m.d.comb += stage.busy.eq(ctl.busy)
    return ctl


def connect_read_mux(m: Module, port, masters: list, sel: Signal) -> None:
    """Give AXI read ``port`` to ``masters[sel]`` (one transfer at a time, so no arbitration)."""
    # Mux chains, not a Switch: yosys writes a Switch as ``always @*`` blocks, which Icarus
    # never evaluates while ``sel`` keeps its initial value (the outputs stay X).
    for name in ("arid", "araddr", "arlen", "arsize", "arburst", "arvalid", "rready"):
        value = getattr(masters[-1], name)
        for i in reversed(range(len(masters) - 1)):
            value = Mux(sel == i, getattr(masters[i], name), value)
        m.d.comb += getattr(port, name).eq(value)
    for i, master in enumerate(masters):
        m.d.comb += [
            master.arready.eq(port.arready & (sel == i)),
            master.rvalid.eq(port.rvalid & (sel == i)),
            master.rid.eq(port.rid),
            master.rdata.eq(port.rdata),
            master.rresp.eq(port.rresp),
            master.rlast.eq(port.rlast),
        ]


class LoadStage(wiring.Component):
    """The load stage: LOAD INP and LOAD WGT through two LoadDma engines sharing one AXI port.

    Tokens: pops ``pop_next`` (g2l), pushes ``push_next`` (l2g). Duration of an instruction:
    sim/latency.py ``load_cycles`` (the pop cycle is the DMA's issue cycle). A LOAD beyond its
    SRAM is skipped (one cycle) and reported as ``error`` with STATUS SRAM_RANGE.
    """

    def __init__(self, cfg: HWConfig, burst_beats: int = BURST_BEATS) -> None:
        self.cfg = check_config(cfg)
        self.burst_beats = burst_beats
        members = stage_signature(Stage.LOAD)
        members.update(
            {
                "axi": Out(axi_read_signature(cfg.axi_data_width)),
                "inp_wr": In(write_port(cfg.log_inp_depth, inp_bits(cfg))),
                "wgt_wr": In(write_port(cfg.log_wgt_depth, wgt_bits(cfg))),
            }
        )
        super().__init__(members)

    def elaborate(self, platform) -> Module:
        m = Module()
        ctl = add_stage_ctl(m, self, Stage.LOAD)
        dmas = {
            MemType.INP: LoadDma(self.cfg, MemType.INP, self.burst_beats),
            MemType.WGT: LoadDma(self.cfg, MemType.WGT, self.burst_beats),
        }
        m.submodules.inp_dma, m.submodules.wgt_dma = dmas.values()
        lay = mem_layout(self.cfg)
        mt = self.cmd.payload[lay["memory_type"].offset :][: lay["memory_type"].width]
        sel = Signal()
        for i, (kind, dma) in enumerate(dmas.items()):
            m.d.comb += [
                dma.cmd.payload.eq(self.cmd.payload),
                dma.cmd.valid.eq(ctl.pop & (mt == kind)),
            ]
            with m.If(dma.cmd.valid):
                m.d.sync += sel.eq(i)
        wiring.connect(m, dmas[MemType.INP].sram_wr, wiring.flipped(self.inp_wr))
        wiring.connect(m, dmas[MemType.WGT].sram_wr, wiring.flipped(self.wgt_wr))
        connect_read_mux(m, self.axi, [d.axi for d in dmas.values()], sel)
        idle = dmas[MemType.INP].cmd.ready & dmas[MemType.WGT].cmd.ready
        m.d.comb += [
            ctl.unit_done.eq(idle),
            self.axi_error.eq(dmas[MemType.INP].axi_error | dmas[MemType.WGT].axi_error),
            self.error.eq(dmas[MemType.INP].range_error | dmas[MemType.WGT].range_error),
            self.error_status.eq(Status.SRAM_RANGE),
        ]
        return m


class StoreStage(wiring.Component):
    """The store stage: STORE through a StoreDma. Tokens: pops ``pop_prev`` (g2s), pushes
    ``push_prev`` (s2g). Duration: sim/latency.py ``store_cycles``. A STORE beyond the OUT
    SRAM is skipped (one cycle) and reported as ``error`` with STATUS SRAM_RANGE."""

    def __init__(self, cfg: HWConfig, burst_beats: int = BURST_BEATS) -> None:
        self.cfg = check_config(cfg)
        self.burst_beats = burst_beats
        members = stage_signature(Stage.STORE)
        members.update(
            {
                "axi": Out(axi_write_signature(cfg.axi_data_width)),
                "out_rd": In(sram_read_port(cfg.log_acc_depth, out_bits(cfg))),
            }
        )
        super().__init__(members)

    def elaborate(self, platform) -> Module:
        m = Module()
        ctl = add_stage_ctl(m, self, Stage.STORE)
        dma = m.submodules.dma = StoreDma(self.cfg, self.burst_beats)
        m.d.comb += [
            dma.cmd.payload.eq(self.cmd.payload),
            dma.cmd.valid.eq(ctl.pop),
            ctl.unit_done.eq(dma.cmd.ready),
            self.axi_error.eq(dma.axi_error),
            self.error.eq(dma.range_error),
            self.error_status.eq(Status.SRAM_RANGE),
        ]
        wiring.connect(m, dma.sram_rd, wiring.flipped(self.out_rd))
        wiring.connect(m, dma.axi, wiring.flipped(self.axi))
        return m

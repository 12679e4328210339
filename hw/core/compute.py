"""The compute stage: GEMM core, tensor ALU, micro-op and ACC loads, FINISH, on shared SRAMs."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import HWConfig
from ..isa import AluOp, MemType, Opcode, Stage
from ..regmap import Status
from ..timing import BURST_BEATS
from .alu import AluCore
from .axi import axi_read_signature
from .common import (
    UOP_BITS,
    acc_bits,
    check_config,
    inp_bits,
    out_bits,
    read_port,
    wgt_bits,
    write_port,
)
from .decode import INSN_BITS, alu_layout, gemm_layout, mem_layout
from .gemm import GemmCore
from .load import LoadDma
from .stages import add_stage_ctl, connect_read_mux, stage_signature

#: LOAD memory types the compute stage executes (hw.isa.stage_of), one DMA engine each.
COMPUTE_LOADS = (MemType.UOP, MemType.ACC, MemType.ACC_8BIT)


class ComputeStage(wiring.Component):
    """Executes the compute queue: GEMM (GemmCore), ALU (AluCore), LOAD UOP/ACC/ACC_8BIT
    (LoadDma engines on one AXI read port) and FINISH, one instruction at a time.

    Tokens: pops ``pop_prev`` (l2g) and ``pop_next`` (s2g), pushes ``push_prev`` (g2l) and
    ``push_next`` (g2s). Durations (sim/latency.py ``insn_cycles``): a GEMM or ALU instruction
    is issued to its core the cycle after its pop (1 + ``gemm_cycles``/``alu_cycles``); a LOAD
    is the pop cycle's DMA accept (``load_cycles``); FINISH pulses ``done`` the cycle after its
    pop and takes 2 cycles.

    Errors (``error`` pulses with ``error_status``): an opcode that is not GEMM, ALU, FINISH or
    a compute LOAD, or an ALU opcode ``hw.isa.AluOp`` lacks, is BAD_OPCODE, and a GEMM or ALU
    whose micro-ops ``[uop_bgn, uop_end)`` pass the UOP SRAM's depth is SRAM_RANGE; both are
    skipped (2 cycles). The cores and the DMA engines report SRAM_RANGE for the indices they
    check (GemmCore, AluCore, LoadDma).

    Ports: the stage ports (``cmd``, tokens, ``busy``, ``axi_error``, ``error``,
    ``error_status``), ``axi`` (read master), ``done``, and the SRAM ports ``uop_wr``,
    ``uop_rd``, ``inp_rd``, ``wgt_rd``, ``acc_rd``, ``acc_wr``, ``out_wr`` (shapes as
    GemmCore's).
    """

    def __init__(self, cfg: HWConfig, burst_beats: int = BURST_BEATS) -> None:
        self.cfg = check_config(cfg)
        self.burst_beats = burst_beats
        members = stage_signature(Stage.COMPUTE)
        members.update(
            {
                "axi": Out(axi_read_signature(cfg.axi_data_width)),
                "done": Out(1),
                "uop_wr": In(write_port(cfg.log_uop_depth, UOP_BITS)),
                "uop_rd": In(read_port(cfg.log_uop_depth, UOP_BITS)),
                "inp_rd": In(read_port(cfg.log_inp_depth, inp_bits(cfg))),
                "wgt_rd": In(read_port(cfg.log_wgt_depth, wgt_bits(cfg))),
                "acc_rd": In(read_port(cfg.log_acc_depth, acc_bits(cfg))),
                "acc_wr": In(write_port(cfg.log_acc_depth, acc_bits(cfg))),
                "out_wr": In(write_port(cfg.log_acc_depth, out_bits(cfg))),
            }
        )
        super().__init__(members)

    def elaborate(self, platform) -> Module:
        m = Module()
        cfg = self.cfg
        ctl = add_stage_ctl(m, self, Stage.COMPUTE)
        gemm, alu = m.submodules.gemm, m.submodules.alu = GemmCore(cfg), AluCore(cfg)
        dmas = {mt: LoadDma(cfg, mt, self.burst_beats) for mt in COMPUTE_LOADS}
        for mt, dma in dmas.items():
            m.submodules[f"{mt.name.lower()}_dma"] = dma

        lay = mem_layout(cfg)
        word = self.cmd.payload
        opcode = word[lay["opcode"].offset :][: lay["opcode"].width]
        mt = word[lay["memory_type"].offset :][: lay["memory_type"].width]
        is_load = {k: (opcode == Opcode.LOAD) & (mt == k) for k in COMPUTE_LOADS}
        alu_f = alu_layout(cfg)["alu_opcode"]
        alu_op = word[alu_f.offset :][: alu_f.width]
        known_alu = (opcode == Opcode.ALU) & (alu_op <= max(AluOp))
        known = (opcode == Opcode.GEMM) | known_alu | (opcode == Opcode.FINISH)
        for cond in is_load.values():
            known = known | cond
        # GEMM and ALU share the loop fields' positions; uop_end has one bit more than the UOP
        # index, so it can name micro-ops beyond the SRAM.
        end_f = gemm_layout(cfg)["uop_end"]
        uop_end = word[end_f.offset :][: end_f.width]
        looped = (opcode == Opcode.GEMM) | (opcode == Opcode.ALU)
        uop_outside = looped & (uop_end > cfg.uop_depth)

        # GEMM and ALU are issued from a register the cycle after the pop.
        issue_word = Signal(INSN_BITS)
        issue_gemm, issue_alu, finish, bad = Signal(), Signal(), Signal(), Signal()
        bad_status = Signal.like(self.error_status)
        use_alu = Signal()  # which core owns the shared UOP/ACC read ports
        m.d.sync += [issue_gemm.eq(0), issue_alu.eq(0), finish.eq(0), bad.eq(0)]
        with m.If(ctl.pop):
            m.d.sync += [
                issue_word.eq(word),
                issue_gemm.eq((opcode == Opcode.GEMM) & ~uop_outside),
                issue_alu.eq(known_alu & ~uop_outside),
                finish.eq(opcode == Opcode.FINISH),
                bad.eq(~known | uop_outside),
                bad_status.eq(Mux(known, Status.SRAM_RANGE, Status.BAD_OPCODE)),
            ]
            with m.If(looped):
                m.d.sync += use_alu.eq(opcode == Opcode.ALU)
        range_error = gemm.range_error | alu.range_error
        for dma in dmas.values():
            range_error = range_error | dma.range_error
        m.d.comb += [
            gemm.insn.payload.as_value().eq(issue_word),
            gemm.insn.valid.eq(issue_gemm),
            alu.insn.payload.as_value().eq(issue_word),
            alu.insn.valid.eq(issue_alu),
            self.done.eq(finish),
            self.error.eq(bad | range_error),
            self.error_status.eq(Mux(bad, bad_status, Status.SRAM_RANGE)),
        ]

        sel = Signal(range(len(COMPUTE_LOADS)))
        for i, (kind, dma) in enumerate(dmas.items()):
            m.d.comb += [dma.cmd.payload.eq(word), dma.cmd.valid.eq(ctl.pop & is_load[kind])]
            with m.If(dma.cmd.valid):
                m.d.sync += sel.eq(i)
        connect_read_mux(m, self.axi, [d.axi for d in dmas.values()], sel)

        idle = gemm.insn.ready & alu.insn.ready & ~(issue_gemm | issue_alu | finish | bad)
        axi_error = 0
        for dma in dmas.values():
            idle = idle & dma.cmd.ready
            axi_error = axi_error | dma.axi_error
        m.d.comb += [ctl.unit_done.eq(idle), self.axi_error.eq(axi_error)]
        self._share_srams(m, gemm, alu, dmas, use_alu)
        return m

    def _share_srams(self, m: Module, gemm, alu, dmas, use_alu) -> None:
        """One instruction runs at a time, so ports are shared by multiplexing."""
        wiring.connect(m, dmas[MemType.UOP].sram_wr, wiring.flipped(self.uop_wr))
        wiring.connect(m, gemm.inp_rd, wiring.flipped(self.inp_rd))
        wiring.connect(m, gemm.wgt_rd, wiring.flipped(self.wgt_rd))
        for buf in ("uop", "acc"):
            port = getattr(self, f"{buf}_rd")
            g, a = getattr(gemm, f"{buf}_rd"), getattr(alu, f"{buf}_rd")
            m.d.comb += [port.addr.eq(Mux(use_alu, a.addr, g.addr)), port.en.eq(1)]
            m.d.comb += [g.data.eq(port.data), a.data.eq(port.data)]
        writers = {
            "acc": [gemm.acc_wr, alu.acc_wr, dmas[MemType.ACC].sram_wr,
                    dmas[MemType.ACC_8BIT].sram_wr],
            "out": [gemm.out_wr, alu.out_wr],
        }  # fmt: skip
        for buf, ports in writers.items():
            port = getattr(self, f"{buf}_wr")
            for w in reversed(ports):  # at most one writes in a cycle
                with m.If(w.en):
                    m.d.comb += [port.addr.eq(w.addr), port.data.eq(w.data)]
            en = 0
            for w in ports:
                en = en | w.en
            m.d.comb += port.en.eq(en)

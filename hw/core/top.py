"""The accelerator: register block, fetch, command and token queues, three stages, SRAMs."""

from __future__ import annotations

from amaranth.hdl import Module, Mux
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config import HWConfig
from ..isa import Stage
from ..regmap import Status
from ..timing import BURST_BEATS
from ..tokens import TOKEN_QUEUES
from .axi import axi_lite_signature, axi_read_signature, axi_write_signature
from .common import UOP_BITS, acc_bits, check_config, inp_bits, out_bits, wgt_bits
from .compute import ComputeStage
from .fetch import Fetch
from .queues import CommandQueue, TokenQueue
from .regblock import ADDR_WIDTH, RegBlock
from .stages import LoadStage, StoreStage


class Top(wiring.Component):
    """The whole accelerator for ``cfg`` (VTA's organisation, docs/hardware.md).

    The host launches a program through ``s_axil`` (hw/regmap.py's registers and launch
    protocol). Each unit has its own AXI4 master, so their transfers never wait on each other,
    as in sim/timing.py: ``m_axi_fetch`` (instructions), ``m_axi_load`` (INP/WGT),
    ``m_axi_compute`` (UOP/ACC), ``m_axi_store`` (OUT; write only). CYCLES reads the timing
    model's total (``TimingResult.cycles``) for the same program, DRAM latencies and placement.

    Args:
        cfg: the HWConfig.
        burst_beats: longest AXI burst of every master.
    """

    def __init__(self, cfg: HWConfig, burst_beats: int = BURST_BEATS) -> None:
        self.cfg = check_config(cfg)
        self.burst_beats = burst_beats
        width = cfg.axi_data_width
        super().__init__(
            {
                "s_axil": In(axi_lite_signature(ADDR_WIDTH)),
                "m_axi_fetch": Out(axi_read_signature(width)),
                "m_axi_load": Out(axi_read_signature(width)),
                "m_axi_compute": Out(axi_read_signature(width)),
                "m_axi_store": Out(axi_write_signature(width)),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        cfg, beats = self.cfg, self.burst_beats
        regs = m.submodules.regs = RegBlock(cfg)
        fetch = m.submodules.fetch = Fetch(cfg, beats)
        stages = {
            "load": LoadStage(cfg, beats),
            "compute": ComputeStage(cfg, beats),
            "store": StoreStage(cfg, beats),
        }
        for name, stage in stages.items():
            m.submodules[name] = stage
            queue = m.submodules[f"{name}_queue"] = CommandQueue(cfg)
            wiring.connect(m, getattr(fetch, name), queue.w)
            wiring.connect(m, queue.r, stage.cmd)
            wiring.connect(m, stage.axi, wiring.flipped(getattr(self, f"m_axi_{name}")))
        wiring.connect(m, wiring.flipped(self.s_axil), regs.s_axil)
        wiring.connect(m, fetch.axi, wiring.flipped(self.m_axi_fetch))
        for name, link in TOKEN_QUEUES.items():
            q = m.submodules[name] = TokenQueue(cfg)
            pusher = getattr(stages[link.producer.name.lower()], link.push)
            popper = getattr(stages[link.consumer.name.lower()], link.pop)
            m.d.comb += [
                q.push_valid.eq(pusher.valid),
                pusher.ready.eq(q.push_ready),
                popper.valid.eq(q.pop_valid),
                q.pop_ready.eq(popper.ready),
            ]
        self._srams(m, stages)

        # Errors, first named first when several pulse in one cycle (the register block keeps
        # the first pulse of a run and ignores the rest).
        errors = [(fetch.axi_error, Status.AXI_ERROR)]
        errors += [(stage.axi_error, Status.AXI_ERROR) for stage in stages.values()]
        errors += [(fetch.flag_error, Status.BAD_FLAGS)]
        errors += [(stage.error, stage.error_status) for stage in stages.values()]
        error, status = 0, Status.OK
        for pulse, code in reversed(errors):
            error, status = error | pulse, Mux(pulse, code, status)
        m.d.comb += [
            fetch.start.eq(regs.start),
            fetch.insn_addr.eq(regs.insn_addr),
            fetch.insn_count.eq(regs.insn_count),
            regs.done.eq(stages["compute"].done),
            regs.error.eq(error),
            regs.error_status.eq(status),
        ]
        assert set(stages) == {s.name.lower() for s in Stage}
        return m

    def _srams(self, m: Module, stages: dict) -> None:
        cfg = self.cfg
        load, compute, store = stages["load"], stages["compute"], stages["store"]
        shapes = sram_shapes(cfg)
        writers = {"uop": compute.uop_wr, "inp": load.inp_wr, "wgt": load.wgt_wr,
                   "acc": compute.acc_wr, "out": compute.out_wr}  # fmt: skip
        readers = {"uop": compute.uop_rd, "inp": compute.inp_rd, "wgt": compute.wgt_rd,
                   "acc": compute.acc_rd, "out": store.out_rd}  # fmt: skip
        self.srams = {}
        for buf, (width, depth) in shapes.items():
            mem = m.submodules[f"{buf}_sram"] = Memory(
                shape=width, depth=depth, init=[], attrs={"ram_style": "block"}
            )
            self.srams[buf] = mem
            wiring.connect(m, writers[buf], mem.write_port())
            wiring.connect(m, readers[buf], mem.read_port())


def sram_shapes(cfg: HWConfig) -> dict[str, tuple[int, int]]:
    """The top's SRAMs: buffer name -> (bits per element, depth)."""
    return {
        "uop": (UOP_BITS, cfg.uop_depth),
        "inp": (inp_bits(cfg), cfg.inp_depth),
        "wgt": (wgt_bits(cfg), cfg.wgt_depth),
        "acc": (acc_bits(cfg), cfg.acc_depth),
        "out": (out_bits(cfg), cfg.out_depth),
    }

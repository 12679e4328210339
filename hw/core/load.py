"""The LOAD DMA engine: DRAM -> SRAM, 2-D strided, with zero padding (one memory type each)."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..config import HWConfig
from ..isa import MemType, elem_bytes
from ..timing import BURST_BEATS
from .axi import BURST_INCR, axi_read_signature
from .common import UOP_BITS, acc_bits, check_config, inp_bits, wgt_bits, write_port
from .decode import mem_layout
from .dma import BurstPlanner, plan_transfer, sram_index_width


def sram_bits(cfg: HWConfig, memory_type: MemType) -> int:
    """Width of the SRAM word a LOAD of ``memory_type`` writes."""
    return {
        MemType.UOP: UOP_BITS,
        MemType.INP: inp_bits(cfg),
        MemType.WGT: wgt_bits(cfg),
        MemType.ACC: acc_bits(cfg),
        MemType.ACC_8BIT: acc_bits(cfg),
    }[memory_type]


class LoadDma(wiring.Component):
    """Executes LOAD instructions of one memory type: ``y_size`` rows of ``x_size`` elements from
    DRAM (row ``y`` at element ``dram_base + y * x_stride``) into SRAM at ``sram_base``, as the
    middle of a ``(y_pad_0 + y_size + y_pad_1) x (x_pad_0 + x_size + x_pad_1)`` tile whose
    border is written with zeros (sim/functional.py ``_load``). ACC_8BIT sign-extends bytes.

    Timing (the accept cycle is the issue cycle): the zero elements are written first, one per
    cycle; then the bursts, with up to ``cfg.max_outstanding_reads`` in flight: their ARs go out
    on consecutive cycles while a slot is free, a slot freeing the cycle after its burst's last
    unit; the data returns in order (one ID), one unit per cycle (dma.py) as beats arrive.
    The engine is ready the cycle after the last burst's last unit (sim/latency.py
    ``read_bursts_cycles``). An empty transfer (x_size or y_size 0) takes one cycle. A transfer
    whose tile does not fit, ``sram_base + (y_pad_0 + y_size + y_pad_1) * (x_pad_0 + x_size +
    x_pad_1)`` beyond the SRAM's depth (sim/functional.py's check), is not executed: it takes
    one cycle and pulses ``range_error`` in the next. Byte addresses wrap modulo 2**32.

    Args:
        cfg: the HWConfig (bus width ``axi_data_width``, ``max_outstanding_reads``).
        memory_type: UOP, INP, WGT, ACC or ACC_8BIT.
        burst_beats: longest burst (power of two, at most 256).

    Ports:
        cmd: LOAD instructions (the 128-bit memory layout); ``ready`` = idle. Only the transfer
            fields are read (opcode, memory_type and flags belong to the issuing stage).
        busy: a transfer is in progress.
        axi: AXI4 read master (AR and R; up to ``cfg.max_outstanding_reads`` bursts
            outstanding, all with ID 0).
        sram_wr: write port of the target SRAM.
        axi_error: pulses on each beat answered with SLVERR or DECERR (the data is written).
        range_error: pulses the cycle after accepting a transfer that does not fit the SRAM.
    """

    def __init__(self, cfg: HWConfig, memory_type: MemType, burst_beats: int = BURST_BEATS):
        self.cfg = check_config(cfg)
        if memory_type not in (MemType.UOP, MemType.INP, MemType.WGT, MemType.ACC,
                               MemType.ACC_8BIT):  # fmt: skip
            raise ValueError(
                f"memory_type must be UOP, INP, WGT, ACC or ACC_8BIT for a LOAD engine, "
                f"not {memory_type!r}"
            )
        if not isinstance(burst_beats, int) or not 1 <= burst_beats <= 256:
            raise ValueError(f"burst_beats must be an int in [1, 256], not {burst_beats!r}")
        self.memory_type = MemType(memory_type)
        self.burst_beats = burst_beats
        super().__init__(
            {
                "cmd": In(stream.Signature(mem_layout(cfg))),
                "busy": Out(1),
                "axi": Out(axi_read_signature(cfg.axi_data_width)),
                "sram_wr": In(
                    write_port(sram_index_width(cfg, memory_type), sram_bits(cfg, memory_type))
                ),
                "axi_error": Out(1),
                "range_error": Out(1),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        cfg, insn, axi, wr = self.cfg, self.cmd.payload, self.axi, self.sram_wr
        eb, bus = elem_bytes(cfg, self.memory_type), cfg.axi_data_width // 8
        plan = m.submodules.plan = BurstPlanner(eb, bus, self.burst_beats)
        plan_transfer(m, plan, insn)
        walk = m.submodules.walk = _ElementWalk(insn.shape(), len(wr.addr))
        pads = m.submodules.pads = _PadWalk(insn.shape(), len(wr.addr))
        m.d.comb += [walk.insn.eq(insn), pads.insn.eq(insn)]
        # One entry per burst whose address is out and whose data is not all in: its units, and
        # (elements narrower than the bus) its first element's place in the first beat.
        lanes = max(1, bus // eb)
        unit_bits = (plan.chunk >> plan.log_unit).bit_length()
        lane_bits = max(1, (lanes - 1).bit_length())
        inflight = m.submodules.inflight = SyncFIFO(
            width=unit_bits + lane_bits, depth=cfg.max_outstanding_reads
        )
        units, lane0 = inflight.r_data[:unit_bits], inflight.r_data[unit_bits:]
        count = Signal(unit_bits)  # units of the oldest burst already taken
        take, elem_done = Signal(), Signal()
        last_unit = count == units - 1
        m.d.comb += [
            axi.arid.eq(0),
            axi.arsize.eq(bus.bit_length() - 1),
            axi.arburst.eq(BURST_INCR),
            axi.araddr.eq(plan.addr),
            axi.arlen.eq(plan.beats - 1),
            inflight.w_data.eq(
                Cat(plan.units[:unit_bits], (plan.cursor >> plan.log_eb)[:lane_bits])
            ),
            self.axi_error.eq(take & axi.rready & axi.rresp[1]),
            wr.addr.eq(Mux(take, walk.addr, pads.addr)),
            self.busy.eq(~self.cmd.ready),
        ]
        outside = insn.sram_base + tile_elements(insn) > 1 << len(wr.addr)
        m.d.sync += self.range_error.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.comb += [plan.start.eq(1), walk.start.eq(1), pads.start.eq(1)]
                    has_pad = (insn.y_pad_0 | insn.y_pad_1 | insn.x_pad_0 | insn.x_pad_1) != 0
                    with m.If((insn.x_size == 0) | (insn.y_size == 0)):
                        m.next = "IDLE"  # a token-only NOP
                    with m.Elif(outside):
                        m.d.sync += self.range_error.eq(1)
                        m.next = "IDLE"
                    with m.Elif(has_pad):
                        m.next = "PAD"
                    with m.Else():
                        m.next = "READ"
            with m.State("PAD"):
                m.d.comb += [wr.en.eq(1), pads.step.eq(1)]  # data stays 0: take is low
                with m.If(pads.last):
                    m.next = "READ"
            with m.State("READ"):
                # Addresses run ahead of the data while a slot is free (a slot frees the cycle
                # after its burst's last unit); the data of the oldest burst is taken meanwhile.
                m.d.comb += [
                    axi.arvalid.eq(plan.more & inflight.w_rdy),
                    inflight.w_en.eq(axi.arvalid & axi.arready),
                    plan.advance.eq(axi.arvalid & axi.arready),
                    take.eq(axi.rvalid & inflight.r_rdy),
                    inflight.r_en.eq(take & last_unit),
                ]
                data = self._receive(m, (lane0 + count)[:lane_bits], last_unit, take, elem_done)
                m.d.comb += [
                    wr.en.eq(elem_done),
                    wr.data.eq(Mux(take, data, 0)),
                    walk.step.eq(elem_done),
                ]
                with m.If(take):
                    m.d.sync += count.eq(Mux(last_unit, 0, count + 1))
                    with m.If(last_unit & ~plan.more & (inflight.level == 1)):
                        m.next = "IDLE"
        return m

    def _receive(self, m: Module, lane, last_unit, take, elem_done):
        """Drive ``rready`` and ``elem_done``; return the element's SRAM word."""
        cfg, axi = self.cfg, self.axi
        eb, bus = elem_bytes(cfg, self.memory_type), cfg.axi_data_width // 8
        if eb < bus:  # several elements per beat: one per cycle, beat consumed after its last
            m.d.comb += [
                axi.rready.eq(last_unit | (lane == bus // eb - 1)),
                elem_done.eq(take),
            ]
            return self._convert(axi.rdata.word_select(lane, eb * 8))
        ratio = eb // bus  # beats per element
        m.d.comb += axi.rready.eq(1)
        if ratio == 1:
            m.d.comb += elem_done.eq(take)
            return self._convert(axi.rdata)
        k = Signal(range(ratio))
        held = Signal((ratio - 1) * bus * 8)  # the element's earlier beats, oldest lowest
        m.d.comb += elem_done.eq(take & (k == ratio - 1))
        with m.If(take):
            m.d.sync += [
                k.eq(Mux(k == ratio - 1, 0, k + 1)),
                held.eq(Cat(held[bus * 8 :], axi.rdata)),
            ]
        return self._convert(Cat(held, axi.rdata))

    def _convert(self, data):
        """An element's DRAM bytes as the SRAM word (ACC_8BIT: bytes sign-extended to lanes)."""
        if self.memory_type != MemType.ACC_8BIT:
            return data
        width = self.cfg.acc_width
        return Cat(*(_sext(data[8 * i : 8 * i + 8], width) for i in range(len(data) // 8)))


def tile_elements(insn) -> Value:
    """``(y_pad_0 + y_size + y_pad_1) * (x_pad_0 + x_size + x_pad_1)``, the SRAM entries a LOAD
    writes, as ``x_size * y_size`` (the product the burst planner already has) plus products
    with the 5-bit pad sums, built from adders: no extra DSP for the range check."""
    nx = insn.x_pad_0 + insn.x_size + insn.x_pad_1
    return (
        insn.x_size * insn.y_size
        + _times_narrow(insn.y_size, insn.x_pad_0 + insn.x_pad_1)
        + _times_narrow(nx, insn.y_pad_0 + insn.y_pad_1)
    )


def _times_narrow(value: Value, narrow: Value) -> Value:
    """``value * narrow`` by shift and add, for a ``narrow`` of a few bits."""
    total: Value = Const(0)
    for k in range(len(narrow)):
        total = total + (Mux(narrow[k], value, 0) << k)
    return total


def _sext(byte, width: int):
    return Cat(byte, byte[7].replicate(width - 8))


class _ElementWalk(wiring.Component):
    """SRAM index ``addr`` of each transferred element: the middle of the padded tile, row by
    row. ``start`` (a pulse) loads the LOAD instruction ``insn``; ``step`` moves to the next."""

    def __init__(self, layout, width: int) -> None:
        super().__init__({"insn": In(layout), "start": In(1), "step": In(1), "addr": Out(width)})

    def elaborate(self, platform) -> Module:
        m = Module()
        insn, addr = self.insn, self.addr
        x = Signal(16)
        x_size = Signal(16)
        row_gap = Signal(5)  # x_pad_1 + x_pad_0: SRAM entries skipped between rows
        with m.If(self.start):
            nx = insn.x_pad_0 + insn.x_size + insn.x_pad_1
            m.d.sync += [
                addr.eq(insn.sram_base + insn.y_pad_0 * nx + insn.x_pad_0),
                x.eq(0),
                x_size.eq(insn.x_size),
                row_gap.eq(insn.x_pad_0 + insn.x_pad_1),
            ]
        with m.Elif(self.step):
            with m.If(x == x_size - 1):
                m.d.sync += [x.eq(0), addr.eq(addr + row_gap + 1)]
            with m.Else():
                m.d.sync += [x.eq(x + 1), addr.eq(addr + 1)]
        return m


class _PadWalk(wiring.Component):
    """SRAM index ``addr`` of each zero element, in order: ``start`` (a pulse) loads the LOAD
    instruction ``insn``, ``step`` moves to the next; ``last``: ``addr`` is the final one.

    The walk visits tile positions (y, x) in row-major order and jumps over the data block's
    row segments; when the pads have no columns (x_pad_0 = x_pad_1 = 0) it jumps over the whole
    block at once, so every step writes a pad.
    """

    def __init__(self, layout, width: int) -> None:
        super().__init__(
            {"insn": In(layout), "start": In(1), "step": In(1), "addr": Out(width),
             "last": Out(1)}
        )  # fmt: skip

    @staticmethod
    def _skip(f, y, x, a):
        """(y, x, a) moved past the data segment that starts there, if one does."""
        hit = (y >= f["y0"]) & (y < f["y1"]) & (x == f["x0"])
        no_cols = f["x1"] == f["nx"]  # x_pad_1 == 0: the segment ends its row
        whole = no_cols & (f["x0"] == 0)  # no pad columns at all: skip the whole block
        y2 = Mux(hit, Mux(whole, f["y1"], Mux(no_cols, y + 1, y)), y)
        x2 = Mux(hit & no_cols, 0, Mux(hit, f["x1"], x))
        a2 = Mux(hit, a + Mux(whole, f["n"], f["x_size"]), a)
        return y2, x2, a2

    def elaborate(self, platform) -> Module:
        m = Module()
        insn, addr = self.insn, self.addr
        y = Signal(17)
        x = Signal(17)
        given = {
            "y0": insn.y_pad_0, "y1": insn.y_pad_0 + insn.y_size, "x0": insn.x_pad_0,
            "x1": insn.x_pad_0 + insn.x_size, "nx": insn.x_pad_0 + insn.x_size + insn.x_pad_1,
            "ny": insn.y_pad_0 + insn.y_size + insn.y_pad_1, "x_size": insn.x_size,
            "n": insn.x_size * insn.y_size,
        }  # fmt: skip
        f = {k: Signal(32 if k == "n" else 17, name=k) for k in given}  # as loaded by start
        wrap = x + 1 == f["nx"]
        y_next, x_next, a_next = self._skip(f, Mux(wrap, y + 1, y), Mux(wrap, 0, x + 1), addr + 1)
        m.d.comb += self.last.eq(y_next == f["ny"])
        with m.If(self.start):
            y0, x0, a0 = self._skip(given, 0, 0, insn.sram_base)
            m.d.sync += [f[k].eq(v) for k, v in given.items()]
            m.d.sync += [y.eq(y0), x.eq(x0), addr.eq(a0)]
        with m.Elif(self.step):
            m.d.sync += [y.eq(y_next), x.eq(x_next), addr.eq(a_next)]
        return m

"""What the 2-D DMA engines (load.py, store.py) share: burst planning and the element walk.

A LOAD or STORE moves ``y_size`` rows of ``x_size`` elements; DRAM row ``y`` starts at element
``dram_base + y * x_stride``. The DRAM side is cut into **spans** (one span of all rows when they
are contiguous, ``y_size == 1`` or ``x_stride == x_size``; else one per row) and each span into
**bursts** at every ``burst_bytes``-aligned boundary (``min(4096, burst_beats * bus_bytes)``), so
a burst never crosses a 4 KiB page. That is sim/latency.py's ``dma_bursts`` rule exactly.
A burst moves **units** of ``min(elem_bytes, bus_bytes)`` bytes, one per cycle: a unit is an
element when elements are narrower than the bus (several per beat), else a beat.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import HWConfig
from ..isa import MEM_DRAM_WIDTH, MEM_SIZE_WIDTH, MemType
from ..timing import PAGE_BYTES

AXI_ADDR_WIDTH = 32
TRANSFER_FIELDS = ("dram_base", "y_size", "x_size", "x_stride")


def log2_exact(value: int, what: str) -> int:
    if value < 1 or value & (value - 1):
        raise ValueError(f"{what} must be a power of two, not {value!r}")
    return value.bit_length() - 1


class BurstPlanner(wiring.Component):
    """Walks the spans of one transfer and hands out bursts.

    ``start`` (a pulse) loads the transfer described by ``dram_base``, ``y_size``, ``x_size``
    and ``x_stride`` (a MemInsn's fields, in elements); ``start_span`` loads one contiguous span
    of ``span_bytes`` bytes at byte address ``span_base``. ``addr``/``beats``/``units``/``nbytes``
    describe the current burst, ``cursor`` is its first byte; ``advance`` (a pulse) moves to the
    next; ``more`` says whether a burst is left. Byte addresses wrap at ``AXI_ADDR_WIDTH`` bits.
    """

    def __init__(self, eb: int, bus_bytes: int, burst_beats: int) -> None:
        self.log_eb = log2_exact(eb, "elem_bytes")
        self.log_bus = log2_exact(bus_bytes, "bus_bytes")
        self.log_unit = min(self.log_eb, self.log_bus)
        log2_exact(burst_beats, "burst_beats")
        self.chunk = min(PAGE_BYTES, burst_beats * bus_bytes)
        w = AXI_ADDR_WIDTH
        super().__init__(
            {
                "start": In(1),
                "dram_base": In(MEM_DRAM_WIDTH),
                "y_size": In(MEM_SIZE_WIDTH),
                "x_size": In(MEM_SIZE_WIDTH),
                "x_stride": In(MEM_SIZE_WIDTH),
                "start_span": In(1),
                "span_base": In(w),
                "span_bytes": In(w + 1),
                "advance": In(1),
                "cursor": Out(w),
                "addr": Out(w),
                "beats": Out(9),
                "units": Out(w + 1),
                "nbytes": Out(w + 1),
                "more": Out(1),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        w, lb, le = AXI_ADDR_WIDTH, self.log_bus, self.log_eb
        s = self.cursor  # next byte of the current span
        span_left = Signal(w + 1)  # bytes left in it
        row_start = Signal(w)
        rows_left = Signal(16)  # further spans after this one
        row_bytes = Signal(w + 1)
        stride_bytes = Signal(w)
        end = Signal(w + 1)
        chunk_end = (s | (self.chunk - 1)) + 1
        m.d.comb += [
            end.eq(Mux(span_left < chunk_end - s, s + span_left, chunk_end)),
            self.nbytes.eq(end - s),
            self.addr.eq(s & ~((1 << lb) - 1)),
            self.beats.eq(((end - 1) >> lb) - (s >> lb) + 1),
            self.units.eq(self.nbytes >> self.log_unit),
            self.more.eq((span_left != 0) | (rows_left != 0)),
        ]
        with m.If(self.start):
            base = (self.dram_base << le)[:w]
            contiguous = (self.y_size == 1) | (self.x_stride == self.x_size)
            total = ((self.x_size * self.y_size) << le)[: w + 1]
            m.d.sync += [
                s.eq(base),
                row_start.eq(base),
                row_bytes.eq((self.x_size << le)[: w + 1]),
                stride_bytes.eq(self.x_stride << le),
                span_left.eq(Mux(contiguous, total, (self.x_size << le)[: w + 1])),
                rows_left.eq(Mux(contiguous | (self.y_size == 0), 0, self.y_size - 1)),
            ]
        with m.If(self.start_span):
            m.d.sync += [
                s.eq(self.span_base),
                row_start.eq(self.span_base),
                span_left.eq(self.span_bytes),
                rows_left.eq(0),
            ]
        with m.If(self.advance):
            left = span_left - self.nbytes
            with m.If((left == 0) & (rows_left != 0)):
                nxt = row_start + stride_bytes
                m.d.sync += [
                    row_start.eq(nxt),
                    s.eq(nxt),
                    span_left.eq(row_bytes),
                    rows_left.eq(rows_left - 1),
                ]
            with m.Else():
                m.d.sync += [s.eq(s + self.nbytes), span_left.eq(left)]
        return m


def plan_transfer(m: Module, plan: BurstPlanner, insn) -> None:
    """Feed a MemInsn view's transfer fields to ``plan`` (it loads them on ``start``)."""
    m.d.comb += [getattr(plan, f).eq(getattr(insn, f)) for f in TRANSFER_FIELDS]


def sram_index_width(cfg: HWConfig, memory_type: MemType) -> int:
    """Index bits of the SRAM a memory type addresses."""
    return {
        MemType.UOP: cfg.log_uop_depth,
        MemType.INP: cfg.log_inp_depth,
        MemType.WGT: cfg.log_wgt_depth,
        MemType.ACC: cfg.log_acc_depth,
        MemType.ACC_8BIT: cfg.log_acc_depth,
        MemType.OUT: cfg.log_acc_depth,
    }[memory_type]

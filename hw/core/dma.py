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

from ..config import HWConfig
from ..isa import MemType
from ..timing import PAGE_BYTES

AXI_ADDR_WIDTH = 32


def log2_exact(value: int, what: str) -> int:
    if value < 1 or value & (value - 1):
        raise ValueError(f"{what} must be a power of two, not {value!r}")
    return value.bit_length() - 1


class BurstPlanner:
    """Walks the spans of one transfer and hands out bursts (logic built into ``m``).

    ``start(insn)`` (comb condition) loads a MemInsn view; ``addr``/``beats``/``units`` describe
    the current burst; ``advance`` (comb condition) moves to the next; ``more`` says whether a
    burst is left. Byte addresses wrap at ``AXI_ADDR_WIDTH`` bits.
    """

    def __init__(self, m: Module, eb: int, bus_bytes: int, burst_beats: int) -> None:
        self.m = m
        self.log_eb = log2_exact(eb, "elem_bytes")
        self.log_bus = log2_exact(bus_bytes, "bus_bytes")
        self.log_unit = min(self.log_eb, self.log_bus)
        log2_exact(burst_beats, "burst_beats")
        self.chunk = min(PAGE_BYTES, burst_beats * bus_bytes)
        w = AXI_ADDR_WIDTH
        self.s = Signal(w)  # next byte of the current span
        self.span_left = Signal(w + 1)  # bytes left in it
        self.row_start = Signal(w)
        self.rows_left = Signal(16)  # further spans after this one
        self.row_bytes = Signal(w + 1)
        self.stride_bytes = Signal(w)
        end = Signal(w + 1)
        chunk_end = (self.s | (self.chunk - 1)) + 1
        m.d.comb += end.eq(Mux(self.span_left < chunk_end - self.s, self.s + self.span_left,
                               chunk_end))  # fmt: skip
        self.nbytes = Signal(w + 1)
        m.d.comb += self.nbytes.eq(end - self.s)
        self.addr = Signal(w)
        self.beats = Signal(9)
        self.units = Signal(w + 1)
        lb = self.log_bus
        m.d.comb += [
            self.addr.eq(self.s & ~((1 << lb) - 1)),
            self.beats.eq(((end - 1) >> lb) - (self.s >> lb) + 1),
            self.units.eq(self.nbytes >> self.log_unit),
        ]
        self.more = Signal()
        m.d.comb += self.more.eq((self.span_left != 0) | (self.rows_left != 0))

    def start(self, insn) -> None:
        """Load the transfer of ``insn`` (a MemInsn view); call under the accepting condition."""
        le = self.log_eb
        base = (insn.dram_base << le)[:AXI_ADDR_WIDTH]
        row = (insn.x_size << le)[: AXI_ADDR_WIDTH + 1]
        contiguous = (insn.y_size == 1) | (insn.x_stride == insn.x_size)
        total = ((insn.x_size * insn.y_size) << le)[: AXI_ADDR_WIDTH + 1]
        self.m.d.sync += [
            self.s.eq(base),
            self.row_start.eq(base),
            self.row_bytes.eq(row),
            self.stride_bytes.eq(insn.x_stride << le),
            self.span_left.eq(Mux(contiguous, total, row)),
            self.rows_left.eq(Mux(contiguous | (insn.y_size == 0), 0, insn.y_size - 1)),
        ]

    def start_span(self, base, nbytes) -> None:
        """Load one contiguous span of ``nbytes`` bytes at byte address ``base``."""
        self.m.d.sync += [
            self.s.eq(base),
            self.row_start.eq(base),
            self.span_left.eq(nbytes),
            self.rows_left.eq(0),
        ]

    def advance(self) -> None:
        """Step past the current burst; call under the condition that consumes it."""
        m = self.m
        left = self.span_left - self.nbytes
        with m.If((left == 0) & (self.rows_left != 0)):
            nxt = self.row_start + self.stride_bytes
            m.d.sync += [
                self.row_start.eq(nxt),
                self.s.eq(nxt),
                self.span_left.eq(self.row_bytes),
                self.rows_left.eq(self.rows_left - 1),
            ]
        with m.Else():
            m.d.sync += [self.s.eq(self.s + self.nbytes), self.span_left.eq(left)]


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

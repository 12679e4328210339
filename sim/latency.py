"""Closed-form latencies of each instruction on the accelerator, and the timing parameters.

Every constant is a named field of ``TimingParams``; the RTL's own constants and per-block
formulas (GEMM, ALU) are hw/timing.py's, imported here, which tests hold the Amaranth blocks to.
``sim/timing.py`` composes them into whole-program schedules.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..hw.config import HWConfig
from ..hw.isa import AluInsn, GemmInsn, Insn, MemInsn, Opcode, Stage, elem_bytes
from ..hw.timing import (
    ALU_LATENCY,
    BURST_BEATS,
    FETCH_BUFFER_BURSTS,
    GEMM_LATENCY,
    PAGE_BYTES,
    alu_cycles,
    alu_ii,
    gemm_cycles,
)

STAGES = (Stage.LOAD, Stage.COMPUTE, Stage.STORE)


@dataclass(frozen=True)
class TimingParams:
    """Every latency of the timing model, in clock cycles unless named otherwise.

    ``bus_bytes``, the queue depths, ``clock_mhz`` and ``max_outstanding_reads`` come from the
    HWConfig (``for_config`` fills them); the DRAM latencies and ``burst_beats`` are knobs
    HWConfig does not have; the rest are the RTL's documented timings.

    Args:
        bus_bytes: AXI data bus width in bytes (``HWConfig.axi_data_width / 8``); one beat per
            cycle per port.
        insn_queue_depth: entries of each command queue (``HWConfig.insn_queue_depth``).
        dep_queue_depth: tokens each token queue holds (``HWConfig.dep_queue_depth``).
        clock_mhz: the clock, for GOPS and trace timestamps (``HWConfig.clock_mhz``).
        dram_read_latency: cycles from a read burst's request to its first data beat.
        dram_write_latency: cycles from a write burst's last data beat to its write response.
        burst_beats: the longest AXI burst, in beats (16 for AXI3 ports such as Zynq-7000's
            ACP/HP; 256 for AXI4). Bursts never cross a 4 KiB page, nor a multiple of
            ``burst_beats * bus_bytes`` (so a burst is one aligned chunk).
        max_outstanding_reads: read bursts a LOAD engine keeps in flight
            (``HWConfig.max_outstanding_reads``): burst k's address goes out once burst
            k - max_outstanding_reads has delivered its last unit; its data follows
            ``dram_read_latency`` cycles after its address, and after the previous burst's
            data (one R channel, in order).
        fetch_buffer_bursts: bursts of instructions fetch buffers; it requests burst b once
            burst b-1 has arrived and burst b-fetch_buffer_bursts is fully dispatched.
        cmd_queue_latency: cycles from a command-queue write to the earliest pop (2 for
            hw/core/queues.py ``CommandQueue``, a ``SyncFIFOBuffered``).
        token_latency: cycles from a token push to the earliest pop (1 for ``TokenQueue``).
        issue_cycles: cycles a stage spends popping and decoding an instruction before its
            unit (DMA engine, GEMM core, ALU) accepts it.
        pad_cycles: cycles to write one zero-padding element into SRAM.
        gemm_latency: GEMM pipeline depth, UOP read to ACC write (hw/timing.py
            ``GEMM_LATENCY``).
        alu_latency: ALU pipeline depth (hw/timing.py ``ALU_LATENCY``).
        finish_cycles: cycles from FINISH's issue to ``done``.
    """

    bus_bytes: int = 8
    insn_queue_depth: int = 512
    dep_queue_depth: int = 1024
    clock_mhz: float = 100.0
    dram_read_latency: int = 24
    dram_write_latency: int = 8
    burst_beats: int = BURST_BEATS
    max_outstanding_reads: int = 1
    fetch_buffer_bursts: int = FETCH_BUFFER_BURSTS
    cmd_queue_latency: int = 2
    token_latency: int = 1
    issue_cycles: int = 1
    pad_cycles: int = 1
    gemm_latency: int = GEMM_LATENCY
    alu_latency: int = ALU_LATENCY
    finish_cycles: int = 1

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            lo = 0 if f.name.endswith(("latency", "cycles")) else 1
            if f.name == "clock_mhz":
                ok = isinstance(value, (int, float)) and value > 0
            else:
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= lo
            if not ok:
                raise ValueError(
                    f"TimingParams.{f.name} must be {'a positive number' if lo else 'an int >= 0'}"
                    f", not {value!r}"
                )
        if self.bus_bytes & (self.bus_bytes - 1) or self.burst_beats & (self.burst_beats - 1):
            raise ValueError(
                f"TimingParams.bus_bytes and burst_beats must be powers of two, not "
                f"{self.bus_bytes} and {self.burst_beats}"
            )

    @classmethod
    def for_config(cls, cfg: HWConfig, **overrides: Any) -> TimingParams:
        """Parameters for ``cfg``: bus width, queue depths, outstanding reads and clock from it,
        the rest defaults."""
        derived = dict(
            bus_bytes=cfg.axi_data_width // 8,
            max_outstanding_reads=cfg.max_outstanding_reads,
            insn_queue_depth=cfg.insn_queue_depth,
            dep_queue_depth=cfg.dep_queue_depth,
            clock_mhz=float(cfg.clock_mhz),
        )
        return cls(**{**derived, **overrides})

    @property
    def burst_bytes(self) -> int:
        """The aligned chunk one burst covers at most."""
        return min(PAGE_BYTES, self.burst_beats * self.bus_bytes)

    @property
    def peak_bandwidth_gbs(self) -> float:
        """Bytes per second of one AXI port at one beat per cycle, in GB/s."""
        return self.bus_bytes * self.clock_mhz / 1000.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---- closed-form latencies -----------------------------------------------------------------


def loop_steps(insn: GemmInsn | AluInsn) -> int:
    """Micro-op steps of a GEMM/ALU instruction (hw/core/loop.py ``UopLoop``)."""
    return insn.iter_out * insn.iter_in * max(0, insn.uop_end - insn.uop_bgn)


def _spans(insn: MemInsn, eb: int) -> tuple[np.ndarray | int, int]:
    """The contiguous DRAM spans of a 2-D transfer: (start byte(s), bytes per span).

    Rows that are contiguous in DRAM (``y_size == 1`` or ``x_stride == x_size``) form one span;
    else each row is one (the starts are then an array).
    """
    start, row = insn.dram_base * eb, insn.x_size * eb
    if insn.y_size == 1 or insn.x_stride == insn.x_size:
        return start, row * insn.y_size
    return start + insn.x_stride * eb * np.arange(insn.y_size, dtype=np.int64), row


def dma_bursts(insn: MemInsn, eb: int, p: TimingParams) -> int:
    """AXI bursts of a 2-D transfer: spans (``_spans``) split at every ``burst_bytes``-aligned
    boundary."""
    if insn.x_size == 0 or insn.y_size == 0:
        return 0
    chunk = p.burst_bytes
    starts, span = _spans(insn, eb)
    if isinstance(starts, int):
        return (starts + span - 1) // chunk - starts // chunk + 1
    if (insn.x_stride * eb) % chunk == 0:
        start = int(starts[0])
        return insn.y_size * ((start + span - 1) // chunk - start // chunk + 1)
    return int(((starts + span - 1) // chunk - starts // chunk + 1).sum())


def dma_burst_bytes(insn: MemInsn, eb: int, p: TimingParams) -> np.ndarray:
    """The bytes of each AXI burst of a 2-D transfer, in issue order (``dma_bursts`` of them).

    Example:
        >>> from tensorforge.hw.isa import MemInsn, MemType, Opcode
        >>> insn = MemInsn(Opcode.LOAD, MemType.INP, 0, 3, 1, 20, 20)  # 20 16-byte elements
        >>> dma_burst_bytes(insn, 16, TimingParams()).tolist()  # 128-byte chunks from byte 48
        [80, 128, 112]
    """
    if insn.x_size == 0 or insn.y_size == 0:
        return np.zeros(0, dtype=np.int64)
    chunk = p.burst_bytes
    starts, span = _spans(insn, eb)
    starts = np.atleast_1d(np.asarray(starts, dtype=np.int64))
    ends = starts + span
    counts = (ends - 1) // chunk - starts // chunk + 1
    which = np.repeat(np.arange(len(starts)), counts)  # each burst's span
    nth = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    first = (starts[which] // chunk + nth) * chunk  # the burst's aligned chunk
    return np.minimum(ends[which], first + chunk) - np.maximum(starts[which], first)


def dma_data_cycles(n_elems: int, eb: int, p: TimingParams) -> int:
    """Cycles of the data phase: one beat per cycle, and at most one SRAM element per cycle."""
    return n_elems if eb < p.bus_bytes else n_elems * (eb // p.bus_bytes)


def read_bursts_cycles(units: np.ndarray, latency: int, outstanding: int) -> int:
    """Cycles from a LOAD's first read address to the cycle after its last unit of data.

    ``units[k]`` is burst k's data cycles (one unit each, dma.py). Burst k's address goes out
    at ``a[k] = max(a[k-1] + 1, e[k-outstanding] + 1)`` (the cycle after a slot frees), its data
    runs from ``max(a[k] + latency, e[k-1] + 1)`` to ``e[k]``. With one outstanding burst that
    is ``len(units) * latency + sum(units)``.

    Example:
        >>> read_bursts_cycles(np.array([16, 16, 16]), 24, 1), read_bursts_cycles(
        ...     np.array([16, 16, 16]), 24, 4)
        (120, 72)
    """
    if outstanding == 1:
        return len(units) * latency + int(units.sum())
    ar, ends = -1, []  # ends[k]: the cycle of burst k's last unit
    for k, u in enumerate(units.tolist()):
        ar = max(ar + 1, ends[k - outstanding] + 1) if k >= outstanding else ar + 1
        ends.append(max(ar + latency, ends[-1] + 1 if ends else 0) + u - 1)
    return ends[-1] + 1 if ends else 0


def load_cycles(insn: MemInsn, cfg: HWConfig, p: TimingParams) -> int:
    """A LOAD: issue, zero-padding writes, then the read bursts, up to
    ``p.max_outstanding_reads`` in flight (``read_bursts_cycles``)."""
    eb = elem_bytes(cfg, insn.memory_type)
    n = insn.x_size * insn.y_size
    if n == 0:
        return p.issue_cycles  # a token-only NOP
    ny = insn.y_pad_0 + insn.y_size + insn.y_pad_1
    nx = insn.x_pad_0 + insn.x_size + insn.x_pad_1
    head = p.issue_cycles + (ny * nx - n) * p.pad_cycles
    if p.max_outstanding_reads == 1:
        return head + dma_bursts(insn, eb, p) * p.dram_read_latency + dma_data_cycles(n, eb, p)
    units = dma_burst_bytes(insn, eb, p) // min(eb, p.bus_bytes)
    return head + read_bursts_cycles(units, p.dram_read_latency, p.max_outstanding_reads)


def store_cycles(insn: MemInsn, cfg: HWConfig, p: TimingParams) -> int:
    """A STORE: issue, then write bursts one at a time (data, then the write response)."""
    eb = cfg.out_elem_bytes
    n = insn.x_size * insn.y_size
    if n == 0:
        return p.issue_cycles
    return (
        p.issue_cycles + dma_bursts(insn, eb, p) * p.dram_write_latency + dma_data_cycles(n, eb, p)
    )


def insn_cycles(insn: Insn, cfg: HWConfig, p: TimingParams) -> int:
    """Cycles an instruction occupies its stage (without waits for tokens or pushes)."""
    if isinstance(insn, MemInsn):
        if insn.opcode == Opcode.STORE:
            return store_cycles(insn, cfg, p)
        return load_cycles(insn, cfg, p)
    if isinstance(insn, GemmInsn):
        return p.issue_cycles + gemm_cycles(loop_steps(insn), p.gemm_latency)
    if isinstance(insn, AluInsn):
        ii = alu_ii(insn.use_imm, insn.reset_reg)
        return p.issue_cycles + alu_cycles(loop_steps(insn), ii, p.alu_latency)
    return p.issue_cycles + p.finish_cycles


def unit_of(insn: Insn) -> str:
    """The unit that executes an instruction: fetch's routing refined (for stats and traces)."""
    if isinstance(insn, MemInsn):
        return f"dma_{insn.memory_type.name.lower()}"  # dma_out for STORE
    if isinstance(insn, GemmInsn):
        return "gemm"
    if isinstance(insn, AluInsn):
        return "alu"
    return "finish"

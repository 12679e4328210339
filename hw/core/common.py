"""Helpers shared by the compute blocks: SRAM port signatures, lane views, ACC forwarding."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, Value, signed
from amaranth.lib import data, wiring
from amaranth.lib.memory import ReadPort, WritePort
from amaranth.lib.wiring import In, Out

from ..config import HWConfig
from ..isa import UOP_BYTES

UOP_BITS = UOP_BYTES * 8


def inp_bits(cfg: HWConfig) -> int:
    """Bits of one INP element (BATCH x BLOCK_IN lanes, lane 0 in the low bits)."""
    return cfg.batch * cfg.block_in * cfg.inp_width


def wgt_bits(cfg: HWConfig) -> int:
    """Bits of one WGT element (BLOCK_OUT x BLOCK_IN lanes, row-major [out][in])."""
    return cfg.block_out * cfg.block_in * cfg.wgt_width


def acc_bits(cfg: HWConfig) -> int:
    """Bits of one ACC element (BATCH x BLOCK_OUT lanes of acc_width)."""
    return cfg.batch * cfg.block_out * cfg.acc_width


def out_bits(cfg: HWConfig) -> int:
    """Bits of one OUT element (BATCH x BLOCK_OUT lanes of out_width)."""
    return cfg.batch * cfg.block_out * cfg.out_width


def read_port(addr_width: int, bits: int) -> ReadPort.Signature:
    """A synchronous SRAM read port as seen from the memory (flip it with ``In`` to use it)."""
    return ReadPort.Signature(addr_width=addr_width, shape=bits)


def write_port(addr_width: int, bits: int) -> WritePort.Signature:
    """A whole-element SRAM write port as seen from the memory."""
    return WritePort.Signature(addr_width=addr_width, shape=bits)


def lanes(value: Value, rows: int, cols: int, width: int) -> data.View:
    """A ``rows x cols`` array view of signed ``width``-bit lanes packed LSB first, row-major."""
    return data.View(data.ArrayLayout(data.ArrayLayout(signed(width), cols), rows), value)


def tree_sum(values: list[Value]) -> Value:
    """A balanced adder tree (yosys does not rebalance a linear chain)."""
    assert values, "tree_sum needs at least one value"
    while len(values) > 1:
        pairs = [values[i] + values[i + 1] for i in range(0, len(values) - 1, 2)]
        values = pairs + values[len(values) - len(values) % 2 :]
    return values[0]


class AccForward(wiring.Component):
    """Bypass for ACC read-after-write hazards in a pipeline with one ACC write per cycle.

    A value read from ACC at cycle ``r`` (registered port, old data on a same-cycle write) and
    used at cycle ``r + 2`` misses the writes made at cycles ``r`` and ``r + 1``. The block
    remembers the last two writes seen on ``acc_wr`` (connect it to the core's ACC write port);
    ``data`` is the newest of them to ``addr``, or else ``sram``, the value read for ``addr``.
    Forwarding the write at ``r`` is harmless with a write-first SRAM, so the core is correct
    with either kind of port.
    """

    def __init__(self, addr_width: int, bits: int) -> None:
        super().__init__(
            {
                "acc_wr": Out(write_port(addr_width, bits)),
                "addr": In(addr_width),
                "sram": In(bits),
                "data": Out(bits),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        wr = self.acc_wr
        (en1, addr1, data1), (en2, addr2, data2) = (
            (Signal(name=f"en{i}"), Signal.like(wr.addr, name=f"addr{i}"),
             Signal.like(wr.data, name=f"data{i}"))
            for i in (1, 2)
        )  # fmt: skip
        m.d.sync += [
            en1.eq(wr.en), addr1.eq(wr.addr), data1.eq(wr.data),
            en2.eq(en1), addr2.eq(addr1), data2.eq(data1),
        ]  # fmt: skip
        older = Mux(en2 & (addr2 == self.addr), data2, self.sram)
        m.d.comb += self.data.eq(Mux(en1 & (addr1 == self.addr), data1, older))
        return m


def drop_after_range_error(m: Module, start: Value, hit: Value, error: Value, abort: Value):
    """A core's reaction to an out-of-range step; returns the flag "the instruction is dropped".

    ``hit`` (comb) says the step in the checking pipeline stage has an index beyond its buffer.
    The first hit of an instruction pulses ``error``; every hit drives ``abort`` (the loop
    stops). The returned flag stays set from the cycle after the first hit until the next
    ``start``: the core drops that step and every later one before they write.
    """
    dropped = Signal()
    with m.If(start):
        m.d.sync += dropped.eq(0)
    with m.Elif(hit):
        m.d.sync += dropped.eq(1)
    m.d.comb += [error.eq(hit & ~dropped), abort.eq(hit)]
    return dropped


def check_config(cfg: object) -> HWConfig:
    """Return ``cfg`` if it is a HWConfig; raise TypeError naming what it is otherwise."""
    if not isinstance(cfg, HWConfig):
        raise TypeError(f"cfg must be a HWConfig, not {cfg!r}")
    return cfg

"""The AXI-Lite register block: hw/regmap.py's registers, the launch protocol's hardware side."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import HWConfig
from ..regmap import (
    HW_ID_MAGIC,
    ISA_VERSION,
    REG_BYTES,
    REGISTERS,
    REGMAP_BYTES,
    Ctrl,
    Status,
    config_hash,
)
from .axi import RESP_OKAY, axi_lite_signature
from .common import check_config

ADDR_WIDTH = (REGMAP_BYTES - 1).bit_length()
STATUS_WIDTH = max(Status).bit_length()


def _off(name: str) -> int:
    return REGISTERS[name].offset


class RegBlock(wiring.Component):
    """AXI-Lite slave holding the registers of ``hw.regmap.REGISTERS`` (offsets read from there).

    Writing CTRL with START (byte 0 strobed) while not BUSY latches INSN_ADDR and INSN_COUNT onto
    ``insn_addr``/``insn_count``, pulses ``start`` for one cycle, sets BUSY, clears DONE, ERROR,
    STATUS and CYCLES. A ``done`` pulse sets DONE and CYCLES = (cycle of ``done``) - (cycle of
    ``start``); an ``error`` pulse sets ERROR and STATUS = ``error_status`` (CYCLES stays 0, as
    in sim/regblock.py); both clear BUSY. Writes to read-only registers and to
    unmapped offsets are ignored; unmapped offsets read 0; every response is OKAY. Writes honour
    ``wstrb`` per byte.

    Args:
        cfg: the HWConfig the core is built for (its ``config_hash`` is CONFIG_HASH).

    Ports:
        s_axil: AXI-Lite slave, 32-bit data, ``ADDR_WIDTH``-bit byte address.
        start: one-cycle pulse that launches the core.
        insn_addr, insn_count: the instruction stream, latched at START.
        busy: BUSY.
        done, error, error_status: the core's completion (one-cycle pulses while BUSY).
    """

    def __init__(self, cfg: HWConfig) -> None:
        self.cfg = check_config(cfg)
        super().__init__(
            {
                "s_axil": In(axi_lite_signature(ADDR_WIDTH)),
                "start": Out(1),
                "insn_addr": Out(64),
                "insn_count": Out(32),
                "busy": Out(1),
                "done": In(1),
                "error": In(1),
                "error_status": In(STATUS_WIDTH),
            }
        )

    def elaborate(self, platform) -> Module:
        m = Module()
        rw = {name: Signal(32, name=name.lower()) for name in ("INSN_ADDR_LO", "INSN_ADDR_HI",
                                                                 "INSN_COUNT")}  # fmt: skip
        done, error = Signal(), Signal()
        status = Signal(STATUS_WIDTH)
        cycles = Signal(64)  # CYCLES: 0 from START, the count once DONE
        count = Signal(64)
        ctrl = Signal(32)
        m.d.comb += ctrl.eq(
            (done * int(Ctrl.DONE)) | (self.busy * int(Ctrl.BUSY)) | (error * int(Ctrl.ERROR))
        )
        values = {
            "CTRL": ctrl, "STATUS": status, **rw,
            "CYCLES_LO": cycles[:32], "CYCLES_HI": cycles[32:],
            "HW_ID": Const(HW_ID_MAGIC, 32), "ISA_VERSION": Const(ISA_VERSION, 32),
            "CONFIG_HASH": Const(config_hash(self.cfg), 32),
        }  # fmt: skip
        assert set(values) == set(REGISTERS), "every register of hw.regmap must be implemented"
        start = self._write_channel(m, rw)
        self._read_channel(m, values)

        m.d.sync += self.start.eq(0)
        with m.If(start & ~self.busy):
            m.d.sync += [
                self.start.eq(1),
                self.busy.eq(1),
                done.eq(0),
                error.eq(0),
                status.eq(Status.OK),
                cycles.eq(0),
                count.eq(0),
                self.insn_addr.eq(Cat(rw["INSN_ADDR_LO"], rw["INSN_ADDR_HI"])),
                self.insn_count.eq(rw["INSN_COUNT"]),
            ]
        with m.Elif(self.busy):
            m.d.sync += count.eq(count + 1)
            with m.If(self.error):
                m.d.sync += [self.busy.eq(0), error.eq(1), status.eq(self.error_status)]
            with m.Elif(self.done):
                m.d.sync += [self.busy.eq(0), done.eq(1), cycles.eq(count)]
        return m

    def _write_channel(self, m: Module, rw: dict[str, Signal]) -> Signal:
        """AW and W are taken together; returns the "START written" strobe."""
        bus = self.s_axil
        take = Signal()
        m.d.comb += [
            take.eq(bus.awvalid & bus.wvalid & ~bus.bvalid),
            bus.awready.eq(take),
            bus.wready.eq(take),
            bus.bresp.eq(RESP_OKAY),
        ]
        with m.If(take):
            m.d.sync += bus.bvalid.eq(1)
        with m.Elif(bus.bready):
            m.d.sync += bus.bvalid.eq(0)
        word = bus.awaddr[2:]
        for name, reg in rw.items():
            with m.If(take & (word == _off(name) // REG_BYTES)):
                for b in range(4):
                    with m.If(bus.wstrb[b]):
                        m.d.sync += reg[8 * b : 8 * b + 8].eq(bus.wdata[8 * b : 8 * b + 8])
        start = Signal()
        m.d.comb += start.eq(
            take & (word == _off("CTRL") // REG_BYTES) & bus.wstrb[0] & bus.wdata[0]
        )
        assert int(Ctrl.START) == 1, "START must be bit 0 of CTRL"
        return start

    def _read_channel(self, m: Module, values: dict) -> None:
        bus = self.s_axil
        take = Signal()
        m.d.comb += [take.eq(bus.arvalid & ~bus.rvalid), bus.arready.eq(take), bus.rresp.eq(0)]
        with m.If(take):
            m.d.sync += bus.rvalid.eq(1)
            with m.Switch(bus.araddr[2:]):
                for name, value in values.items():
                    with m.Case(_off(name) // REG_BYTES):
                        m.d.sync += bus.rdata.eq(value)
                with m.Default():
                    m.d.sync += bus.rdata.eq(0)
        with m.Elif(bus.rready):
            m.d.sync += bus.rvalid.eq(0)

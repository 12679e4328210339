"""AXI4 and AXI-Lite signatures, named as cocotbext-axi and Xilinx IP expect (``araddr``...)."""

from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

#: AXI4 burst type INCR and the OKAY response.
BURST_INCR = 1
RESP_OKAY = 0
RESP_SLVERR = 2


def _check_width(value: object, what: str, allowed: tuple[int, ...]) -> int:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(map(str, allowed))}, not {value!r}")
    return value  # type: ignore[return-value]


def axi_lite_signature(addr_width: int, data_width: int = 32) -> wiring.Signature:
    """An AXI-Lite bus as seen from the master (a slave port is ``In(...)``, i.e. flipped).

    Members follow the AXI names without prefix; exported with a port named ``s_axil`` they
    become ``s_axil__awaddr`` and so on, what ``AxiLiteBus.from_prefix(dut, "s_axil",
    bus_separator="__")`` finds.
    """
    if not isinstance(addr_width, int) or addr_width < 2:
        raise ValueError(f"addr_width must be an int >= 2, not {addr_width!r}")
    _check_width(data_width, "data_width", (32, 64))
    return wiring.Signature(
        {
            "awaddr": Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1),
            "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        }
    )  # fmt: skip


def axi_read_signature(
    data_width: int, addr_width: int = 32, id_width: int = 1
) -> wiring.Signature:
    """The read channels (AR, R) of an AXI4 master."""
    _check_width(data_width, "data_width", (32, 64, 128, 256, 512))
    return wiring.Signature(
        {
            "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8), "arsize": Out(3),
            "arburst": Out(2), "arvalid": Out(1), "arready": In(1),
            "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
            "rvalid": In(1), "rready": Out(1),
        }
    )  # fmt: skip


def axi_write_signature(
    data_width: int, addr_width: int = 32, id_width: int = 1
) -> wiring.Signature:
    """The write channels (AW, W, B) of an AXI4 master."""
    _check_width(data_width, "data_width", (32, 64, 128, 256, 512))
    return wiring.Signature(
        {
            "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8), "awsize": Out(3),
            "awburst": Out(2), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
            "wvalid": Out(1), "wready": In(1),
            "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        }
    )  # fmt: skip

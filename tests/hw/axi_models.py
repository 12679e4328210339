"""Amaranth-simulator AXI models: an AXI-Lite master and an AXI4 memory slave with fixed latencies.

The memory's timing is sim/latency.py's DRAM model: a read burst's first beat is valid
``read_latency`` cycles after its AR handshake, then one beat per cycle while ``rready``; a write
burst's response is valid ``write_latency`` cycles after its last W beat. It serves one
outstanding burst per direction (the DMA engines issue one at a time) and records every burst.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


async def axil_write(ctx, bus, addr: int, value: int, strb: int = 0xF) -> None:
    """One AXI-Lite write (AW and W together), waiting for its response."""
    ctx.set(bus.awaddr, addr)
    ctx.set(bus.wdata, value)
    ctx.set(bus.wstrb, strb)
    ctx.set(bus.awvalid, 1)
    ctx.set(bus.wvalid, 1)
    ctx.set(bus.bready, 1)
    await ctx.tick().until(bus.awready & bus.wready)
    ctx.set(bus.awvalid, 0)
    ctx.set(bus.wvalid, 0)
    (resp,) = await ctx.tick().sample(bus.bresp).until(bus.bvalid)
    ctx.set(bus.bready, 0)
    assert resp == 0, f"write to {addr:#x} answered {resp}"


async def axil_read(ctx, bus, addr: int) -> int:
    """One AXI-Lite read; returns the data."""
    ctx.set(bus.araddr, addr)
    ctx.set(bus.arvalid, 1)
    ctx.set(bus.rready, 1)
    await ctx.tick().until(bus.arready)
    ctx.set(bus.arvalid, 0)
    data, resp = await ctx.tick().sample(bus.rdata, bus.rresp).until(bus.rvalid)
    ctx.set(bus.rready, 0)
    assert resp == 0, f"read of {addr:#x} answered {resp}"
    return int(data)


@dataclass
class AxiMemory:
    """A byte-addressed memory behind AXI4 read and write ports (numpy uint8)."""

    data: np.ndarray
    read_latency: int
    write_latency: int
    bus_bytes: int
    base: int = 0  # physical address of data[0]
    reads: list[tuple[int, int, int]] = field(default_factory=list)  # (cycle, addr, beats)
    writes: list[tuple[int, int, int]] = field(default_factory=list)

    def check_burst(self, addr: int, beats: int, size: int) -> None:
        assert size == self.bus_bytes.bit_length() - 1, f"burst size {size} is not the bus width"
        assert addr % self.bus_bytes == 0, f"burst address {addr:#x} is not beat-aligned"
        end = addr + beats * self.bus_bytes
        assert addr // 4096 == (end - 1) // 4096, f"burst {addr:#x}+{beats} crosses 4 KiB"
        lo, hi = addr - self.base, end - self.base
        assert 0 <= lo and hi <= len(self.data), f"burst {addr:#x}+{beats} is out of memory"

    async def serve_reads(self, ctx, bus) -> None:
        """The AR and R channels (a testbench process that never returns)."""
        ctx.set(bus.arready, 1)
        cycle, burst = 0, None  # burst: [addr, beats left, first-beat cycle]
        sampled = (bus.arvalid, bus.araddr, bus.arlen, bus.arsize, bus.arburst, bus.rready)
        async for _, _, arvalid, araddr, arlen, arsize, arburst, rready in ctx.tick().sample(
            *sampled
        ):
            if burst is not None and ctx.get(bus.rvalid) and rready:
                burst[0] += self.bus_bytes
                burst[1] -= 1
                if not burst[1]:
                    burst = None
            if arvalid:
                assert burst is None, "a second read burst while one is outstanding"
                assert arburst == 1, f"arburst must be INCR, not {arburst}"
                self.check_burst(araddr, arlen + 1, arsize)
                self.reads.append((cycle, araddr, arlen + 1))
                burst = [araddr - self.base, arlen + 1, cycle + self.read_latency]
            cycle += 1
            ready = burst is not None and cycle >= burst[2]
            ctx.set(bus.arready, burst is None)
            ctx.set(bus.rvalid, ready)
            if ready:
                beat = self.data[burst[0] : burst[0] + self.bus_bytes]
                ctx.set(bus.rdata, int.from_bytes(beat.tobytes(), "little"))
                ctx.set(bus.rlast, burst[1] == 1)

    async def serve_writes(self, ctx, bus) -> None:
        """The AW, W and B channels (a testbench process that never returns)."""
        ctx.set(bus.awready, 1)
        ctx.set(bus.wready, 1)
        cycle, burst, resp_at = 0, None, None  # burst: [addr, beats left]
        sampled = (
            bus.awvalid, bus.awaddr, bus.awlen, bus.awsize, bus.wvalid, bus.wdata, bus.wstrb,
            bus.wlast, bus.bready,
        )  # fmt: skip
        async for (
            _,
            _,
            awvalid,
            awaddr,
            awlen,
            awsize,
            wvalid,
            wdata,
            wstrb,
            wlast,
            bready,
        ) in ctx.tick().sample(*sampled):
            if resp_at is not None and cycle >= resp_at and bready:
                resp_at = None
            if awvalid:
                assert burst is None and resp_at is None, "a second write burst while one is open"
                self.check_burst(awaddr, awlen + 1, awsize)
                self.writes.append((cycle, awaddr, awlen + 1))
                burst = [awaddr - self.base, awlen + 1]
            if wvalid:
                assert burst is not None, "W beat before its AW"
                raw = int(wdata).to_bytes(self.bus_bytes, "little")
                for i in range(self.bus_bytes):
                    if wstrb >> i & 1:
                        self.data[burst[0] + i] = raw[i]
                burst[0] += self.bus_bytes
                burst[1] -= 1
                assert bool(wlast) == (burst[1] == 0), "wlast must mark the burst's last beat"
                if not burst[1]:
                    burst, resp_at = None, cycle + self.write_latency
            cycle += 1
            ctx.set(bus.awready, burst is None and resp_at is None)
            ctx.set(bus.bvalid, resp_at is not None and cycle >= resp_at)
